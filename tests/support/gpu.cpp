#include "support/gpu.h"

#include "support/checks.h"

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

GpuInput gpu_input(Shape shape, DType dtype, double lo, double hi) {
  Tensor values = random(std::move(shape), dtype, lo, hi);
  return {values.to(Device::cuda(0)), values.to(DType::f32)};
}

}  // namespace alpha::test
