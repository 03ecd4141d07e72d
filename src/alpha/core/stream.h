// An execution stream handle passed to device kernels (a cudaStream_t on CUDA; unused on the CPU).
// Kept opaque here so that headers below the CUDA backend do not include CUDA headers.
#pragma once

namespace alpha {

struct Stream {
  void* handle = nullptr;  // nullptr: the device's default stream
};

}  // namespace alpha
