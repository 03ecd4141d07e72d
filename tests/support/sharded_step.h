// ZeRO-1's step as the trainer makes it (distributed::DataParallel's queued step), for the tests that step a
// DataParallel by hand: the norm and the update queued, the collectives waited for, the norm read, the step
// settled.
#pragma once
#include <cmath>

#include "alpha/distributed/data_parallel.h"
#include "alpha/ops/optim.h"

namespace alpha::test {

// After reduce_gradients (or queue_reduction): one ZeRO-1 step with learning rate lr, clipped to `clip` (0: no
// clipping), no loss scaling. Returns the global gradient norm the step used.
inline double sharded_step(distributed::DataParallel& dp, double lr, double clip,
                           const distributed::DataParallel::AdamW& adamw) {
  const Tensor norm = dp.queue_sharded_norm();
  const Tensor losses = Tensor::zeros({1}, DType::f32, dp.communicator().device());  // finite: no skip
  dp.queue_sharded_step(lr, ops::step_guard(norm, losses, 1.0, clip), adamw);
  dp.communicator().synchronize();
  const double value = norm.to(Device::cpu()).item();
  dp.settle_sharded_step(std::isfinite(value));
  return value;
}

}  // namespace alpha::test
