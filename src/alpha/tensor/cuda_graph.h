// A CUDA graph of the work a function queues on one GPU, captured once and replayed: one launch then queues
// every kernel, copy and memset it recorded, with the arguments and at the addresses they had. The trainer
// captures a training step so (forward, backward, norm, optimiser update): a small model's step is hundreds
// of launches whose host cost exceeds their GPU time, and a replay pays it once.
//
// The tensors the function allocates come from a capture pool of the device's allocator (allocator.h), which
// the graph keeps until it is destroyed: the memory a replay touches is never another tensor's. Tensors that
// outlive the capture (its outputs) keep those addresses, and each replay writes them again.
//
// What a capture may record (anything else raises BackendError at construction, naming the CUDA error):
// work queued on the device's stream only; no host read of device memory (a wait on the stream); no copy from
// the host, whose source would be read again at every replay (the function's inputs belong in device tensors
// the caller fills before each replay). Values passed by value to kernels (a learning rate, a step count, a
// dropout seed) are replayed as captured: what changes between replays must live in device memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

#include "alpha/core/device.h"

namespace alpha {

class CudaGraph {
 public:
  // Captures `record`'s work on `device` (a CUDA device: DeviceError otherwise). Nothing runs until replay().
  CudaGraph(Device device, const std::function<void()>& record);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Queues the recorded work on the device's stream, behind what is queued there.
  void replay() const;
  // The graph's nodes: its kernels, copies, memsets and scratch allocations.
  size_t nodes() const { return nodes_; }
  Device device() const { return device_; }

 private:
  Device device_;
  void* exec_ = nullptr;
  size_t nodes_ = 0;
  uint64_t pool_ = 0;  // the allocator's capture pool
};

}  // namespace alpha
