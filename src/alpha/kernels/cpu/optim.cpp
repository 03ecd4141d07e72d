// CPU optimiser kernels: AdamW is element-parallel (each element's update is independent); the sum of
// squares uses the fixed-order deterministic_sum in f64; the grad norm's finish is sequential. The
// multi-tensor kernels run the single-tensor ones tensor by tensor (a CPU has no launches to save).
#include "alpha/kernels/optim.h"

#include <cmath>
#include <type_traits>

#include "alpha/kernels/cpu/reduce.h"

namespace alpha::kernels::cpu {

namespace {

// Element i's compute copy of `value`: rounded stochastically when asked (an f32 value to bf16 or f16), else
// to nearest even.
template <class C, class A>
C copy_of(A value, bool stochastic, const StochasticRounding& rounding, int64_t i) {
  if constexpr (std::is_same_v<A, float> && !std::is_same_v<C, float>)
    if (stochastic) return round_stochastic<C>(value, stochastic_rounding_bits(rounding, i));
  return C(value);
}

}  // namespace

template <class T, class G, class C>
void adamw_step(const AdamWArgs<T, G, C>& args) {
  using A = acc_t<T>;
  const AdamWStepTerms<A> terms = args.terms_at ? adamw_terms_from<A>(args.terms_at) : adamw_step_terms(args);
  const StochasticRounding rounding =
      args.terms_at ? stochastic_rounding_at_step(args.rounding, args.terms_at) : args.rounding;
  A grad_scale = args.grad_scale;
  if (args.grad_scale_at) {
    if (std::isnan(*args.grad_scale_at)) return;  // a skipped step
    grad_scale = A(*args.grad_scale_at);
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) {
    A g = grad_scale * A(args.grad[i]);
    A m = args.beta1 * A(args.m[i]) + (A(1) - args.beta1) * g;
    A v = args.beta2 * A(args.v[i]) + (A(1) - args.beta2) * g * g;
    args.m[i] = T(m);
    args.v[i] = T(v);
    args.param[i] = T(A(args.param[i]) * terms.decay -
                      terms.step_size * m / (std::sqrt(v) * terms.inv_sqrt_bias_correction2 + args.eps));
    if (args.param_copy) args.param_copy[i] = copy_of<C>(A(args.param[i]), args.stochastic_rounding, rounding, i);
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

template <class L>
void step_guard(const StepGuardArgs<L>& args) {
  *args.factor = step_guard_factor(args);
}
template void step_guard<float>(const StepGuardArgs<float>&);
template void step_guard<double>(const StepGuardArgs<double>&);

template <class T>
void scale_by(const ScaleByArgs<T>& args) {
  using A = acc_t<T>;
  const A factor = A(*args.factor);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) args.x[i] = T(factor * A(args.x[i]));
}

template <class C>
void stochastic_round(const StochasticRoundArgs<C>& args) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) args.out[i] = copy_of<C>(args.x[i], true, args.rounding, i);
}

template <class T, class G, class C>
void multi_adamw_step(std::span<const AdamWArgs<T, G, C>> tensors) {
  for (const AdamWArgs<T, G, C>& args : tensors) adamw_step(args);
}

template <class T>
void multi_sum_squares(std::span<const SumSquaresArgs<T>> tensors) {
  for (const SumSquaresArgs<T>& args : tensors) sum_squares(args);
}

template <class T>
void multi_scale(std::span<const ScaleArgs<T>> tensors) {
  for (const ScaleArgs<T>& args : tensors) scale(args);
}

template <class T>
void multi_scale_by(std::span<const ScaleByArgs<T>> tensors) {
  for (const ScaleByArgs<T>& args : tensors) scale_by(args);
}

#define ALPHA_INSTANTIATE_ADAMW(T, G, C)                                      \
  template void adamw_step<T, G, C>(const AdamWArgs<T, G, C>&);               \
  template void multi_adamw_step<T, G, C>(std::span<const AdamWArgs<T, G, C>>);
ALPHA_INSTANTIATE_ADAMW(float, float, float)
ALPHA_INSTANTIATE_ADAMW(double, double, double)
ALPHA_MIXED_PRECISION_ADAMW_TYPES(ALPHA_INSTANTIATE_ADAMW)
#undef ALPHA_INSTANTIATE_ADAMW

template <class C>
void multi_stochastic_round(std::span<const StochasticRoundArgs<C>> tensors) {
  for (const StochasticRoundArgs<C>& args : tensors) stochastic_round(args);
}

#define ALPHA_INSTANTIATE_ROUND(C)                                        \
  template void stochastic_round<C>(const StochasticRoundArgs<C>&);       \
  template void multi_stochastic_round<C>(std::span<const StochasticRoundArgs<C>>);
ALPHA_INSTANTIATE_ROUND(bf16)
ALPHA_INSTANTIATE_ROUND(f16)
#undef ALPHA_INSTANTIATE_ROUND

#define ALPHA_INSTANTIATE(T)                                                \
  template void sum_squares<T>(const SumSquaresArgs<T>&);                   \
  template void scale_by<T>(const ScaleByArgs<T>&);                         \
  template void multi_sum_squares<T>(std::span<const SumSquaresArgs<T>>);   \
  template void multi_scale<T>(std::span<const ScaleArgs<T>>);              \
  template void multi_scale_by<T>(std::span<const ScaleByArgs<T>>);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cpu
