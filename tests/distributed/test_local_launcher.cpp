// `alpha train --gpus N`'s launcher, with a shell command as the worker: every worker gets its rank and
// the shared rendezvous variables, and when one fails the others are stopped after the grace period.
#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "alpha/core/file_io.h"
#include "alpha/distributed/local_launcher.h"
#include "core/file_test_util.h"

namespace alpha::distributed {
namespace {

using std::chrono::milliseconds;

TEST(LocalLauncher, EveryWorkerGetsItsRankAndTheSameRendezvous) {
  test::TempDir dir;
  std::string script = "echo \"$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT\" > " +
                       dir.path().string() + "/rank_$RANK";
  LaunchResult result = launch_local_workers({"/bin/sh", "-c", script}, 3, milliseconds(1000));
  EXPECT_EQ(result.exit_code(), 0) << result.summary();
  std::set<std::string> ports;
  for (int r = 0; r < 3; ++r) {
    std::string line = read_file(dir / ("rank_" + std::to_string(r)), "test");
    std::string prefix = std::to_string(r) + " " + std::to_string(r) + " 3 3 127.0.0.1 ";
    ASSERT_EQ(line.rfind(prefix, 0), 0u) << line;
    ports.insert(line.substr(prefix.size()));
  }
  EXPECT_EQ(ports.size(), 1u) << "one MASTER_PORT for all";
}

TEST(LocalLauncher, AFailedWorkerIsNamedAndTheOthersAreStoppedAfterTheGrace) {
  auto start = std::chrono::steady_clock::now();
  LaunchResult result = launch_local_workers({"/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 30"},
                                             3, milliseconds(300));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(result.first_failed_rank, 1);
  EXPECT_EQ(result.exit_code(), 3);
  EXPECT_EQ(result.workers[1].status, 3);
  EXPECT_FALSE(result.workers[1].terminated);
  EXPECT_TRUE(result.workers[0].terminated);
  EXPECT_TRUE(result.workers[2].terminated);
  EXPECT_NE(result.summary().find("worker rank 1 exited with status 3"), std::string::npos) << result.summary();
}

TEST(LocalLauncher, AMissingExecutableFailsEveryWorker) {
  LaunchResult result = launch_local_workers({"/nonexistent/alpha"}, 2, milliseconds(100));
  EXPECT_EQ(result.exit_code(), 127);
}

}  // namespace
}  // namespace alpha::distributed
