// Checking CUDA calls and kernel launches, for .cu files. A failure raises BackendError in the standard
// form "[call] argument 'status': expected cudaSuccess, got cudaErrorX (description) at file:line".
// Errors a kernel hits while it runs surface at the next checked call that waits for it (a copy to the
// host, a synchronize).
#pragma once
#include <cuda_runtime.h>

#include "alpha/core/stream.h"

namespace alpha::cuda {

void check(cudaError_t status, const char* call, const char* file, int line);
// The stream's handle, or the current device's default stream for Stream{}.
cudaStream_t stream_handle(Stream stream);

}  // namespace alpha::cuda

#define ALPHA_CUDA_CHECK(call) ::alpha::cuda::check((call), #call, __FILE__, __LINE__)

// Launches kernel<<<grid, block, 0, stream>>>(args...) and checks the launch itself.
#define ALPHA_CUDA_LAUNCH(kernel, grid, block, stream, ...)                           \
  do {                                                                                \
    kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__);                            \
    ::alpha::cuda::check(cudaGetLastError(), "launch of " #kernel, __FILE__, __LINE__); \
  } while (0)
