#include "alpha/core/launch.h"

#include <utility>

namespace alpha {

namespace {
thread_local uint64_t op_launches = 0;
thread_local LaunchObserver* launch_observer = nullptr;
}  // namespace

uint64_t kernel_launches() { return op_launches; }

LaunchObserver* set_launch_observer(LaunchObserver* observer) { return std::exchange(launch_observer, observer); }

LaunchScope::LaunchScope(std::string_view name, Device device, LaunchLayer layer) : observer_(launch_observer) {
  if (layer == LaunchLayer::op) ++op_launches;
  if (observer_) observer_->launch_begin(name, device, layer);
}

LaunchScope::~LaunchScope() {
  if (observer_) observer_->launch_end();
}

}  // namespace alpha
