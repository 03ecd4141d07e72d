#include "alpha/train/schedule.h"

#include <cmath>
#include <numbers>
#include <string>

#include "alpha/core/error.h"

namespace alpha::train {

WarmupCosineSchedule::WarmupCosineSchedule(double max_lr, double min_lr, int64_t warmup_steps, int64_t decay_steps)
    : max_lr_(max_lr), min_lr_(min_lr), warmup_steps_(warmup_steps), decay_steps_(decay_steps) {
  constexpr const char* op = "WarmupCosineSchedule";
  if (!(max_lr > 0.0 && std::isfinite(max_lr)))
    raise<ConfigError>(op, "max_lr", "a finite value > 0", std::to_string(max_lr));
  if (!(min_lr >= 0.0 && min_lr <= max_lr))
    raise<ConfigError>(op, "min_lr", "a value in [0, max_lr = " + std::to_string(max_lr) + "]", std::to_string(min_lr));
  if (decay_steps < 1) raise<ConfigError>(op, "decay_steps", "a value >= 1", std::to_string(decay_steps));
  if (warmup_steps < 0 || warmup_steps > decay_steps)
    raise<ConfigError>(op, "warmup_steps", "a value in [0, decay_steps = " + std::to_string(decay_steps) + "]",
                       std::to_string(warmup_steps));
}

double WarmupCosineSchedule::lr(int64_t step) const {
  if (step < 0) raise<ValueError>("WarmupCosineSchedule::lr", "step", "a value >= 0", std::to_string(step));
  if (step < warmup_steps_) return max_lr_ * double(step + 1) / double(warmup_steps_);
  if (step >= decay_steps_) return min_lr_;
  double ratio = double(step - warmup_steps_) / double(decay_steps_ - warmup_steps_);
  return min_lr_ + 0.5 * (1.0 + std::cos(std::numbers::pi * ratio)) * (max_lr_ - min_lr_);
}

}  // namespace alpha::train
