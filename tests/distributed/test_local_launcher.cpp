// `alpha train --gpus N`'s launcher, with a shell command as the worker: every worker gets its rank and
// the shared rendezvous variables, when one fails the others are stopped after the grace period, and a
// SIGTERM to the launcher reaches the workers.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <thread>

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

TEST(LocalLauncher, ATerminationSignalIsPassedOnToTheWorkers) {
  // The launcher handles SIGTERM while it waits; sent well after it started waiting.
  std::thread sender([] {
    std::this_thread::sleep_for(milliseconds(500));
    ::kill(::getpid(), SIGTERM);
  });
  auto start = std::chrono::steady_clock::now();
  LaunchResult result = launch_local_workers({"/bin/sh", "-c", "exec sleep 30"}, 2, milliseconds(60000));
  sender.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  for (const auto& w : result.workers) EXPECT_EQ(w.status, 128 + SIGTERM) << "rank " << w.rank;
  EXPECT_NE(result.exit_code(), 0);
}

TEST(LocalLauncher, AMissingExecutableFailsEveryWorker) {
  LaunchResult result = launch_local_workers({"/nonexistent/alpha"}, 2, milliseconds(100));
  EXPECT_EQ(result.exit_code(), 127);
}

}  // namespace
}  // namespace alpha::distributed
