// A DataParallel's reduction and ZeRO-1 step as the trainer makes them, waited for, for the tests that drive a
// DataParallel by hand.
#pragma once
#include <cmath>
#include <vector>

#include "alpha/distributed/data_parallel.h"
#include "alpha/ops/optim.h"

namespace alpha::test {

// queue_reduction, then the collectives waited for (synchronize: a failed peer is named), then the gathered
// losses read on the host, rank by rank (empty without step_losses).
inline std::vector<float> reduce_gradients(distributed::DataParallel& dp, const Tensor& step_losses = Tensor()) {
  const Tensor gathered = dp.queue_reduction(step_losses);
  dp.communicator().synchronize();
  return gathered.defined() ? gathered.to(Device::cpu()).to_vector<float>() : std::vector<float>();
}

// After reduce_gradients (or queue_reduction): one ZeRO-1 step with learning rate lr, clipped to `clip` (0: no
// clipping), no loss scaling, every parameter's value gathered. Returns the global gradient norm the step used.
inline double sharded_step(distributed::DataParallel& dp, double lr, double clip,
                           const distributed::DataParallel::AdamW& adamw) {
  const Tensor norm = dp.queue_sharded_norm();
  const Tensor losses = Tensor::zeros({1}, DType::f32, dp.communicator().device());  // finite: no skip
  dp.queue_sharded_step(lr, ops::step_guard(norm, losses, 1.0, clip), adamw);
  dp.communicator().synchronize();
  const double value = norm.to(Device::cpu()).item();
  dp.settle_sharded_step(std::isfinite(value));
  dp.complete_parameters();  // the tests read the values next (the trainer trains on without them)
  return value;
}

}  // namespace alpha::test
