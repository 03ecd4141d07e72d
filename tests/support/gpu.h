// Tests that need a GPU skip themselves (GTEST_SKIP, which CTest reports as skipped, not passed) in a build
// without the CUDA backend or on a machine without a GPU.
#pragma once
#include <string>

#include <gtest/gtest.h>

#include "alpha/tensor/tensor.h"

namespace alpha::test {

// The dtypes the CUDA kernels compute in.
inline constexpr DType kGpuDtypes[] = {DType::f32, DType::bf16, DType::f16};

// Fresh uniform values in [lo, hi) rounded to `dtype`: on cuda:0 in `dtype` (the GPU op's input), and the
// same values as f32 on the CPU (the CPU op's input).
struct GpuInput {
  Tensor gpu, cpu;
};
GpuInput gpu_input(Shape shape, DType dtype, double lo = -1.0, double hi = 1.0);

// Whether cuda:0 can run kernels; otherwise `why` says what is missing.
bool gpu_available(std::string& why);

// A fixture whose tests skip before their body runs unless a GPU is there.
template <class Base = ::testing::Test>
class GpuTest : public Base {
 protected:
  void SetUp() override {
    std::string why;
    if (!gpu_available(why)) GTEST_SKIP() << why;
  }
};

}  // namespace alpha::test

// Skips the calling test (from its body) unless a GPU is there.
#define ALPHA_SKIP_WITHOUT_GPU()                                   \
  do {                                                             \
    std::string alpha_why_no_gpu;                                  \
    if (!::alpha::test::gpu_available(alpha_why_no_gpu)) GTEST_SKIP() << alpha_why_no_gpu; \
  } while (0)
