// CPU optimiser kernels: AdamW is element-parallel (each element's update is independent); the sum of
// squares uses the fixed-order deterministic_sum in f64; the grad norm's finish is sequential.
#include "alpha/kernels/optim.h"

#include <cmath>

#include "alpha/kernels/cpu/reduce.h"

namespace alpha::kernels::cpu {

template <class T, class G>
void adamw_step(const AdamWArgs<T, G>& args) {
  using A = acc_t<T>;
  const AdamWStepTerms<A> terms = adamw_step_terms(args);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) {
    A g = args.grad_scale * A(args.grad[i]);
    A m = args.beta1 * A(args.m[i]) + (A(1) - args.beta1) * g;
    A v = args.beta2 * A(args.v[i]) + (A(1) - args.beta2) * g * g;
    args.m[i] = T(m);
    args.v[i] = T(v);
    args.param[i] = T(A(args.param[i]) * terms.decay -
                      terms.step_size * m / (std::sqrt(v) * terms.inv_sqrt_bias_correction2 + args.eps));
    if (args.param_copy) args.param_copy[i] = G(A(args.param[i]));
  }
}

template <class T>
void sum_squares(const SumSquaresArgs<T>& args) {
  *args.out = deterministic_sum<double>(args.n, [x = args.x](int64_t i) { return double(x[i]) * double(x[i]); });
}

void grad_norm(const GradNormArgs& args) {
  double total = 0;
  for (int64_t k = 0; k < args.count; ++k) total += args.squares[k];
  *args.norm = std::sqrt(total);
}

void clip_coefficient(const ClipCoefficientArgs& args) {
  const double c = args.max_norm / (*args.norm + 1e-6);
  *args.coefficient = c < 1.0 ? c : 1.0;
}

template <class T>
void scale_by(const ScaleByArgs<T>& args) {
  using A = acc_t<T>;
  const A factor = A(*args.factor);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) args.x[i] = T(factor * A(args.x[i]));
}

template void adamw_step<float, float>(const AdamWArgs<float, float>&);
template void adamw_step<double, double>(const AdamWArgs<double, double>&);
template void adamw_step<float, bf16>(const AdamWArgs<float, bf16>&);
template void adamw_step<float, f16>(const AdamWArgs<float, f16>&);

#define ALPHA_INSTANTIATE(T)                               \
  template void sum_squares<T>(const SumSquaresArgs<T>&);  \
  template void scale_by<T>(const ScaleByArgs<T>&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cpu
