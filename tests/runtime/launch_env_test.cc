#include "runtime/launch_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace gptc::rt {
namespace {

using Env = std::map<std::string, std::string>;

StatusOr<LaunchEnv> Read(const Env& env) {
  return ReadLaunchEnv([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string ErrorOf(const Env& env) {
  StatusOr<LaunchEnv> e = Read(env);
  return e.ok() ? "ok" : e.status().message();
}

TEST(LaunchEnvTest, NoLauncherIsOneRank) {
  StatusOr<LaunchEnv> e = Read({});
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->rank, 0);
  EXPECT_EQ(e->world_size, 1);
  EXPECT_EQ(e->local_rank, 0);
  EXPECT_EQ(e->launcher, "none");
  EXPECT_EQ(e->master_addr, "127.0.0.1");
  EXPECT_EQ(e->master_port, 29500);
  EXPECT_EQ(e->timeout, std::chrono::seconds(300));
  EXPECT_TRUE(e->is_rank0());
}

TEST(LaunchEnvTest, EachLauncher) {
  struct Case {
    Env env;
    const char* launcher;
  };
  const Case cases[] = {
      {{{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}}, "torchrun"},
      {{{"OMPI_COMM_WORLD_RANK", "3"},
        {"OMPI_COMM_WORLD_SIZE", "8"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}},
       "Open MPI"},
      {{{"PMI_RANK", "3"}, {"PMI_SIZE", "8"}, {"MPI_LOCALRANKID", "1"}}, "MPICH/Intel MPI"},
      {{{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}}, "Slurm"},
  };
  for (const Case& c : cases) {
    StatusOr<LaunchEnv> e = Read(c.env);
    ASSERT_TRUE(e.ok()) << c.launcher << ": " << e.status().message();
    EXPECT_EQ(e->rank, 3) << c.launcher;
    EXPECT_EQ(e->world_size, 8) << c.launcher;
    EXPECT_EQ(e->local_rank, 1) << c.launcher;
    EXPECT_EQ(e->launcher, c.launcher);
  }
}

TEST(LaunchEnvTest, Precedence) {
  // torchrun inside a Slurm job: torchrun's variables win.
  Env env = {{"RANK", "5"},         {"WORLD_SIZE", "16"},  {"LOCAL_RANK", "5"},
             {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}};
  EXPECT_EQ(Read(env)->launcher, "torchrun");
  EXPECT_EQ(Read(env)->world_size, 16);
  // mpirun inside a Slurm allocation: Open MPI's.
  env = {{"OMPI_COMM_WORLD_RANK", "1"},
         {"OMPI_COMM_WORLD_SIZE", "4"},
         {"SLURM_PROCID", "0"},
         {"SLURM_NTASKS", "1"}};
  EXPECT_EQ(Read(env)->launcher, "Open MPI");
  EXPECT_EQ(Read(env)->rank, 1);
  EXPECT_EQ(Read(env)->world_variable, "OMPI_COMM_WORLD_SIZE");
}

TEST(LaunchEnvTest, MasterAddressPortTimeoutAndMissingLocalRank) {
  StatusOr<LaunchEnv> e = Read({{"PMI_RANK", "2"},
                                {"PMI_SIZE", "4"},
                                {"MASTER_ADDR", "node07"},
                                {"MASTER_PORT", "6000"},
                                {"GPTC_DIST_TIMEOUT", "1.5"}});
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->local_rank, 2);  // no MPI_LOCALRANKID: one node
  EXPECT_EQ(e->master_addr, "node07");
  EXPECT_EQ(e->master_port, 6000);
  EXPECT_EQ(e->timeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(e->ToString(), "rank 2 of 4 (local rank 2, MPICH/Intel MPI), rendezvous node07:6000");
}

TEST(LaunchEnvTest, ErrorsNameTheVariable) {
  EXPECT_EQ(ErrorOf({{"RANK", "x"}, {"WORLD_SIZE", "2"}}),
            "RANK='x' is not a non-negative integer");
  EXPECT_EQ(ErrorOf({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}),
            "RANK='-1' is not a non-negative integer");
  EXPECT_EQ(ErrorOf({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}}),
            "OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4");
  EXPECT_EQ(ErrorOf({{"RANK", "0"}}), "RANK is set but WORLD_SIZE is not (torchrun sets both)");
  EXPECT_EQ(ErrorOf({{"WORLD_SIZE", "2"}}),
            "WORLD_SIZE is set but RANK is not (torchrun sets both)");
  EXPECT_EQ(ErrorOf({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "0"}}),
            "SLURM_NTASKS=0 must be at least 1");
  EXPECT_EQ(ErrorOf({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}}),
            "LOCAL_RANK=2 is above RANK=1");
  EXPECT_EQ(ErrorOf({{"MASTER_PORT", "70000"}}), "MASTER_PORT=70000 is not a TCP port (1-65535)");
  EXPECT_EQ(ErrorOf({{"MASTER_PORT", "http"}}), "MASTER_PORT='http' is not a non-negative integer");
  EXPECT_EQ(ErrorOf({{"MASTER_ADDR", ""}}), "MASTER_ADDR is set but empty");
  EXPECT_EQ(ErrorOf({{"GPTC_DIST_TIMEOUT", "soon"}}),
            "GPTC_DIST_TIMEOUT='soon' is not a positive number of seconds");
  EXPECT_EQ(ErrorOf({{"GPTC_DIST_TIMEOUT", "0"}}),
            "GPTC_DIST_TIMEOUT='0' is not a positive number of seconds");
}

TEST(LaunchEnvTest, WorldMustMatchTheArtifact) {
  LaunchEnv env = *Read({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_TRUE(CheckWorldSize(env, 4, "gpt2.gptx").ok());
  EXPECT_EQ(CheckWorldSize(env, 2, "gpt2.gptx").message(),
            "launched 4 ranks (OMPI_COMM_WORLD_SIZE=4) but gpt2.gptx was compiled with --dp 2: "
            "launch 2 ranks (mpirun -np 2) or recompile with --dp 4");
  EXPECT_EQ(CheckWorldSize(*Read({}), 2, "gpt2.gptx").message(),
            "launched 1 rank (no launcher variables set) but gpt2.gptx was compiled with --dp 2: "
            "launch 2 ranks (mpirun -np 2) or recompile with --dp 1");
}

TEST(LaunchEnvTest, RankRowsAreDisjointSlicesOfTheGlobalBatch) {
  LaunchEnv env = *Read({{"RANK", "2"}, {"WORLD_SIZE", "4"}});
  RowRange r = RankRows(env, 8);
  EXPECT_EQ(r.begin, 16);
  EXPECT_EQ(r.count, 8);
}

}  // namespace
}  // namespace gptc::rt
