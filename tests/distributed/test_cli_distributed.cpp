// `alpha train` as a rank of a job, through the real binary: a --gpus that disagrees with the launch
// environment is refused naming both, and, on a machine without a GPU (where every worker fails: no
// device, or a build without NCCL), the --gpus launcher reports the failed workers instead of hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "core/file_test_util.h"
#include "support/gpu.h"

namespace alpha::test {
namespace {

// Sets launch variables for the duration of a test (the binary inherits them).
class LaunchVariables {
 public:
  LaunchVariables(const char* rank, const char* world_size) {
    setenv("RANK", rank, 1);
    setenv("WORLD_SIZE", world_size, 1);
  }
  ~LaunchVariables() {
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
  }
};

TEST(CliDistributed, GpusThatDisagreeWithTheLaunchEnvironmentAreRefused) {
  TempDir dir;
  LaunchVariables env("0", "3");
  std::string out, err;
  EXPECT_EQ(run_alpha("train --gpus 2 --steps 1 --out " + dir.file("run"), dir, out, err), 1);
  EXPECT_NE(err.find("--gpus"), std::string::npos) << err;
  EXPECT_NE(err.find("world size of the torchrun environment, 3"), std::string::npos) << err;
}

TEST(CliDistributed, TheLauncherReportsFailedWorkersAndExits) {
  std::string why;
  if (gpu_available(why)) GTEST_SKIP() << "with a GPU the workers would train: scripts/distributed-gpu.sh checks that";
  TempDir dir;
  std::string out, err;
  auto start = std::chrono::steady_clock::now();
  int status = run_alpha("train --gpus 2 --steps 1 --dist-timeout-s 20 --out " + dir.file("run"), dir, out, err);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  EXPECT_EQ(status, 1) << err;
  EXPECT_NE(err.find("worker rank"), std::string::npos) << err;
}

}  // namespace
}  // namespace alpha::test
