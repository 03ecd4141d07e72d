// Kernel launches as the layers above see them, for the trainer's telemetry and its --profile
// (train/profiler.h): every kernel an op dispatches (ops/check.h) and every copy, cast or zeroing the tensor
// layer runs is made inside a LaunchScope, which counts op launches and tells the thread's observer, if one
// is installed, where each launch begins and ends.
#pragma once
#include <cstdint>
#include <string_view>

#include "alpha/core/device.h"

namespace alpha {

enum class LaunchLayer {
  op,      // a kernel of an op (ops/): counted by kernel_launches()
  tensor,  // a copy, cast or zeroing by the tensor layer (Tensor::copy_from, Tensor::zero_): not counted
};

// Op launches since the process started, on this thread: the ops-per-step telemetry.
uint64_t kernel_launches();

// Told of this thread's launches: launch_begin before the kernel is called (or queued, on a CUDA device),
// launch_end after. A launch may begin inside another's scope; ends come in reverse order of begins.
class LaunchObserver {
 public:
  virtual ~LaunchObserver() = default;
  virtual void launch_begin(std::string_view name, Device device, LaunchLayer layer) = 0;
  virtual void launch_end() = 0;
};
// Installs the observer of this thread's launches (nullptr: none, the default); returns the previous one.
LaunchObserver* set_launch_observer(LaunchObserver* observer);

// One launch named `name` on `device`, for the scope's life.
class LaunchScope {
 public:
  LaunchScope(std::string_view name, Device device, LaunchLayer layer = LaunchLayer::op);
  ~LaunchScope();
  LaunchScope(const LaunchScope&) = delete;
  LaunchScope& operator=(const LaunchScope&) = delete;

 private:
  LaunchObserver* observer_;
};

}  // namespace alpha
