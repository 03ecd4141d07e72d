#include "alpha/distributed/launch_env.h"

#include <cstdlib>
#include <string_view>

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
  if (prefix.empty()) raise<ConfigError>(kOp, "SLURM_NODELIST", "a node list such as 'gpu[01-04]'", quoted(nodelist));
  if (end == std::string::npos || nodelist[end] == ',') return prefix;
  size_t close = nodelist.find(']', end);
  size_t first_end = nodelist.find_first_of(",-]", end + 1);
  if (close == std::string::npos || first_end == end + 1)
    raise<ConfigError>(kOp, "SLURM_NODELIST", "a node list such as 'gpu[01-04]'", quoted(nodelist));
  return prefix + nodelist.substr(end + 1, first_end - end - 1);
}

namespace {

// One launcher's names for the rank, the world size and the rank on this node.
struct Convention {
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;  // unset: the rank (one node) for torchrun, 0 for the others
};

// In the order they win: torchrun's are set on purpose; an MPI launcher's name its own ranks exactly,
// even inside a Slurm allocation whose SLURM_* describe the enclosing job step.
constexpr Convention kConventions[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"mpirun (Open MPI)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"mpirun (MPICH)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

}  // namespace

std::optional<LaunchEnv> launch_env_from(const EnvLookup& getenv) {
  for (const Convention& c : kConventions) {
    const char* rank = getenv(c.rank);
    const char* world = getenv(c.world_size);
    const bool torchrun = &c == &kConventions[0];
    // Half of torchrun's pair is a mistake; the others' variables can appear alone outside a launch (a
    // Slurm batch script's shell has SLURM_PROCID), which is no launch.
    if (torchrun && bool(rank) != bool(world))
      raise<ConfigError>(kOp, rank ? c.world_size : c.rank, "set together with " + std::string(rank ? c.rank : c.world_size),
                         "unset");
    if (!rank || !world) continue;
    LaunchEnv env;
    env.source = c.source;
    env.world_size = parse_int(c.world_size, world, 1, 1 << 20);
    env.rank = parse_int(c.rank, rank, 0, env.world_size - 1);
    const char* local = getenv(c.local_rank);
    env.local_rank = local ? parse_int(c.local_rank, local, 0, env.world_size - 1) : torchrun ? env.rank : 0;
    if (&c == &kConventions[3]) {  // Slurm: the master is the node list's first host
      if (const char* nodes = getenv("SLURM_NODELIST"))
        env.master_addr = first_slurm_host(nodes);
      else if (const char* job_nodes = getenv("SLURM_JOB_NODELIST"))
        env.master_addr = first_slurm_host(job_nodes);
    }
    read_master(getenv, env);
    return env;
  }
  return std::nullopt;
}

std::optional<LaunchEnv> launch_env() {
  return launch_env_from([](const char* name) { return static_cast<const char*>(std::getenv(name)); });
}

}  // namespace alpha::distributed
