// Optimiser kernels over flat parameter buffers, all in place:
// - adamw_step fuses the whole AdamW update into one pass over (param, grad, m, v): grad is first
//   multiplied by grad_scale (the clipping coefficient, so clipping needs no separate pass over the
//   grads), m and v are updated, and param gets the decoupled weight decay and the bias-corrected step
//     g = grad_scale·grad;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
//     param = param·(1 − lr·wd) − lr · (m / (1−β1^t)) / (√(v / (1−β2^t)) + eps),   t = step (1-based)
//   computed per element in acc_t<T>, with the per-step scalars of adamw_step_terms.
//   Mixed precision: AdamWArgs<T, G> gives the gradient its own dtype G, the model's compute dtype, while
//   the parameter and its moments are the master copy in T: T = f32 with G = bf16 or f16 (the model
//   computes in bf16, the optimiser keeps f32 weights, m and v). The optional param_copy, in G, receives
//   the updated parameter rounded to G in the same pass, so the model's compute copy needs no separate
//   conversion pass. G = T (the default) is plain AdamW; param_copy may then be left null. The copy's type
//   C defaults to G; C = bf16 or f16 with G = T = f32 is the trainer's case, whose gradients accumulate in
//   f32 while the model computes from the copy.
//   Stochastic rounding (AdamWArgs::stochastic_rounding): the copy's element i is instead
//   round_stochastic<C>(param, stochastic_rounding_bits(rounding, i)) (core/half.h): rounded up or down at
//   random, unbiased, with Philox bits (core/philox.h) keyed by rounding.seed at counter rounding.offset + i
//   in substream stochastic_rounding_stream(tensor, step). The bits depend on nothing else (not the backend,
//   the launch or the thread count); a shard of a tensor starting at element k passes offset k and draws the
//   whole tensor's bits for its elements. stochastic_round writes the same copy from a given f32 master (the
//   copy a step wrote, from the param it left: a resumed run, or ZeRO-1 after gathering the params).
// - sum_squares gives Σ x² in f64 with a fixed reduction order, the building block of the global grad
//   norm: the same grads give the same norm bits for every thread count (and, on a GPU, every run).
// - step_guard gives a step's gradient factor where the norm lies (AdamWArgs::grad_scale_at reads it): the
//   optimiser's step can be queued before the host has read the loss and the norm, skipped on the device
//   when either is not finite.
// - grad_norm and clip_coefficient finish the global norm and the clipping coefficient from the per-tensor
//   sums of squares where those lie (in device memory for a GPU), and scale_by multiplies a buffer by a
//   factor read from that memory: clipping on a GPU then needs no host round trip (ops/optim.h).
// In-place scaling of the grads by a host value is kernels::<backend>::scale (elementwise.h) with out == x.
// Multi-tensor variants (multi_*) take a list of the single-tensor args, one entry per tensor (each with
// its own pointers, n and scalars), and give each tensor exactly the single-tensor kernel's bits: on a GPU
// one launch (two for the sums of squares) covers the whole list instead of one per tensor (a model's ~100
// parameters: ~300 launches per step become ~4). The CPU versions loop over the single-tensor kernels.
#pragma once
#include <cmath>
#include <cstdint>
#include <span>

#include "alpha/core/dtype.h"
#include "alpha/core/hd.h"
#include "alpha/core/philox.h"
#include "alpha/core/stream.h"
#include "alpha/kernels/elementwise.h"
#include "alpha/kernels/multi_tensor.h"

namespace alpha::kernels {

// Where a tensor's stochastic rounding draws its bits: Philox keyed by `seed`, element i at counter offset + i
// of substream `stream`.
struct StochasticRounding {
  uint64_t seed = 0;
  uint64_t stream = 0;  // stochastic_rounding_stream(tensor, step)
  uint64_t offset = 0;  // the counter of element 0: its index in the whole tensor (0, or a shard's start)
};

// The substream of tensor `tensor` (an index in the caller's parameter list) at step `step` (1-based, taken
// modulo 2³²): each (tensor, step) draws its own bits, never those of dropout (substream 0: step >= 1).
ALPHA_HD constexpr uint64_t stochastic_rounding_stream(uint32_t tensor, int64_t step) {
  return (uint64_t(tensor) << 32) | uint32_t(uint64_t(step));
}

// The 32 random bits element i of a buffer rounds with.
ALPHA_HD uint32_t stochastic_rounding_bits(const StochasticRounding& r, int64_t i) {
  return philox_bits(r.seed, r.offset + uint64_t(i), r.stream);
}

// The values of an update's row of AdamWArgs::terms_at: step_size, inv_sqrt_bias_correction2, decay, step.
constexpr int kAdamWTerms = 4;

// r at the step a row of terms carries (its last value): the substream of r's tensor at that step
// (stochastic_rounding_stream), for an update that reads its step where it runs (AdamWArgs::terms_at).
ALPHA_HD StochasticRounding stochastic_rounding_at_step(StochasticRounding r, const double* terms) {
  r.stream = stochastic_rounding_stream(uint32_t(r.stream >> 32), int64_t(terms[kAdamWTerms - 1]));
  return r;
}

template <class T, class G = T, class C = G>
struct AdamWArgs {
  T* param;           // (n), updated in place: the master copy
  const G* grad;      // (n)
  T* m;               // (n) first moment, updated in place
  T* v;               // (n) second moment, updated in place
  acc_t<T> lr;
  acc_t<T> beta1;
  acc_t<T> beta2;
  acc_t<T> eps;
  acc_t<T> weight_decay;
  acc_t<T> grad_scale;
  int64_t step;       // 1-based, for the bias corrections
  int64_t n;
  C* param_copy = nullptr;  // (n) or null: receives the updated param rounded to C (the compute copy)
  bool stochastic_rounding = false;  // param_copy rounded stochastically (T = f32, C = bf16 or f16), not to nearest
  StochasticRounding rounding{};     // its bits, when stochastic_rounding
  // (1) in the param's memory, or null: the factor read there replaces grad_scale (rounded to acc_t<T> as
  // grad_scale is), and a NaN there leaves param, m, v and param_copy as they are: a skipped step.
  const double* grad_scale_at = nullptr;
  // (kAdamWTerms) in the param's memory, or null: this update's adamw_step_terms (step_size,
  // inv_sqrt_bias_correction2, decay, each a value of acc_t<T> held in f64, then the step, whose stochastic
  // rounding's substream it selects), read where the kernel runs in place of those of lr and step. A launch
  // captured once (a CUDA graph) then makes every later step, whose lr and step the host writes there.
  const double* terms_at = nullptr;
};

// out = x rounded stochastically to C (bf16 or f16) with `rounding`'s bits: the compute copy an AdamW step with
// that rounding writes beside the f32 master x.
template <class C>
struct StochasticRoundArgs {
  const float* x;  // (n)
  C* out;          // (n)
  int64_t n;
  StochasticRounding rounding;
};

// The per-step scalars of an AdamW update, computed once on the host (the bias corrections in f64, so
// that large steps do not lose β^t to f32 rounding) and shared by the CPU and CUDA kernels.
template <class A>
struct AdamWStepTerms {
  A step_size;                  // lr / (1 − β1^t)
  A inv_sqrt_bias_correction2;  // 1 / √(1 − β2^t)
  A decay;                      // 1 − lr·wd
};

// The terms of AdamWArgs::terms_at, as the kernels take them.
template <class A>
ALPHA_HD AdamWStepTerms<A> adamw_terms_from(const double* terms) {
  return {A(terms[0]), A(terms[1]), A(terms[2])};
}

// The terms of an update with these scalars in the accumulation type A at `step` (1-based).
template <class A>
AdamWStepTerms<A> adamw_step_terms(A lr, A beta1, A beta2, A weight_decay, int64_t step) {
  const A bias_correction1 = A(1.0 - std::pow(double(beta1), double(step)));
  return {lr / bias_correction1, A(1.0 / std::sqrt(1.0 - std::pow(double(beta2), double(step)))),
          A(1) - lr * weight_decay};
}

template <class T, class G, class C>
AdamWStepTerms<acc_t<T>> adamw_step_terms(const AdamWArgs<T, G, C>& args) {
  return adamw_step_terms(args.lr, args.beta1, args.beta2, args.weight_decay, args.step);
}

template <class T>
struct SumSquaresArgs {
  const T* x;   // (n)
  double* out;  // (1) Σ x², accumulated in f64
  int64_t n;
};

// norm = √(Σ_k squares[k]), the terms added in k order in f64.
struct GradNormArgs {
  const double* squares;  // (count) per-tensor sums of squares
  int64_t count;
  double* norm;           // (1)
};

// factor = coef / loss_scale, coef = min(1, max_norm / (scaled_norm / loss_scale + 1e-6)) (1 when max_norm is 0):
// the factor a step multiplies the gradients of a loss multiplied by loss_scale by, unscaled and clipped, as
// the host computes it (train::AdamW::clipped_step, the same f64 operations); NaN when the norm or any of the
// losses is not finite, which makes the step a no-op (AdamWArgs::grad_scale_at). L, the losses' type: float or
// double (the model's loss as it comes, so that no conversion is needed to read them).
template <class L>
struct StepGuardArgs {
  const double* scaled_norm;  // (1) the global norm of the scaled gradients
  const L* losses;            // (loss_count) the step's losses, of the unscaled loss
  int64_t loss_count;
  double loss_scale;  // >= 1
  double max_norm;    // >= 0; 0: no clipping
  double* factor;     // (1)
};

// The factor of StepGuardArgs (the CPU and CUDA kernels' one expression).
template <class L>
ALPHA_HD double step_guard_factor(const StepGuardArgs<L>& a) {
  // x − x is 0 for a finite x and NaN for ±inf and NaN, so `poison` is 0 or NaN (no library NaN needed on a GPU).
  double poison = *a.scaled_norm - *a.scaled_norm;
  for (int64_t k = 0; k < a.loss_count; ++k) poison += double(a.losses[k]) - double(a.losses[k]);
  if (poison != 0.0) return poison;
  double coef = 1.0;
  if (a.max_norm > 0.0) {
    const double c = a.max_norm / (*a.scaled_norm / a.loss_scale + 1e-6);
    coef = c < 1.0 ? c : 1.0;
  }
  return coef / a.loss_scale;
}

// coefficient = min(1, max_norm / (norm + 1e-6)), as (c < 1 ? c : 1): a NaN norm gives 1 (the grads keep
// their NaNs for the caller to see), an infinite one 0.
struct ClipCoefficientArgs {
  const double* norm;  // (1)
  double max_norm;     // > 0
  double* coefficient; // (1)
};

// x = factor·x in acc_t<T> (factor rounded to it first), as scale with out == x and alpha = factor.
template <class T>
struct ScaleByArgs {
  T* x;                  // (n), updated in place
  const double* factor;  // (1), in the same memory as x
  int64_t n;
};

// The mixed-precision (T, G, C) of AdamWArgs both backends instantiate, one list so that neither misses a
// combination ops::adamw_step dispatches to: f32 masters with bf16/f16 grads and copies, and f32 grads
// with bf16/f16 copies. X is an instantiating macro taking (T, G, C).
#define ALPHA_MIXED_PRECISION_ADAMW_TYPES(X) \
  X(float, bf16, bf16) X(float, f16, f16) X(float, float, bf16) X(float, float, f16)

namespace cpu {
template <class T, class G, class C> void adamw_step(const AdamWArgs<T, G, C>& args);
template <class T> void sum_squares(const SumSquaresArgs<T>& args);
void grad_norm(const GradNormArgs& args);
void clip_coefficient(const ClipCoefficientArgs& args);
template <class L> void step_guard(const StepGuardArgs<L>& args);
template <class T> void scale_by(const ScaleByArgs<T>& args);
template <class T, class G, class C> void multi_adamw_step(std::span<const AdamWArgs<T, G, C>> tensors);
template <class T> void multi_sum_squares(std::span<const SumSquaresArgs<T>> tensors);
template <class T> void multi_scale(std::span<const ScaleArgs<T>> tensors);
template <class T> void multi_scale_by(std::span<const ScaleByArgs<T>> tensors);
template <class C> void stochastic_round(const StochasticRoundArgs<C>& args);
template <class C> void multi_stochastic_round(std::span<const StochasticRoundArgs<C>> tensors);
}  // namespace cpu

#if ALPHA_WITH_CUDA
// Device pointers; queued on `stream` (Stream{}: the current device's default stream). T = float, bf16 or
// f16, computing in f32; AdamWArgs<T, G, C> for G = C = T, for T = float with G = C = bf16 or f16, and for
// T = G = float with C = bf16 or f16 (f32 gradients of the f32 master, the compute copy in bf16/f16).
// A stochastically rounded copy, and stochastic_round's (C = bf16 or f16), equal the CPU's bit for bit.
// adamw_step and scale_by round exactly as the CPU kernels in f32 do (__fmul_rn/__fadd_rn/__fdiv_rn/
// __fsqrt_rn, no fused multiply-add): their outputs equal the CPU kernel's in f32 rounded to T, bit for bit.
// sum_squares accumulates in f64 in a fixed order (chunks, then one final block; no atomics): the same
// input gives the same bits on every run, not the CPU's bits (a different order). grad_norm, clip_coefficient
// and step_guard compute exactly what the CPU does (one thread, the same f64 operations).
// The multi_* kernels give every tensor the bits its single-tensor CUDA kernel gives it (multi_scale those of
// elementwise.h's scale); a list splits into several launches only past kTensorsPerLaunch tensors.
namespace cuda {
template <class T, class G, class C> void adamw_step(const AdamWArgs<T, G, C>& args, Stream stream);
template <class T> void sum_squares(const SumSquaresArgs<T>& args, Stream stream);
void grad_norm(const GradNormArgs& args, Stream stream);
void clip_coefficient(const ClipCoefficientArgs& args, Stream stream);
template <class L> void step_guard(const StepGuardArgs<L>& args, Stream stream);
template <class T> void scale_by(const ScaleByArgs<T>& args, Stream stream);
template <class T, class G, class C>
void multi_adamw_step(std::span<const AdamWArgs<T, G, C>> tensors, Stream stream);
template <class T> void multi_sum_squares(std::span<const SumSquaresArgs<T>> tensors, Stream stream);
template <class T> void multi_scale(std::span<const ScaleArgs<T>> tensors, Stream stream);
template <class T> void multi_scale_by(std::span<const ScaleByArgs<T>> tensors, Stream stream);
template <class C> void stochastic_round(const StochasticRoundArgs<C>& args, Stream stream);
template <class C> void multi_stochastic_round(std::span<const StochasticRoundArgs<C>> tensors, Stream stream);
}  // namespace cuda
#endif

}  // namespace alpha::kernels
