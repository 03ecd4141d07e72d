// Where this process stands in a multi-process job, read from the environment the ecosystem's launchers
// set, so they start `alpha train` unchanged:
//   torchrun (and `alpha train --gpus N`): RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
//   mpirun, Open MPI:                      OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   mpirun, MPICH (Hydra):                 PMI_RANK, PMI_SIZE, MPI_LOCALRANKID
//   Slurm (srun):                          SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and the master from
//                                          MASTER_ADDR, else the first host of SLURM_NODELIST
// In that order of precedence when several are present, except that MPI variables whose ranks equal
// Slurm's within an srun step (srun's pmi2 plugin sets PMI_*) are read as Slurm's. The master is
// MASTER_ADDR where set, else the loopback (one node; Slurm: the node list's first host); an MPI job that
// spans nodes (local size below the world size) without MASTER_ADDR raises, as does one without its local
// rank. MASTER_PORT defaults to 29500 (torchrun's).
// No MPI library is involved: an MPI launcher only starts the processes, and NCCL's id still travels over
// Alpha's TCP rendezvous.
#pragma once
#include <functional>
#include <optional>
#include <string>

namespace alpha::distributed {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // the GPU this process drives on its node
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source;  // "torchrun", "mpirun (Open MPI)", "mpirun (MPICH)" or "slurm", for messages
};

inline constexpr int kDefaultMasterPort = 29500;

// Reads the launch variables through `getenv` (std::getenv by default; tests pass a map). nullopt when
// no convention is present. ConfigError naming the variable when one is malformed or inconsistent
// (RANK outside [0, WORLD_SIZE), a port outside 1..65535, a rank set without WORLD_SIZE, ...).
using EnvLookup = std::function<const char*(const char*)>;
std::optional<LaunchEnv> launch_env_from(const EnvLookup& getenv);
std::optional<LaunchEnv> launch_env();

// The first host of a Slurm node list: "gpu[03-05,09],cpu1" -> "gpu03", "a,b" -> "a", "n[1-2]" -> "n1".
// ConfigError on an empty or unbalanced list.
std::string first_slurm_host(const std::string& nodelist);

}  // namespace alpha::distributed
