// CPU activation kernels: OpenMP over elements (GELU, softcap) or rows (softmax), computing in acc_t<T>.
// Softmax keeps each row's reductions sequential, so results do not depend on the thread count.
#include "alpha/kernels/activation.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace alpha::kernels::cpu {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;  // √(2/π)
constexpr double kGeluCubic = 0.044715;
}  // namespace

template <class T>
void gelu(const GeluArgs<T>& args) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) {
    A x = A(args.x[i]);
    A t = std::tanh(A(kSqrt2OverPi) * (x + A(kGeluCubic) * x * x * x));
    args.y[i] = T(A(0.5) * x * (A(1) + t));
  }
}

// d/dx [½x(1 + tanh u)] with u = √(2/π)(x + 0.044715x³): ½(1 + t) + ½x(1 − t²)·√(2/π)(1 + 3·0.044715x²).
template <class T>
void gelu_backward(const GeluBackwardArgs<T>& args) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) {
    A x = A(args.x[i]);
    A t = std::tanh(A(kSqrt2OverPi) * (x + A(kGeluCubic) * x * x * x));
    A du = A(kSqrt2OverPi) * (A(1) + A(3 * kGeluCubic) * x * x);
    args.dx[i] = T(A(args.dy[i]) * (A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * du));
  }
}

template <class T>
void softcap(const SoftcapArgs<T>& args) {
  using A = acc_t<T>;
  const A inv_cap = A(1) / args.cap;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) args.y[i] = T(args.cap * std::tanh(A(args.x[i]) * inv_cap));
}

template <class T>
void softcap_backward(const SoftcapBackwardArgs<T>& args) {
  using A = acc_t<T>;
  const A inv_cap = A(1) / args.cap;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) {
    A s = A(args.y[i]) * inv_cap;
    args.dx[i] = T(A(args.dy[i]) * (A(1) - s * s));
  }
}

template <class T>
void softmax(const SoftmaxArgs<T>& args) {
  using A = acc_t<T>;
  const int64_t cols = args.cols;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < args.rows; ++r) {
    const T* x = args.x + r * cols;
    T* y = args.y + r * cols;
    A max = -std::numeric_limits<A>::infinity();
    for (int64_t c = 0; c < cols; ++c) max = std::max(max, A(x[c]));
    // y holds the exponentials until they are normalised: exact, since T is acc_t<T> for f32 and f64.
    A total = 0;
    for (int64_t c = 0; c < cols; ++c) {
      A e = std::exp(A(x[c]) - max);
      y[c] = T(e);
      total += e;
    }
    const A inv_total = A(1) / total;
    for (int64_t c = 0; c < cols; ++c) y[c] = T(A(y[c]) * inv_total);
  }
}

template <class T>
void softmax_backward(const SoftmaxBackwardArgs<T>& args) {
  using A = acc_t<T>;
  const int64_t cols = args.cols;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < args.rows; ++r) {
    const T* dy = args.dy + r * cols;
    const T* y = args.y + r * cols;
    A dot = 0;
    for (int64_t c = 0; c < cols; ++c) dot += A(dy[c]) * A(y[c]);
    T* dx = args.dx + r * cols;
    for (int64_t c = 0; c < cols; ++c) dx[c] = T(A(y[c]) * (A(dy[c]) - dot));
  }
}

#define ALPHA_INSTANTIATE(T)                                               \
  template void gelu<T>(const GeluArgs<T>&);                               \
  template void gelu_backward<T>(const GeluBackwardArgs<T>&);              \
  template void softcap<T>(const SoftcapArgs<T>&);                         \
  template void softcap_backward<T>(const SoftcapBackwardArgs<T>&);        \
  template void softmax<T>(const SoftmaxArgs<T>&);                         \
  template void softmax_backward<T>(const SoftmaxBackwardArgs<T>&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cpu
