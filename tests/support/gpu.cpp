#include "support/gpu.h"

#if ALPHA_WITH_CUDA
#include "alpha/runtime/cuda_backend.h"
#endif

namespace alpha::test {

bool gpu_available(std::string& why) {
#if ALPHA_WITH_CUDA
  if (cuda::device_count() > 0) return true;
  why = "no CUDA device on this machine (no GPU or no driver)";
#else
  why = "built without the CUDA backend (-DALPHA_CUDA=OFF, or no nvcc found)";
#endif
  return false;
}

}  // namespace alpha::test
