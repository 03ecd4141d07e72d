// CPU optimiser kernels: AdamW is element-parallel (each element's update is independent); the sum of
// squares uses the fixed-order deterministic_sum in f64.
#include "alpha/kernels/optim.h"

#include <cmath>

#include "alpha/kernels/cpu/reduce.h"

namespace alpha::kernels::cpu {

template <class T>
void adamw_step(const AdamWArgs<T>& args) {
  using A = acc_t<T>;
  // Bias corrections once per step, in f64 so that large steps do not lose β^t to f32 rounding.
  const A bias_correction1 = A(1.0 - std::pow(double(args.beta1), double(args.step)));
  const A inv_sqrt_bias_correction2 = A(1.0 / std::sqrt(1.0 - std::pow(double(args.beta2), double(args.step))));
  const A step_size = args.lr / bias_correction1;
  const A decay = A(1) - args.lr * args.weight_decay;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) {
    A g = args.grad_scale * A(args.grad[i]);
    A m = args.beta1 * A(args.m[i]) + (A(1) - args.beta1) * g;
    A v = args.beta2 * A(args.v[i]) + (A(1) - args.beta2) * g * g;
    args.m[i] = T(m);
    args.v[i] = T(v);
    args.param[i] = T(A(args.param[i]) * decay - step_size * m / (std::sqrt(v) * inv_sqrt_bias_correction2 + args.eps));
  }
}

template <class T>
void sum_squares(const SumSquaresArgs<T>& args) {
  *args.out = deterministic_sum<double>(args.n, [x = args.x](int64_t i) { return double(x[i]) * double(x[i]); });
}

#define ALPHA_INSTANTIATE(T)                               \
  template void adamw_step<T>(const AdamWArgs<T>&);        \
  template void sum_squares<T>(const SumSquaresArgs<T>&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cpu
