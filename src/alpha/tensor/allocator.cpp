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
  FreeBlocks& pool = capturing_ ? capture_pools_[capturing_] : pool_;
  auto it = pool.find(cls);
  if (it != pool.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    ++stats_.pool_hits;
    if (capturing_) stats_.capture_pool_bytes -= cls;
  } else {
    ptr = raw_.allocate(cls);
    if (!ptr && !capturing_) {  // give the pool back and try once more before failing
      for (auto& [c, blocks] : pool_)
        for (void* p : blocks) raw_.release(p, c), stats_.bytes_reserved -= c;
      pool_.clear();
      ptr = raw_.allocate(cls);
    }
    if (!ptr)
      raise<BackendError>("allocate", "bytes", "memory available on " + device_.str(),
                          std::to_string(bytes) + " bytes requested, " + std::to_string(stats_.bytes_in_use) +
                              " in use" + (capturing_ ? " (while a graph captures: the pool is not emptied)" : ""));
    ++stats_.pool_misses;
    stats_.bytes_reserved += cls;
  }
  live_.emplace(ptr, Block{cls, capturing_});
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
  const Block block = it->second;
  live_.erase(it);
  // During a capture every free is the capture's: the graph may still read a block freed now, at its replays.
  const uint64_t pool = capturing_ ? capturing_ : block.pool;
  auto capture_pool = pool ? capture_pools_.find(pool) : capture_pools_.end();
  if (capture_pool != capture_pools_.end()) {
    capture_pool->second[block.size_class].push_back(ptr);
    stats_.capture_pool_bytes += block.size_class;
  } else {
    pool_[block.size_class].push_back(ptr);  // the device's pool, or a released capture pool's block
  }
  ++stats_.frees;
  stats_.bytes_in_use -= block.size_class;
}

uint64_t CachingAllocator::begin_capture() {
  std::lock_guard lock(mutex_);
  if (capturing_)
    raise<ValueError>("begin_capture", "self", "an allocator with no capture under way",
                      "capture pool " + std::to_string(capturing_) + " capturing");
  capturing_ = ++last_capture_pool_;
  capture_pools_[capturing_];
  return capturing_;
}

void CachingAllocator::end_capture() {
  std::lock_guard lock(mutex_);
  if (!capturing_) raise<ValueError>("end_capture", "self", "an allocator capturing", "no capture under way");
  capturing_ = 0;
}

void CachingAllocator::release_capture_pool(uint64_t id) {
  std::lock_guard lock(mutex_);
  if (id == capturing_)
    raise<ValueError>("release_capture_pool", "id", "a pool that is not capturing", std::to_string(id));
  auto it = capture_pools_.find(id);
  if (it == capture_pools_.end()) return;
  for (auto& [cls, blocks] : it->second) {
    stats_.capture_pool_bytes -= cls * blocks.size();
    auto& free_blocks = pool_[cls];
    free_blocks.insert(free_blocks.end(), blocks.begin(), blocks.end());
  }
  capture_pools_.erase(it);
  for (auto& [ptr, block] : live_)
    if (block.pool == id) block.pool = 0;
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
