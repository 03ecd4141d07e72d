// Caching allocator, one per device. Freed blocks go back to a pool keyed by their size class and are
// handed out again for the next request of that class, so a training loop that allocates the same
// shapes every step stops calling the system allocator (or cudaMalloc) after its first step.
// Size classes: requests round up to 512 bytes, then to a quarter of their power-of-two range
// (e.g. 5 MiB -> 5 MiB, 5.1 MiB -> 6 MiB), which bounds waste at 25% while keeping few classes. From
// 16 MiB up, to a 32nd of the range (81 MiB -> 82 MiB, not 96): there the blocks are a large model's
// weights, gradients and optimizer moments, which would otherwise give away up to a quarter of the GPU.
// Capture pools keep a CUDA graph's memory its own: while a pool captures, every request is served from it
// and every free goes to it, and a block of it freed later returns to it; its blocks are handed out only
// while it captures. The addresses a captured graph reads and writes are then never another tensor's between
// its replays (PyTorch's graph pools, the same idea).
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "alpha/core/device.h"

namespace alpha {

struct AllocatorStats {
  uint64_t allocations = 0;     // requests served
  uint64_t frees = 0;           // blocks returned
  uint64_t pool_hits = 0;       // requests served from the pool
  uint64_t pool_misses = 0;     // requests that went to the backend
  uint64_t bytes_in_use = 0;    // bytes of size-class blocks held by live tensors
  uint64_t peak_bytes_in_use = 0;
  uint64_t bytes_reserved = 0;  // bytes obtained from the backend (in use plus pooled)
  uint64_t capture_pool_bytes = 0;  // bytes of free blocks held by capture pools (a graph's replays use them)
};

// How a device obtains and returns raw memory; the CUDA backend supplies one built on cudaMalloc.
struct RawMemory {
  void* (*allocate)(size_t bytes) = nullptr;  // returns nullptr on failure
  void (*release)(void* ptr, size_t bytes) = nullptr;
};

class CachingAllocator {
 public:
  CachingAllocator(Device device, RawMemory raw);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns a block of at least `bytes` bytes (64-byte aligned on the CPU); throws BackendError
  // naming the device and size when the backend is out of memory even after emptying the pool.
  void* allocate(size_t bytes);
  void free(void* ptr);
  // Returns every pooled block to the backend (not those of capture pools).
  void empty_pool();
  // Starts a capture pool (one at a time; ValueError while another captures) and returns its id (> 0): from
  // here to end_capture every allocation and free is the pool's. Backend memory freed meanwhile would not be
  // safe: a request the backend cannot serve raises instead of emptying the pool first.
  uint64_t begin_capture();
  void end_capture();
  // Gives a capture pool's free blocks to the device's pool, and its live blocks when they are freed: for when
  // no graph reads the pool's memory any more.
  void release_capture_pool(uint64_t id);
  AllocatorStats stats() const;
  void reset_peak();
  Device device() const { return device_; }

  static size_t size_class(size_t bytes);

 private:
  Device device_;
  RawMemory raw_;
  mutable std::mutex mutex_;
  struct Block {
    size_t size_class;
    uint64_t pool;  // 0: the device's pool; else a capture pool
  };
  using FreeBlocks = std::unordered_map<size_t, std::vector<void*>>;  // size class -> free blocks
  std::unordered_map<void*, Block> live_;
  FreeBlocks pool_;
  std::unordered_map<uint64_t, FreeBlocks> capture_pools_;
  uint64_t capturing_ = 0;  // the capture pool that serves requests now; 0: none
  uint64_t last_capture_pool_ = 0;
  AllocatorStats stats_;
};

// The allocator of a device. The CPU one always exists. A CUDA one is created on first use in builds with
// the CUDA backend (cudaMalloc/cudaFree of that device), unless registered before; asking for a device this
// build or machine does not have throws DeviceError.
CachingAllocator& allocator_for(Device device);
// Raises DeviceError naming `op` unless this build has a backend for the device and this machine has it.
void require_available(std::string_view op, Device device);
void register_device_memory(Device device, RawMemory raw);

}  // namespace alpha
