// CPU layer norm: OpenMP over rows. Forward: Welford statistics, then the normalised row. Backward, per
// row with x̂ = (x − mean)·rstd and g = dy·weight:
//   dx = rstd·(g − mean(g) − x̂·mean(g·x̂)),  dweight += dy·x̂,  dbias += dy,
// the last two through the fixed-order row reduction (row_reduce.h).
#include "alpha/kernels/layernorm.h"

#include <cmath>
#include <vector>

#include "alpha/kernels/cpu/row_reduce.h"

namespace alpha::kernels::cpu {

template <class T>
void layernorm(const LayerNormArgs<T>& args) {
  using A = acc_t<T>;
  const int64_t cols = args.cols;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < args.rows; ++r) {
    const T* x = args.x + r * cols;
    A mean = 0, m2 = 0;
    for (int64_t c = 0; c < cols; ++c) {
      A v = A(x[c]);
      A delta = v - mean;
      mean += delta / A(c + 1);
      m2 += delta * (v - mean);
    }
    A rstd = A(1) / std::sqrt(m2 / A(cols) + args.eps);
    T* y = args.y + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      A v = (A(x[c]) - mean) * rstd * A(args.weight[c]);
      y[c] = T(args.bias ? v + A(args.bias[c]) : v);
    }
    args.mean[r] = mean;
    args.rstd[r] = rstd;
  }
}

template <class T>
void layernorm_backward(const LayerNormBackwardArgs<T>& args) {
  using A = acc_t<T>;
  const int64_t cols = args.cols;
  const bool reduce = args.dweight || args.dbias;
  // Accumulators per row block: dweight in [0, cols), dbias in [cols, 2·cols).
  std::vector<A> sums(reduce ? size_t(2 * cols) : 0);
  reduce_rows(args.rows, reduce ? 2 * cols : 0, sums.data(), [&](int64_t r, A* acc) {
    const T* dy = args.dy + r * cols;
    const T* x = args.x + r * cols;
    const A mean = args.mean[r], rstd = args.rstd[r];
    A sum_g = 0, sum_g_xhat = 0;
    for (int64_t c = 0; c < cols; ++c) {
      A xhat = (A(x[c]) - mean) * rstd, g = A(dy[c]) * A(args.weight[c]);
      sum_g += g;
      sum_g_xhat += g * xhat;
      if (reduce) {
        acc[c] += A(dy[c]) * xhat;
        acc[cols + c] += A(dy[c]);
      }
    }
    if (!args.dx) return;
    const A mean_g = sum_g / A(cols), mean_g_xhat = sum_g_xhat / A(cols);
    T* dx = args.dx + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      A xhat = (A(x[c]) - mean) * rstd;
      const A grad = rstd * (A(dy[c]) * A(args.weight[c]) - mean_g - xhat * mean_g_xhat);
      dx[c] = T(args.accumulate_dx ? A(dx[c]) + grad : grad);
    }
  });
  for (int64_t c = 0; c < cols && reduce; ++c) {
    if (args.dweight) args.dweight[c] = sums[size_t(c)];
    if (args.dbias) args.dbias[c] = sums[size_t(cols + c)];
  }
}

#define ALPHA_INSTANTIATE(T)                                                 \
  template void layernorm<T>(const LayerNormArgs<T>&);                       \
  template void layernorm_backward<T>(const LayerNormBackwardArgs<T>&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cpu
