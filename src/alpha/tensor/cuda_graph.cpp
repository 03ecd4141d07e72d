#include "alpha/tensor/cuda_graph.h"

#include "alpha/core/error.h"
#include "alpha/tensor/allocator.h"
#if ALPHA_WITH_CUDA
#include "alpha/runtime/cuda_backend.h"
#endif

namespace alpha {

CudaGraph::CudaGraph(Device device, const std::function<void()>& record) : device_(device) {
  constexpr const char* op = "CudaGraph";
  if (!device.is_cuda()) raise<DeviceError>(op, "device", "a CUDA device", device.str());
#if ALPHA_WITH_CUDA
  cuda::require_device(op, device);
  CachingAllocator& allocator = allocator_for(device);
  // The device pool's free blocks go back to the driver first (a capture may not free memory, and serves
  // nothing from them), so that the capture pool takes their memory instead of adding to it.
  allocator.empty_pool();
  pool_ = allocator.begin_capture();
  bool allocator_capturing = true;
  try {
    cuda::begin_capture(device.index);
    record();
    allocator.end_capture();
    allocator_capturing = false;
    const cuda::Graph graph = cuda::end_capture(device.index);
    exec_ = graph.exec;
    nodes_ = graph.nodes;
  } catch (...) {
    // The recording's tensors may still be alive in the caller; their blocks go back to the device's pool when
    // they are freed (no graph reads them).
    cuda::abort_capture(device.index);
    if (allocator_capturing) allocator.end_capture();
    allocator.release_capture_pool(pool_);
    throw;
  }
#else
  (void)record;
  raise<DeviceError>(op, "device", "the CPU (this build has no CUDA backend: configure with -DALPHA_CUDA=ON)",
                     device.str());
#endif
}

CudaGraph::~CudaGraph() {
#if ALPHA_WITH_CUDA
  // The memory the graph used may be handed out once its last replay is done: wait for it first.
  try {
    cuda::synchronize(device_.index);
  } catch (...) {
  }
  cuda::destroy_graph({exec_, nodes_});
  allocator_for(device_).release_capture_pool(pool_);
#endif
}

void CudaGraph::replay() const {
#if ALPHA_WITH_CUDA
  cuda::launch_graph(device_.index, {exec_, nodes_});
#endif
}

}  // namespace alpha
