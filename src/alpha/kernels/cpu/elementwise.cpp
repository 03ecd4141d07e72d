// CPU element-wise kernels: OpenMP over contiguous buffers. sum is deterministic (fixed block tree).
#include "alpha/kernels/elementwise.h"

#include <vector>

namespace alpha::kernels::cpu {

template <class T>
void add(const BinaryArgs<T>& args) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) args.out[i] = args.a[i] + args.b[i];
}

template <class T>
void mul(const BinaryArgs<T>& args) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) args.out[i] = args.a[i] * args.b[i];
}

template <class T>
void scale(const ScaleArgs<T>& args) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) args.out[i] = T(args.alpha * args.x[i]);
}

template <class T>
void axpy(const AxpyArgs<T>& args) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) args.y[i] = T(args.y[i] + args.alpha * args.x[i]);
}

template <class T>
void sum(const SumArgs<T>& args) {
  using A = acc_t<T>;
  int64_t blocks = (args.n + kSumBlock - 1) / kSumBlock;
  std::vector<A> partial(size_t(std::max<int64_t>(blocks, 1)), A(0));
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    A s = 0;
    int64_t end = std::min(args.n, (b + 1) * kSumBlock);
    for (int64_t i = b * kSumBlock; i < end; ++i) s += A(args.x[i]);
    partial[size_t(b)] = s;
  }
  for (size_t width = 1; width < partial.size(); width *= 2)
    for (size_t i = 0; i + width < partial.size(); i += 2 * width) partial[i] += partial[i + width];
  *args.out = partial[0];
}

#define ALPHA_INSTANTIATE(T)                              \
  template void add<T>(const BinaryArgs<T>&);             \
  template void mul<T>(const BinaryArgs<T>&);             \
  template void scale<T>(const ScaleArgs<T>&);            \
  template void axpy<T>(const AxpyArgs<T>&);              \
  template void sum<T>(const SumArgs<T>&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cpu
