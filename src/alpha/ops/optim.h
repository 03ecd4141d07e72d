// Optimiser kernels over parameter tensors, updated in place, on the tensors' device (f32 or f64 on the
// CPU; f32, bf16 or f16 on a CUDA device).
//
// Mixed precision: the trainer may keep f32 master weights and f32 moments while the model computes in
// bf16 or f16. adamw_step then takes the model's bf16/f16 gradient for the f32 param, and the overload
// with a compute copy writes the updated weights both into the f32 master and, rounded, into the model's
// bf16/f16 tensor in the same pass.
//
// Grad-norm clipping, deterministic on every device (fixed reduction orders, no atomics), each step one
// multi-tensor launch per dtype among the grads rather than one per grad:
//   norm = global_grad_norm(grads)        // a host double: one device-to-host read for all the grads
//   clip_grad_norm(grads, max_norm, norm) // coefficient computed on the host, grads scaled on the device
// or, with no host round trip at all (the values are the same bits):
//   Tensor norm = global_grad_norm_tensor(grads)          // 0-d f64 on the grads' device
//   Tensor coef = clip_grad_norm(grads, max_norm, norm)   // computed and applied on the device
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "alpha/tensor/tensor.h"

namespace alpha::ops {

// Stochastic rounding of a compute copy (kernels/optim.h): element i of the copy rounds up or down at random,
// unbiased, with the Philox bits of (seed, tensor, step, offset + i), so a run repeats bit for bit on every
// backend. `tensor` tells a list's tensors apart (the trainer: the parameter's index); `offset` is the first
// element's index in the whole tensor, so a shard draws the bits the whole tensor's step would.
struct StochasticRounding {
  uint64_t seed = 0;
  uint32_t tensor = 0;
  int64_t offset = 0;  // >= 0
};

struct AdamWConfig {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled: param -= lr · weight_decay · param
  int64_t step = 1;           // 1-based, for bias correction
  // The compute copy rounded stochastically (none: to nearest even); only beside a copy narrower than an f32
  // param (bf16 or f16): ValueError without a copy, DTypeError for another copy.
  std::optional<StochasticRounding> stochastic_rounding = std::nullopt;
};

// One fused AdamW step: m, v updated, then param. grad is scaled by grad_scale first (clipping).
// param, m and v share a dtype and device and are contiguous; grad has param's dtype, or is bf16 or f16
// for an f32 param (mixed precision).
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWConfig& config,
                double grad_scale = 1.0);
// The same step, also writing the updated param rounded to compute_copy's dtype into compute_copy, which
// has param's shape and device, is contiguous, and has grad's dtype or, for an f32 param with f32 grads,
// bf16 or f16: the f32 master updates the model's bf16/f16 weights in the same pass.
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor& compute_copy,
                const AdamWConfig& config, double grad_scale = 1.0);

// Whether adamw_step takes a compute copy of dtype `copy` beside a param and grad of these dtypes (the
// single-tensor op's rule above): the train layer asks before handing a parameter's held copy to the step.
bool adamw_takes_compute_copy(DType param, DType grad, DType copy);

// The step for a list of parameters, all on one device: params[k], grads[k], ms[k], vs[k] (and
// compute_copies[k]) as the single-tensor op's, stepped with configs[k] (e.g. each with its own weight
// decay). The same bits as the single-tensor op on each in turn, with one launch per (param, grad, copy)
// dtype of the list instead of one per tensor. An undefined compute_copies[k]: params[k] has no copy. Every
// list has one entry per param (ValueError otherwise);
// everything is checked before anything is updated, errors naming the entry ('grads[3]', 'configs[3].lr').
void adamw_step(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& ms,
                std::vector<Tensor>& vs, const std::vector<AdamWConfig>& configs, double grad_scale = 1.0);
void adamw_step(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& ms,
                std::vector<Tensor>& vs, std::vector<Tensor>& compute_copies, const std::vector<AdamWConfig>& configs,
                double grad_scale = 1.0);

// The list step with its factor read where the kernels run: grad_scale is a single-element f64 tensor on the
// params' device (step_guard's), in place of a host value; a NaN there leaves every param, moment and copy as
// it was (the step is skipped on the device, and the caller, who reads the guard's inputs later, knows it).
void adamw_step(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& ms,
                std::vector<Tensor>& vs, std::vector<Tensor>& compute_copies, const std::vector<AdamWConfig>& configs,
                const Tensor& grad_scale);
// The same with each update's per-step scalars read where the kernels run as well: terms, an f64 [P, 4]
// contiguous tensor on the params' device, row k adamw_step_terms's for params[k] (configs[k].lr and .step then
// go unused, the step's stochastic rounding too), so that a launch captured once (a CUDA graph) and replayed makes
// every later step, with the terms the host writes there before each replay. The same bits as the overload above with
// those configs.
void adamw_step(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& ms,
                std::vector<Tensor>& vs, std::vector<Tensor>& compute_copies, const std::vector<AdamWConfig>& configs,
                const Tensor& grad_scale, const Tensor& terms);
// The per-step scalars of each param's update with configs[k] (kernels::adamw_step_terms in the param's
// accumulation type, held in f64): an f64 [P, 4] tensor on the host, rows (step_size, inv_sqrt_bias_correction2,
// decay, step).
Tensor adamw_step_terms(const std::vector<Tensor>& params, const std::vector<AdamWConfig>& configs);
// The same terms written into `terms` on the params' device, for the step that reads them there: allocated when
// undefined or of another shape, else overwritten in place (its address stays, as a captured launch needs).
void write_adamw_step_terms(Tensor& terms, const std::vector<Tensor>& params, const std::vector<AdamWConfig>& configs);

// copies[k] = params[k] rounded stochastically to copies[k]'s dtype with roundings[k] at step `step`: the
// compute copy that adamw_step with that rounding and step wrote beside the param it left (a resumed run
// restores the copies with it). params[k] are f32, copies[k] bf16 or f16 of their shape, all contiguous on
// one device; an undefined copies[k]: nothing for params[k]. One launch per copy dtype.
void stochastic_round(const std::vector<Tensor>& params, std::vector<Tensor>& copies, int64_t step,
                      const std::vector<StochasticRounding>& roundings);

// √(Σ‖g‖²) over all tensors (on one device), in a fixed reduction order (deterministic): each tensor's
// Σ g² (f64) goes to its own slot of a buffer on that device, the slots are added in list order there, and
// the norm is read back once.
double global_grad_norm(const std::vector<Tensor>& grads);
// The same norm as a 0-d f64 tensor on the grads' device (the CPU for an empty list), without waiting.
Tensor global_grad_norm_tensor(const std::vector<Tensor>& grads);
// global_grad_norm_tensor in two halves, for a norm over gradients spread over several processes: each
// tensor's Σ g² (f64, a fixed-order sum) in its own slot of a 1-D f64 tensor on the grads' device; then
// √(the slots added in list order), 0-d f64 there. Between them the slots can be summed over the processes
// (an all-reduce), elementwise, so the norm still adds the same number of terms in the same order on every one.
Tensor sums_of_squares(const std::vector<Tensor>& grads);
Tensor norm_of_sums_of_squares(const Tensor& squares);

// min(1, max_norm / (norm + 1e-6)): the factor clip_grad_norm scales the grads by (max_norm > 0, norm finite
// and >= 0; ValueError otherwise).
double clip_coefficient(double max_norm, double norm);
// The factor a step multiplies the gradients of a loss scaled by loss_scale (>= 1) by, unscaled and clipped to
// max_norm (> 0; 0: no clipping), as a 0-d f64 tensor on scaled_norm's device, computed there without waiting
// (kernels::StepGuardArgs): scaled_norm is global_grad_norm_tensor's, losses the step's losses (f32 or f64, one
// dimension, on that device). NaN when the norm or a loss is not finite: the adamw_step that reads it skips.
Tensor step_guard(const Tensor& scaled_norm, const Tensor& losses, double loss_scale, double max_norm);
// Multiplies every grad by `factor` in place (no pass at all for 1).
void scale_grads(std::vector<Tensor>& grads, double factor);
// The same with the factor a single-element f64 tensor on the grads' device, read where the kernels run
// (nothing waits for the device; a factor of 1 leaves every value's bits as they are).
void scale_grads(std::vector<Tensor>& grads, const Tensor& factor);
// Scales every grad by clip_coefficient(max_norm, norm) in place; returns that coefficient.
double clip_grad_norm(std::vector<Tensor>& grads, double max_norm, double norm);
// The same with the norm as a 0-d f64 tensor on the grads' device (global_grad_norm_tensor's): the
// coefficient is computed there (a NaN norm gives 1, an infinite one 0: the caller checks the norm) and
// the grads are scaled by it there, so nothing waits for the device. Returns the coefficient, 0-d f64 there.
Tensor clip_grad_norm(std::vector<Tensor>& grads, double max_norm, const Tensor& norm);

}  // namespace alpha::ops
