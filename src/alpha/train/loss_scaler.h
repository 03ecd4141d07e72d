// Dynamic loss scaling for f16 mixed precision. f16 has 5 exponent bits: gradients below 2^-24 underflow
// to zero and above 65504 overflow to Inf. The trainer multiplies the loss by a scale S before backward,
// so the backward's f16 values sit S times higher, and divides the f32 gradients by S before the optimizer
// step. S is a power of two, so both products are exact and a step that does not overflow updates the
// weights exactly as an unscaled one would. A step whose gradients hold an Inf or NaN is skipped (no
// update) and S halves; after `growth_interval` finite steps in a row S doubles (PyTorch's GradScaler
// policy). S never goes below 1: at that floor an overflow is no longer the scale's fault, so such steps
// count as non-finite steps for the trainer's max_nonfinite_steps.
#pragma once
#include <cstdint>

#include <nlohmann/json.hpp>

namespace alpha::train {

// A power of two in [1, 2^24]: the scales LossScaler takes (2^24 already lifts f16's smallest normal
// gradient past 1; more only overflows).
bool valid_loss_scale(double scale);

struct LossScalerOptions {
  double initial_scale = 65536.0;  // 2^16, a power of two
  int64_t growth_interval = 1000;  // finite steps in a row before S doubles
  void validate() const;           // ConfigError naming the field
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});

  double scale() const { return scale_; }
  int64_t finite_in_a_row() const { return finite_in_a_row_; }

  // After a step's backward: gradients_finite says whether every gradient (scaled) was finite. Returns
  // true when the step must be skipped; halves S on overflow, doubles it after growth_interval finite steps.
  bool update(bool gradients_finite);
  // True when the last skipped step overflowed with S already at its floor of 1.
  bool at_floor() const { return scale_ <= 1.0; }

  // {"scale", "finite_in_a_row"}, for checkpoints (a resumed run continues with the same scale).
  nlohmann::json state() const;
  // ValueError naming the field when `state` lacks one or holds a scale that is not a power of two >= 1.
  void load_state(const nlohmann::json& state);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t finite_in_a_row_ = 0;
};

}  // namespace alpha::train
