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

std::optional<LaunchEnv> launch_env_from(const EnvLookup& getenv) {
  LaunchEnv env;
  const char* rank = getenv("RANK");
  const char* world = getenv("WORLD_SIZE");
  if (rank || world) {
    if (!rank || !world)
      raise<ConfigError>(kOp, rank ? "WORLD_SIZE" : "RANK",
                         "set together with " + std::string(rank ? "RANK" : "WORLD_SIZE"), "unset");
    env.source = "torchrun";
    env.world_size = parse_int("WORLD_SIZE", world, 1, 1 << 20);
    env.rank = parse_int("RANK", rank, 0, env.world_size - 1);
    const char* local = getenv("LOCAL_RANK");
    env.local_rank = local ? parse_int("LOCAL_RANK", local, 0, env.world_size - 1) : env.rank;
    read_master(getenv, env);
    return env;
  }
  const char* procid = getenv("SLURM_PROCID");
  const char* ntasks = getenv("SLURM_NTASKS");
  if (!procid || !ntasks) return std::nullopt;
  env.source = "slurm";
  env.world_size = parse_int("SLURM_NTASKS", ntasks, 1, 1 << 20);
  env.rank = parse_int("SLURM_PROCID", procid, 0, env.world_size - 1);
  const char* local = getenv("SLURM_LOCALID");
  env.local_rank = local ? parse_int("SLURM_LOCALID", local, 0, env.world_size - 1) : 0;
  if (const char* nodes = getenv("SLURM_NODELIST"))
    env.master_addr = first_slurm_host(nodes);
  else if (const char* job_nodes = getenv("SLURM_JOB_NODELIST"))
    env.master_addr = first_slurm_host(job_nodes);
  read_master(getenv, env);
  return env;
}

std::optional<LaunchEnv> launch_env() {
  return launch_env_from([](const char* name) { return static_cast<const char*>(std::getenv(name)); });
}

}  // namespace alpha::distributed
