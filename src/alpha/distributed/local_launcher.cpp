#include "alpha/distributed/local_launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "alpha/core/error.h"

namespace alpha::distributed {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kOp = "launch";

// SIGTERM or SIGINT sent to the launcher (a job scheduler's, timeout(1)'s, Ctrl-C), passed on to the workers.
volatile std::sig_atomic_t received_signal = 0;
extern "C" void remember_signal(int signal) { received_signal = signal; }

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

int LaunchResult::exit_code() const {
  return first_failed_rank < 0 ? 0 : std::max(1, workers[size_t(first_failed_rank)].status);
}

std::string LaunchResult::summary() const {
  std::string out;
  for (const auto& w : workers) {
    if (w.status == 0) continue;
    out += "worker rank " + std::to_string(w.rank) +
           (w.terminated ? " was stopped by the launcher after rank " + std::to_string(first_failed_rank) + " failed"
                         : " exited with status " + std::to_string(w.status)) +
           "\n";
  }
  return out;
}

int free_local_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw IOError(std::string("[launch] cannot find a free port on 127.0.0.1: ") + std::strerror(errno));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::vector<std::string> own_command_line() {
  // Read as a stream: /proc files report a size of 0, so size-based whole-file reads see nothing.
  std::ifstream file("/proc/self/cmdline", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (text.empty()) throw IOError("[launch] cannot read this process's command line from /proc/self/cmdline");
  std::vector<std::string> argv;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\0', start);
    if (end == std::string::npos) end = text.size();
    argv.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (!argv.empty()) argv[0] = std::filesystem::read_symlink("/proc/self/exe").string();
  return argv;
}

LaunchResult launch_local_workers(const std::vector<std::string>& argv, int workers, std::chrono::milliseconds grace) {
  if (argv.empty()) raise<ValueError>(kOp, "argv", "a command to run", "an empty one");
  if (workers < 1) raise<ValueError>(kOp, "workers", ">= 1", std::to_string(workers));
  std::string port = std::to_string(free_local_port());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  received_signal = 0;
  struct sigaction forward {
  }, previous_term{}, previous_int{};
  forward.sa_handler = remember_signal;
  sigemptyset(&forward.sa_mask);
  ::sigaction(SIGTERM, &forward, &previous_term);
  ::sigaction(SIGINT, &forward, &previous_int);

  std::vector<pid_t> pids;
  for (int rank = 0; rank < workers; ++rank) {
    pid_t pid = ::fork();
    if (pid < 0) {
      for (pid_t started : pids) ::kill(started, SIGTERM);
      throw IOError(std::string("[launch] cannot start worker rank ") + std::to_string(rank) + ": " +
                    std::strerror(errno));
    }
    if (pid == 0) {
      ::sigaction(SIGTERM, &previous_term, nullptr);
      ::sigaction(SIGINT, &previous_int, nullptr);
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(workers).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(workers).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port.c_str(), 1);
      ::execv(args[0], args.data());
      std::fprintf(stderr, "[launch] worker rank %d: cannot run %s: %s\n", rank, args[0], std::strerror(errno));
      ::_exit(127);
    }
    pids.push_back(pid);
  }

  LaunchResult result;
  for (int rank = 0; rank < workers; ++rank) result.workers.push_back({rank, 0, false});
  std::vector<bool> running(size_t(workers), true);
  int left = workers;
  bool stopping = false;  // a worker failed: the others have until `deadline` to stop by themselves
  Clock::time_point deadline;
  while (left > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      auto it = std::find(pids.begin(), pids.end(), pid);
      if (it == pids.end()) continue;
      size_t rank = size_t(it - pids.begin());
      running[rank] = false;
      --left;
      result.workers[rank].status = decode_status(status);
      if (result.workers[rank].status != 0 && result.first_failed_rank < 0) {
        result.first_failed_rank = int(rank);
        stopping = true;
        deadline = Clock::now() + grace;
      }
      continue;
    }
    if (received_signal != 0) {
      for (size_t rank = 0; rank < running.size(); ++rank)
        if (running[rank]) ::kill(pids[rank], received_signal);
      received_signal = 0;
    }
    if (stopping && Clock::now() > deadline) {
      for (size_t rank = 0; rank < running.size(); ++rank)
        if (running[rank]) {
          ::kill(pids[rank], SIGTERM);
          result.workers[rank].terminated = true;
        }
      stopping = false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::sigaction(SIGTERM, &previous_term, nullptr);
  ::sigaction(SIGINT, &previous_int, nullptr);
  return result;
}

}  // namespace alpha::distributed
