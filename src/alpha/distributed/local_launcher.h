// `alpha train --gpus N` on one machine: starts N copies of the same command, one per GPU, with the
// variables torchrun would set (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1,
// MASTER_PORT: a free port), and waits for them. When a worker fails, the others are given `grace` to
// stop by themselves (they raise within the collective timeout, naming the failed rank), then terminated.
// SIGTERM and SIGINT sent to the launcher while it waits are passed on to every running worker.
#pragma once
#include <chrono>
#include <string>
#include <vector>

namespace alpha::distributed {

struct WorkerExit {
  int rank;
  int status;       // exit code, or 128 + signal when killed by one
  bool terminated;  // killed by the launcher after another worker failed
};

struct LaunchResult {
  std::vector<WorkerExit> workers;  // by rank
  int first_failed_rank = -1;       // the first worker seen to exit non-zero (-1: all succeeded)
  int exit_code() const;            // 0 when every worker succeeded, else the first failed worker's status
  std::string summary() const;      // one line per failed worker
};

// Runs `argv` (argv[0] an executable path) as `workers` processes; the environment of each is this
// process's plus the launch variables. IOError when a process cannot be started.
LaunchResult launch_local_workers(const std::vector<std::string>& argv, int workers, std::chrono::milliseconds grace);

// This process's command line (from /proc/self/cmdline), argv[0] replaced by /proc/self/exe's target.
std::vector<std::string> own_command_line();

// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick).
int free_local_port();

}  // namespace alpha::distributed
