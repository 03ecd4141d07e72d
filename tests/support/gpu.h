// Tests that need a GPU skip themselves (GTEST_SKIP, which CTest reports as skipped, not passed) in a build
// without the CUDA backend or on a machine without a GPU.
#pragma once
#include <string>

#include <gtest/gtest.h>

namespace alpha::test {

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
