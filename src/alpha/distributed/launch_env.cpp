#include "alpha/distributed/launch_env.h"

#include <cstdlib>
#include <string_view>
#include <utility>

#include "alpha/core/error.h"

namespace alpha::distributed {

namespace {

constexpr const char* kOp = "launch environment";

int parse_int(const char* name, const char* text, int lo, int hi) {
  std::string_view s(text);
  int value = 0;
  bool ok = !s.empty() && s.size() <= 9;
  for (char c : s) ok = ok && c >= '0' && c <= '9';
  if (ok) value = std::atoi(text);
  if (!ok || value < lo || value > hi)
    raise<ConfigError>(kOp, name, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", quoted(s));
  return value;
}

// Fills the master's address and port from MASTER_ADDR / MASTER_PORT where set.
void read_master(const EnvLookup& getenv, LaunchEnv& env) {
  if (const char* addr = getenv("MASTER_ADDR")) {
    if (std::string_view(addr).empty()) raise<ConfigError>(kOp, "MASTER_ADDR", "a host name or address", "''");
    env.master_addr = addr;
  }
  if (const char* port = getenv("MASTER_PORT")) env.master_port = parse_int("MASTER_PORT", port, 1, 65535);
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  size_t end = nodelist.find_first_of(",[");
  std::string prefix = nodelist.substr(0, end);
  if (prefix.empty())
    raise<ConfigError>(kOp, "SLURM_NODELIST", "a node list such as 'gpu[01-04]'", alpha::quoted(nodelist));
  if (end == std::string::npos || nodelist[end] == ',') return prefix;
  size_t close = nodelist.find(']', end);
  size_t first_end = nodelist.find_first_of(",-]", end + 1);
  if (close == std::string::npos || first_end == end + 1)
    raise<ConfigError>(kOp, "SLURM_NODELIST", "a node list such as 'gpu[01-04]'", alpha::quoted(nodelist));
  return prefix + nodelist.substr(end + 1, first_end - end - 1);
}

namespace {

enum class Launcher { torchrun, mpi, slurm };

// One launcher's names for the rank, the world size, the rank on this node and the ranks on this node.
struct Convention {
  Launcher launcher;
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_size;  // nullptr: the launcher has none
};

constexpr Convention kTorchrun{Launcher::torchrun, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", nullptr};
constexpr Convention kOpenMpi{Launcher::mpi, "mpirun (Open MPI)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                              "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
constexpr Convention kMpich{Launcher::mpi, "mpirun (MPICH)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                            "MPI_LOCALNRANKS"};
constexpr Convention kSlurm{Launcher::slurm, "slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr};

// The convention's rank and world size, when both are set.
std::optional<std::pair<int, int>> ranks_of(const EnvLookup& getenv, const Convention& c) {
  const char* rank = getenv(c.rank);
  const char* world = getenv(c.world_size);
  if (!rank || !world) return std::nullopt;
  const int world_size = parse_int(c.world_size, world, 1, 1 << 20);
  return std::pair{parse_int(c.rank, rank, 0, world_size - 1), world_size};
}

LaunchEnv read(const EnvLookup& getenv, const Convention& c, std::pair<int, int> ranks) {
  LaunchEnv env;
  env.source = c.source;
  env.rank = ranks.first;
  env.world_size = ranks.second;
  const char* local = getenv(c.local_rank);
  const bool mpi = c.launcher == Launcher::mpi;
  if (local) env.local_rank = parse_int(c.local_rank, local, 0, env.world_size - 1);
  else if (c.launcher == Launcher::torchrun) env.local_rank = env.rank;  // one node
  else if (mpi && env.world_size > 1)  // every rank would drive GPU 0
    raise<ConfigError>(kOp, c.local_rank, "the rank on this node, which " + std::string(c.source) + " sets",
                       "unset (another launcher? set RANK, WORLD_SIZE and LOCAL_RANK instead)");
  if (c.launcher == Launcher::slurm) {  // the master: the node list's first host
    if (const char* nodes = getenv("SLURM_NODELIST"))
      env.master_addr = first_slurm_host(nodes);
    else if (const char* job_nodes = getenv("SLURM_JOB_NODELIST"))
      env.master_addr = first_slurm_host(job_nodes);
  }
  read_master(getenv, env);
  // An MPI job over several nodes has no master but MASTER_ADDR: the loopback would leave the other
  // nodes' ranks waiting for a rendezvous that is not theirs until the timeout.
  const char* local_size = c.local_size ? getenv(c.local_size) : nullptr;
  if (mpi && local_size && !getenv("MASTER_ADDR") &&
      parse_int(c.local_size, local_size, 1, env.world_size) < env.world_size)
    raise<ConfigError>(kOp, "MASTER_ADDR", "the rendezvous host of a job on several nodes (mpirun -x MASTER_ADDR=...)",
                       "unset");
  return env;
}

}  // namespace

std::optional<LaunchEnv> launch_env_from(const EnvLookup& getenv) {
  // torchrun's variables are set on purpose: they win. Half of its pair is a mistake, where the others'
  // variables can appear alone outside a launch (a Slurm batch script's shell has SLURM_PROCID).
  if (bool(getenv(kTorchrun.rank)) != bool(getenv(kTorchrun.world_size)))
    raise<ConfigError>(kOp, getenv(kTorchrun.rank) ? kTorchrun.world_size : kTorchrun.rank,
                       "set together with " + std::string(getenv(kTorchrun.rank) ? kTorchrun.rank : kTorchrun.world_size),
                       "unset");
  if (auto ranks = ranks_of(getenv, kTorchrun)) return read(getenv, kTorchrun, *ranks);
  // An MPI launcher names its own ranks exactly, even inside a Slurm allocation whose SLURM_* describe the
  // enclosing step. But srun itself may set PMI_* too (its pmi2 plugin, without MPI_LOCALRANKID): when
  // Slurm's ranks are the same, srun started this process, and Slurm's variables say the most.
  const auto slurm = ranks_of(getenv, kSlurm);
  for (const Convention* c : {&kOpenMpi, &kMpich}) {
    const auto ranks = ranks_of(getenv, *c);
    if (!ranks) continue;
    if (slurm == ranks && getenv("SLURM_STEP_ID")) return read(getenv, kSlurm, *slurm);
    return read(getenv, *c, *ranks);
  }
  if (slurm) return read(getenv, kSlurm, *slurm);
  return std::nullopt;
}

std::optional<LaunchEnv> launch_env() {
  return launch_env_from([](const char* name) { return static_cast<const char*>(std::getenv(name)); });
}

}  // namespace alpha::distributed
