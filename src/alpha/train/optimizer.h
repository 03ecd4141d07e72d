// AdamW with decoupled weight decay over a model's named parameters. Moments m and v live beside each
// parameter (same shape, dtype and device); weight decay applies only to parameters flagged for it.
// The state exports as named tensors (m/<name>, v/<name>) plus the step count, so a checkpoint restores
// it exactly and a resumed run continues bit for bit.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "alpha/nn/module.h"
#include "alpha/ops/optim.h"
#include "alpha/tensor/tensor.h"

namespace alpha::train {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // applied to parameters whose decay flag is set
  // Stochastic rounding of the held bf16/f16 compute copies a step rewrites (ops::StochasticRounding), the
  // k-th parameter drawing tensor k's bits under this seed at the step count; none: round to nearest even.
  std::optional<uint64_t> stochastic_rounding_seed = std::nullopt;
  void validate() const;      // ConfigError naming the field
};

struct ClipResult {
  double norm;       // global L2 norm of all gradients before clipping
  double clip_coef;  // factor the gradients were scaled by: min(1, max_norm / (norm + 1e-6))
};

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

class AdamW {
 public:
  // Parameter names must be unique and every variable a floating leaf that requires a gradient.
  AdamW(std::vector<nn::NamedParameter> parameters, const AdamWOptions& options);

  // Advances the step count and updates every parameter from its gradient with learning rate lr.
  // Raises ValueError when a parameter has no gradient (backward was not run).
  void step(double lr);

  // Global L2 norm of the gradients (deterministic order), without changing them.
  double grad_norm() const;
  // The same as a 0-d f64 tensor on the gradients' device, queued and not read: a caller can queue it before
  // it waits for the device for something else.
  Tensor grad_norm_tensor() const;
  // Scales the gradients in place so their global norm is at most max_norm (> 0).
  ClipResult clip_grad_norm(double max_norm);
  // The same with the norm grad_norm() returned (so a caller can check it for NaN/Inf before clipping);
  // `norm` must be finite.
  ClipResult clip_grad_norm(double max_norm, double norm);
  // For the gradients of a loss multiplied by loss_scale (a power of two, LossScaler's; 1 without one), whose
  // global norm grad_norm() gave as scaled_norm (finite): divides them by loss_scale and, when max_norm > 0,
  // clips them to max_norm, in one pass. Returns the unscaled norm and the clip coefficient. The resulting
  // bits equal clip_grad_norm's on the unscaled gradients (a power-of-two factor changes no rounding).
  ClipResult unscale_and_clip(double loss_scale, double max_norm, double scaled_norm);
  // unscale_and_clip and then step(lr) in one pass: the factor multiplies each gradient inside the update
  // (ops::adamw_step's grad_scale) instead of a pass of its own over the gradients, which stay as they were.
  // With f32 or f64 gradients (the trainer's, beside f32 masters) the parameters, moments and compute copies
  // get the same bits; a bf16 or f16 gradient's product is no longer rounded to its dtype before the update.
  ClipResult clipped_step(double lr, double loss_scale, double max_norm, double scaled_norm);
  // The step queued behind a factor that lives where the gradients do (ops::step_guard's): the gradients are
  // multiplied by it inside the update, and a NaN makes the step a no-op there. With step_guard's factor, the
  // bits of clipped_step or, for a NaN, of no step. It returns at once: the caller reads the guard's inputs
  // after queueing it and then says with settle(applied) whether the step was applied, which advances the step
  // count or not. Until then step, clipped_step and queued_step raise ValueError.
  void queued_step(double lr, const Tensor& factor);
  void settle(bool applied);
  // queued_step in two halves, for a step captured once and replayed (a CUDA graph): prepare_step writes the
  // next step's per-step scalars (of lr and the step count) where the kernels read them and marks that step
  // queued; queue_update queues the update that reads them, which a capture records once and every replay then
  // makes with the scalars prepare_step wrote before it. queued_step(lr, f) is prepare_step(lr), queue_update(f).
  void prepare_step(double lr);
  void queue_update(const Tensor& factor);
  // The unscaled norm and the clip coefficient clipped_step would use and return (a logger's numbers).
  static ClipResult clip_result(double loss_scale, double max_norm, double scaled_norm);
  // Releases every parameter's gradient, so that the next backward's gradient becomes the buffer itself: no
  // zero fill and no sum into it (a memset and an add per parameter and step on a GPU). The same bits as
  // zeroing: 0 + g is g.
  void clear_grads();

  int64_t step_count() const { return step_count_; }
  const AdamWOptions& options() const { return options_; }
  const std::vector<nn::NamedParameter>& parameters() const { return parameters_; }

  // m/<name> then v/<name> for each parameter in order. The tensors are the live state (clone to keep a
  // snapshot).
  std::vector<NamedTensor> state_tensors() const;
  // Restores a state exported by state_tensors: every name must be present with the parameter's shape
  // and no other names may appear; values are copied (converting dtype).
  void load_state(const std::vector<NamedTensor>& tensors, int64_t step_count);

 private:
  std::vector<Tensor> gradients(const char* op) const;
  // The unscaled norm and the clip coefficient (1 when max_norm is 0), the arguments checked under `op`'s name.
  static ClipResult clip_of(const char* op, double loss_scale, double max_norm, double scaled_norm);
  void require_settled(const char* op) const;
  void step_scaled(const char* op, double lr, double grad_scale);
  // The update of step `step` (1-based), the gradients multiplied by `factor` (a device scalar) when it is
  // defined and by grad_scale otherwise.
  void update(const char* op, double lr, int64_t step, double grad_scale, const Tensor& factor);
  std::vector<ops::AdamWConfig> configs(double lr, int64_t step) const;

  std::vector<nn::NamedParameter> parameters_;
  std::vector<Tensor> m_, v_;
  AdamWOptions options_;
  int64_t step_count_ = 0;
  bool queued_ = false;  // a queued_step not yet settled
  double prepared_lr_ = 0;  // prepare_step's lr
  Tensor terms_;            // (parameters, 3) f64 beside the parameters: the prepared step's ops::adamw_step_terms
};

// Gives every parameter (f32) a held compute copy in `dtype` (bf16 or f16): its value rounded stochastically
// as the AdamW step `step` with stochastic rounding under `seed` rounded it (nn::keep_stochastic_compute_copies
// into fresh copies). A resumed run's copies are then the bits the run it continues computed with.
// Nothing for step 0: no step has rounded a copy yet (autograd::cast rounds to nearest on first use).
void keep_stochastic_compute_copies(const std::vector<nn::NamedParameter>& parameters, DType dtype, uint64_t seed,
                                    int64_t step);

}  // namespace alpha::train
