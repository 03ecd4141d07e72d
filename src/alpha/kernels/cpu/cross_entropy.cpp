// CPU cross-entropy kernels: one row per iteration (rows in parallel), each row read twice in the
// forward (max, then Σ exp) and twice in the backward (recompute p, write the gradient). The per-row
// losses (N scalars) are averaged with the fixed-order deterministic_sum.
#include "alpha/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "alpha/kernels/cpu/reduce.h"

namespace alpha::kernels::cpu {

template <class T>
void cross_entropy(const CrossEntropyArgs<T>& args) {
  using A = acc_t<T>;
  const int64_t N = args.rows, V = args.vocab;
  std::vector<A> row_loss(static_cast<size_t>(N));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const T* x = args.logits + r * V;
    A max = -std::numeric_limits<A>::infinity();
    for (int64_t j = 0; j < V; ++j) max = std::max(max, A(x[j]));
    A sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(A(x[j]) - max);
    A log_sum = std::log(sum);
    args.lse[r] = max + log_sum;
    // (max − x_target) + log Σ rather than lse − x_target: for large logits lse rounds to the coarse
    // spacing of its magnitude, while max − x_target of two close values is exact (Sterbenz).
    int32_t target = args.targets[r];
    row_loss[size_t(r)] = target == args.ignore_index ? A(0) : (max - A(x[target])) + log_sum;
  }
  int64_t counted = 0;
  for (int64_t r = 0; r < N; ++r) counted += args.targets[r] != args.ignore_index;
  A total = deterministic_sum<A>(N, [&](int64_t r) { return row_loss[size_t(r)]; });
  *args.loss = counted > 0 ? total / A(counted) : A(0);
  *args.counted_rows = counted;
}

template <class T>
void cross_entropy_backward(const CrossEntropyBackwardArgs<T>& args) {
  using A = acc_t<T>;
  const int64_t N = args.rows, V = args.vocab;
  const A scale = cross_entropy_gradient_factor(args, args.dloss_device ? double(*args.dloss_device) : 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const T* x = args.logits + r * V;
    T* dx = args.dlogits + r * V;
    int32_t target = args.targets[r];
    if (target == args.ignore_index) {
      std::fill(dx, dx + V, T(0));
      continue;
    }
    A lse = args.lse[r];
    for (int64_t j = 0; j < V; ++j) dx[j] = T(scale * std::exp(A(x[j]) - lse));
    dx[target] = T(scale * (std::exp(A(x[target]) - lse) - A(1)));
  }
}

#define ALPHA_INSTANTIATE(T)                                                 \
  template void cross_entropy<T>(const CrossEntropyArgs<T>&);                \
  template void cross_entropy_backward<T>(const CrossEntropyBackwardArgs<T>&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cpu
