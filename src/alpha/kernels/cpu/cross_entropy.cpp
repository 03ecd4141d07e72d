// CPU cross-entropy kernels: one row per iteration (rows in parallel), each row read twice in the
// forward (max, then Σ exp) and twice in the backward (recompute p, write the gradient); with_grad does both
// for a row before the next. The per-row
// losses (N scalars) are averaged with the fixed-order deterministic_sum.
#include "alpha/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "alpha/kernels/cpu/reduce.h"

namespace alpha::kernels::cpu {

namespace {

// One row's lse and loss (0 for an ignored row).
template <class A>
struct RowLoss {
  A lse;
  A loss;
};

template <class T>
RowLoss<acc_t<T>> row_loss(const T* x, int64_t V, int32_t target, int32_t ignore_index) {
  using A = acc_t<T>;
  A max = -std::numeric_limits<A>::infinity();
  for (int64_t j = 0; j < V; ++j) max = std::max(max, A(x[j]));
  A sum = 0;
  for (int64_t j = 0; j < V; ++j) sum += std::exp(A(x[j]) - max);
  const A log_sum = std::log(sum);
  // (max − x_target) + log Σ rather than lse − x_target: for large logits lse rounds to the coarse
  // spacing of its magnitude, while max − x_target of two close values is exact (Sterbenz).
  return {max + log_sum, target == ignore_index ? A(0) : (max - A(x[target])) + log_sum};
}

// The mean of the row losses over the counted rows, in a fixed order, into args.loss and args.counted_rows.
template <class T>
void write_mean(const CrossEntropyArgs<T>& args, const std::vector<acc_t<T>>& row_losses) {
  using A = acc_t<T>;
  int64_t counted = 0;
  for (int64_t r = 0; r < args.rows; ++r) counted += args.targets[r] != args.ignore_index;
  A total = deterministic_sum<A>(args.rows, [&](int64_t r) { return row_losses[size_t(r)]; });
  *args.loss = counted > 0 ? total / A(counted) : A(0);
  *args.counted_rows = counted;
}

// dx = scale · (p − onehot(target)) for one counted row; x may be dx itself (its target logit is read first).
template <class T>
void write_row_gradient(const T* x, T* dx, int64_t V, int32_t target, acc_t<T> lse, acc_t<T> scale) {
  using A = acc_t<T>;
  const A target_gradient = scale * (std::exp(A(x[target]) - lse) - A(1));
  for (int64_t j = 0; j < V; ++j) dx[j] = T(scale * std::exp(A(x[j]) - lse));
  dx[target] = T(target_gradient);
}

}  // namespace

template <class T>
void cross_entropy(const CrossEntropyArgs<T>& args) {
  std::vector<acc_t<T>> row_losses(static_cast<size_t>(args.rows));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < args.rows; ++r) {
    const RowLoss<acc_t<T>> row =
        row_loss(args.logits + r * args.vocab, args.vocab, args.targets[r], args.ignore_index);
    args.lse[r] = row.lse;
    row_losses[size_t(r)] = row.loss;
  }
  write_mean(args, row_losses);
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
    write_row_gradient(x, dx, V, target, A(args.lse[r]), scale);
  }
}

template <class T>
void cross_entropy_with_grad(const CrossEntropyWithGradArgs<T>& args) {
  const CrossEntropyArgs<T>& f = args.forward;
  const int64_t V = f.vocab;
  std::vector<acc_t<T>> row_losses(static_cast<size_t>(f.rows));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < f.rows; ++r) {
    const T* x = f.logits + r * V;
    T* dx = args.dlogits + r * V;
    const int32_t target = f.targets[r];
    const RowLoss<acc_t<T>> row = row_loss(x, V, target, f.ignore_index);
    f.lse[r] = row.lse;
    row_losses[size_t(r)] = row.loss;
    if (target == f.ignore_index)
      std::fill(dx, dx + V, T(0));
    else
      write_row_gradient(x, dx, V, target, row.lse, args.scale);
  }
  write_mean(f, row_losses);
}

#define ALPHA_INSTANTIATE(T)                                                   \
  template void cross_entropy<T>(const CrossEntropyArgs<T>&);                  \
  template void cross_entropy_backward<T>(const CrossEntropyBackwardArgs<T>&); \
  template void cross_entropy_with_grad<T>(const CrossEntropyWithGradArgs<T>&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cpu
