#include "alpha/tensor/allocator.h"

#include <bit>
#include <cstdlib>
#include <map>
#include <memory>

#include "alpha/core/error.h"
#if ALPHA_WITH_CUDA
#include "alpha/runtime/cuda_backend.h"
#endif

namespace alpha {

namespace {

constexpr size_t kMinBlock = 512;
constexpr size_t kFineClassesFrom = size_t(16) << 20;  // 32 classes per power of two from here up

void* cpu_allocate(size_t bytes) { return std::aligned_alloc(64, bytes); }
void cpu_release(void* ptr, size_t) { std::free(ptr); }

struct Registry {
  std::mutex mutex;
  std::map<std::pair<int, int>, std::unique_ptr<CachingAllocator>> allocators;
};
Registry& registry() {
  static Registry r;
  return r;
}
std::pair<int, int> key_of(Device d) { return {int(d.type), d.index}; }

#if !ALPHA_WITH_CUDA
[[noreturn]] void raise_without_backend(std::string_view op, Device device) {
  raise<DeviceError>(op, "device", "the CPU (this build has no CUDA backend: configure with -DALPHA_CUDA=ON)",
                     device.str());
}
#endif

}  // namespace

size_t CachingAllocator::size_class(size_t bytes) {
  if (bytes <= kMinBlock) return kMinBlock;
  size_t rounded = (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
  size_t top = std::bit_floor(rounded);
  size_t step = top >= kFineClassesFrom ? top / 32 : std::max(top / 4, kMinBlock);
  return (rounded + step - 1) / step * step;
}

CachingAllocator::CachingAllocator(Device device, RawMemory raw) : device_(device), raw_(raw) {}

CachingAllocator::~CachingAllocator() {
  empty_pool();
  // Blocks still live at exit belong to static tensors; the process is ending, so they are left to it.
}

void* CachingAllocator::allocate(size_t bytes) {
  size_t cls = size_class(bytes);
  std::lock_guard lock(mutex_);
  void* ptr = nullptr;
  auto it = pool_.find(cls);
  if (it != pool_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    ++stats_.pool_hits;
  } else {
    ptr = raw_.allocate(cls);
    if (!ptr) {  // give the pool back and try once more before failing
      for (auto& [c, blocks] : pool_)
        for (void* p : blocks) raw_.release(p, c), stats_.bytes_reserved -= c;
      pool_.clear();
      ptr = raw_.allocate(cls);
    }
    if (!ptr)
      raise<BackendError>("allocate", "bytes", "memory available on " + device_.str(),
                          std::to_string(bytes) + " bytes requested, " + std::to_string(stats_.bytes_in_use) +
                              " in use");
    ++stats_.pool_misses;
    stats_.bytes_reserved += cls;
  }
  live_.emplace(ptr, cls);
  ++stats_.allocations;
  stats_.bytes_in_use += cls;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return ptr;
}

void CachingAllocator::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end())
    raise<ValueError>("free", "ptr", "a block allocated by the " + device_.str() + " allocator", "an unknown pointer");
  size_t cls = it->second;
  live_.erase(it);
  pool_[cls].push_back(ptr);
  ++stats_.frees;
  stats_.bytes_in_use -= cls;
}

void CachingAllocator::empty_pool() {
  std::lock_guard lock(mutex_);
  for (auto& [cls, blocks] : pool_)
    for (void* p : blocks) {
      raw_.release(p, cls);
      stats_.bytes_reserved -= cls;
    }
  pool_.clear();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

void register_device_memory(Device device, RawMemory raw) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.allocators[key_of(device)] = std::make_unique<CachingAllocator>(device, raw);
}

CachingAllocator& allocator_for(Device device) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.allocators.find(key_of(device));
  if (it != r.allocators.end()) return *it->second;
  if (device.is_cpu()) {
    auto& slot = r.allocators[key_of(device)];
    slot = std::make_unique<CachingAllocator>(device, RawMemory{cpu_allocate, cpu_release});
    return *slot;
  }
#if ALPHA_WITH_CUDA
  // A GPU's allocator is created on first use, drawing on cudaMalloc/cudaFree of that device.
  cuda::require_device("allocator_for", device);
  auto allocator = std::make_unique<CachingAllocator>(device, cuda::device_memory(device.index));
  return *(r.allocators[key_of(device)] = std::move(allocator));
#else
  raise_without_backend("allocator_for", device);
#endif
}

void require_available(std::string_view op, Device device) {
  if (device.is_cpu()) return;
#if ALPHA_WITH_CUDA
  cuda::require_device(op, device);
#else
  raise_without_backend(op, device);
#endif
}

}  // namespace alpha
