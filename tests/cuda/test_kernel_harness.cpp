// The kernel correctness harness (alpha/check) as CTest tests with the label `cuda`: one test per check
// (kernel family), failing on every comparison outside its tolerance and printing each comparison's
// max_abs, mean_abs and max_rel. They skip (CTest: skipped, not passed) without a GPU; in a build without
// the CUDA backend there are no checks, and CudaKernelHarness.ChecksExist skips for the same reason.
// ALPHA_CHECK_SCALE=small runs the checks at check::Scale::small, ALPHA_CHECK_SHARD=i/n only shard i of n of
// their cases (check::Shard; a shard past the last case skips); scripts/compute-sanitizer.sh sets both.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "alpha/check/kernel_check.h"
#include "support/checks.h"
#include "support/gpu.h"

namespace alpha {
namespace {

class CudaKernelCheck : public test::GpuTest<::testing::TestWithParam<check::KernelCheck>> {};

check::Scale scale_from_environment() {
  const char* scale = std::getenv("ALPHA_CHECK_SCALE");
  return scale == nullptr ? check::Scale::full : check::parse_scale(scale, "ALPHA_CHECK_SCALE");
}

check::Shard shard_from_environment() {
  const char* shard = std::getenv("ALPHA_CHECK_SHARD");
  return shard == nullptr ? check::Shard{} : check::parse_shard(shard, "ALPHA_CHECK_SHARD");
}

TEST_P(CudaKernelCheck, MatchesCpuReference) {
  std::printf("%s\n", check::format_header().c_str());
  const check::Shard shard = shard_from_environment();
  check::HarnessResult result =
      check::run_checks(GetParam().name, Device::cuda(0), test::fresh_seed(), [](const check::Comparison& c) {
        std::printf("%s\n", check::format_comparison(c).c_str());
        if (!c.passed) ADD_FAILURE() << check::format_comparison(c) << "\n  " << c.detail;
      },
      scale_from_environment(), shard);
  if (result.comparisons.empty() && shard.index >= result.cases_in_scale)
    GTEST_SKIP() << "shard " << shard.index << "/" << shard.count << " holds no case: the check has "
                 << result.cases_in_scale << " at this scale";
  EXPECT_GT(result.comparisons.size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaKernelCheck, ::testing::ValuesIn(check::all_checks()),
                         [](const ::testing::TestParamInfo<check::KernelCheck>& info) { return info.param.name; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaKernelCheck);

TEST(CudaKernelHarness, ChecksExist) {
  ALPHA_SKIP_WITHOUT_GPU();
  EXPECT_FALSE(check::all_checks().empty());
}

TEST(CudaKernelHarness, UnknownFilterNamesTheChecks) {
  ALPHA_SKIP_WITHOUT_GPU();
  EXPECT_ALPHA_ERROR(check::run_checks("no-such-kernel", Device::cuda(0), 1), ValueError, "check kernels", "filter",
                     "elementwise");
}

}  // namespace
}  // namespace alpha
