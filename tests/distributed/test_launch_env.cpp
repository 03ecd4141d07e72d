// The launch environment (torchrun's, mpirun's and Slurm's variables), Slurm node lists, and NCCL's environment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "alpha/core/error.h"
#include "alpha/distributed/launch_env.h"
#include "alpha/distributed/nccl_communicator.h"

namespace alpha::distributed {
namespace {

std::optional<LaunchEnv> parse(const std::map<std::string, std::string>& vars) {
  return launch_env_from([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    parse(vars);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(LaunchEnv, NoLauncherVariablesMeansNone) { EXPECT_FALSE(parse({{"HOME", "/root"}}).has_value()); }

TEST(LaunchEnv, ReadsTorchrunVariables) {
  auto env = parse(
      {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node-a"}, {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_addr, "node-a");
  EXPECT_EQ(env->master_port, 1234);
  EXPECT_EQ(env->source, "torchrun");
}

TEST(LaunchEnv, TorchrunDefaultsLocalRankToRankAndMasterToLoopback) {
  auto env = parse({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_addr, "127.0.0.1");
  EXPECT_EQ(env->master_port, kDefaultMasterPort);
}

TEST(LaunchEnv, ReadsSlurmVariablesWithTheFirstNodeAsMaster) {
  auto env = parse({{"SLURM_PROCID", "9"},
                    {"SLURM_NTASKS", "16"},
                    {"SLURM_LOCALID", "1"},
                    {"SLURM_NODELIST", "gpu[07-08,11],cpu1"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->rank, 9);
  EXPECT_EQ(env->world_size, 16);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_addr, "gpu07");
  EXPECT_EQ(env->source, "slurm");
}

TEST(LaunchEnv, MasterAddrOverridesTheSlurmNodeList) {
  auto env = parse({{"SLURM_PROCID", "0"},
                    {"SLURM_NTASKS", "2"},
                    {"SLURM_NODELIST", "gpu[1-2]"},
                    {"MASTER_ADDR", "10.0.0.1"},
                    {"MASTER_PORT", "29400"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->master_addr, "10.0.0.1");
  EXPECT_EQ(env->master_port, 29400);
}

TEST(LaunchEnv, TorchrunVariablesWinOverSlurm) {
  auto env = parse({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->source, "torchrun");
  EXPECT_EQ(env->world_size, 2);
}

TEST(LaunchEnv, ReadsOpenMpiAndMpichVariablesAheadOfSlurm) {
  // mpirun inside a Slurm allocation: SLURM_* describe the batch step, not these ranks.
  auto ompi = parse({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"},
                     {"SLURM_STEP_ID", "0"}, {"MASTER_ADDR", "node-b"}});
  ASSERT_TRUE(ompi);
  EXPECT_EQ(ompi->source, "mpirun (Open MPI)");
  EXPECT_EQ(ompi->rank, 3);
  EXPECT_EQ(ompi->world_size, 4);
  EXPECT_EQ(ompi->local_rank, 1);
  EXPECT_EQ(ompi->master_addr, "node-b");
  EXPECT_EQ(ompi->master_port, kDefaultMasterPort);
  auto mpich = parse({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "3"}});
  ASSERT_TRUE(mpich);
  EXPECT_EQ(mpich->source, "mpirun (MPICH)");
  EXPECT_EQ(mpich->rank, 2);
  EXPECT_EQ(mpich->local_rank, 2);
  EXPECT_EQ(mpich->master_addr, "127.0.0.1");  // one node: the loopback
  EXPECT_FALSE(parse({{"SLURM_PROCID", "0"}}).has_value()) << "a batch script's shell is no launch";
}

TEST(LaunchEnv, SrunSettingPmiVariablesIsReadAsSlurm) {
  // srun's pmi2 plugin sets PMI_RANK and PMI_SIZE (no MPI_LOCALRANKID) beside Slurm's own.
  auto env = parse({{"PMI_RANK", "5"}, {"PMI_SIZE", "8"}, {"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"},
                    {"SLURM_LOCALID", "1"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NODELIST", "gpu[03-06]"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->source, "slurm");
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_addr, "gpu03");
}

TEST(LaunchEnv, MpiJobsWithoutALocalRankOrAMasterAcrossNodesRaise) {
  EXPECT_NE(error_of({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}).find("MPI_LOCALRANKID"), std::string::npos);
  EXPECT_NE(error_of({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}})
                .find("MASTER_ADDR"),
            std::string::npos);
  EXPECT_NE(error_of({{"PMI_RANK", "3"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "0"}}).find("PMI_RANK"),
            std::string::npos);
}

TEST(LaunchEnv, MalformedOrInconsistentVariablesRaiseNamingThem) {
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("RANK"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}}).find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("'x'"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}).find("MASTER_PORT"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "-1"}}).find("LOCAL_RANK"), std::string::npos);
}

TEST(SlurmNodeList, FirstHost) {
  EXPECT_EQ(first_slurm_host("node1"), "node1");
  EXPECT_EQ(first_slurm_host("a,b"), "a");
  EXPECT_EQ(first_slurm_host("n[1-2]"), "n1");
  EXPECT_EQ(first_slurm_host("gpu[03-05,09],cpu1"), "gpu03");
  EXPECT_EQ(first_slurm_host("gpu[9,3]"), "gpu9");
  EXPECT_THROW(first_slurm_host(""), ConfigError);
  EXPECT_THROW(first_slurm_host("gpu[01-04"), ConfigError);
  EXPECT_THROW(first_slurm_host("gpu[]"), ConfigError);
}

// Restores one environment variable when it goes out of scope.
class SavedVariable {
 public:
  explicit SavedVariable(const char* name) : name_(name) {
    if (const char* value = std::getenv(name)) value_ = value;
  }
  ~SavedVariable() {
    if (value_)
      setenv(name_, value_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> value_;
};

TEST(NcclEnvironment, TurnsNvlinkMulticastOffUnlessSetAndLeavesTheAlgorithmAlone) {
  SavedVariable nvls("NCCL_NVLS_ENABLE"), algo("NCCL_ALGO"), proto("NCCL_PROTO");
  unsetenv("NCCL_NVLS_ENABLE");
  setenv("NCCL_ALGO", "Tree", 1);
  unsetenv("NCCL_PROTO");
  set_nccl_environment();
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
  EXPECT_STREQ(std::getenv("NCCL_ALGO"), "Tree");
  EXPECT_EQ(std::getenv("NCCL_PROTO"), nullptr);

  setenv("NCCL_NVLS_ENABLE", "1", 1);
  set_nccl_environment();
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "1") << "the user's explicit choice is kept";
}

}  // namespace
}  // namespace alpha::distributed
