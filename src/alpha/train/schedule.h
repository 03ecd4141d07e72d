// Learning-rate schedule: linear warmup to max_lr, then cosine decay to min_lr, then min_lr.
//   step < warmup:           max_lr · (step + 1) / warmup
//   warmup <= step < decay:  min_lr + ½(1 + cos(π·r))·(max_lr − min_lr),  r = (step − warmup) / (decay − warmup)
//   step >= decay:           min_lr
// Steps are 0-based: the first optimiser step uses lr(0).
#pragma once
#include <cstdint>

namespace alpha::train {

class WarmupCosineSchedule {
 public:
  // 0 < max_lr, 0 <= min_lr <= max_lr, 0 <= warmup_steps <= decay_steps, decay_steps >= 1; else ConfigError
  // naming the parameter.
  WarmupCosineSchedule(double max_lr, double min_lr, int64_t warmup_steps, int64_t decay_steps);

  double lr(int64_t step) const;  // step >= 0 (ValueError otherwise)

  double max_lr() const { return max_lr_; }
  double min_lr() const { return min_lr_; }
  int64_t warmup_steps() const { return warmup_steps_; }
  int64_t decay_steps() const { return decay_steps_; }

 private:
  double max_lr_, min_lr_;
  int64_t warmup_steps_, decay_steps_;
};

}  // namespace alpha::train
