// The launch environment of a data-parallel job: this process's rank, the
// world size, its rank on the node (which GPU it takes) and where rank 0's
// rendezvous listens. Read from the variables the usual launchers set, so
// `mpirun -np 8 gptrun ...`, `srun gptrun ...` and torchrun-style scripts
// work without an MPI library. In this order of precedence (the first
// launcher whose rank variable is set wins):
//
//   launcher          rank                  world size            local rank
//   torchrun          RANK                  WORLD_SIZE            LOCAL_RANK
//   Open MPI          OMPI_COMM_WORLD_RANK  OMPI_COMM_WORLD_SIZE  OMPI_COMM_WORLD_LOCAL_RANK
//   MPICH, Intel MPI  PMI_RANK              PMI_SIZE              MPI_LOCALRANKID
//   Slurm (srun)      SLURM_PROCID          SLURM_NTASKS          SLURM_LOCALID
//   none              0                     1                     0
//
// torchrun comes first because torchrun inside a Slurm or MPI allocation sets
// its own variables on top of the outer launcher's; Open MPI's mpirun inside
// a Slurm job likewise. A missing local rank is taken as the rank (one node).
// Whatever the launcher, MASTER_ADDR (default 127.0.0.1) and MASTER_PORT
// (default 29500) locate rank 0's rendezvous: set them for several nodes
// (`mpirun -x MASTER_ADDR=node0`, or `export` in the Slurm batch script).
// GPTC_DIST_TIMEOUT (seconds, default 300) bounds every blocking rendezvous
// and communication step.
//
// Errors name the variable and its value: "RANK='x' is not an integer",
// "OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4", "RANK is set
// but WORLD_SIZE is not".
#ifndef GPTC_RUNTIME_LAUNCH_ENV_H_
#define GPTC_RUNTIME_LAUNCH_ENV_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "compiler/support/status.h"

namespace gptc::rt {

inline constexpr int kDefaultMasterPort = 29500;
inline constexpr std::chrono::milliseconds kDefaultDistTimeout{300'000};

struct LaunchEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = kDefaultMasterPort;
  std::chrono::milliseconds timeout = kDefaultDistTimeout;
  std::string launcher = "none";  // "torchrun", "Open MPI", "MPICH/Intel MPI", "Slurm", "none"
  std::string world_variable;     // the variable the world size came from ("" for none)

  bool is_rank0() const { return rank == 0; }
  // "rank 1 of 4 (local rank 1, Open MPI), rendezvous 10.0.0.1:29500"
  std::string ToString() const;
};

// A getenv: the value of a variable, or nullptr when it is unset.
using GetEnvFn = std::function<const char*(const char*)>;

// Reads the environment (`getenv`; null: the process's own).
StatusOr<LaunchEnv> ReadLaunchEnv(const GetEnvFn& getenv = nullptr);

// Checks the launched world against the world an artifact was compiled for
// (`gptc compile --dp N`), e.g. "launched 4 ranks (OMPI_COMM_WORLD_SIZE=4) but
// gpt2.gptx was compiled with --dp 2: launch 2 ranks or recompile with --dp 4".
Status CheckWorldSize(const LaunchEnv& env, int64_t compiled_world, std::string_view artifact);

// Rows of each global batch this rank reads: every rank takes `rows_per_rank`
// (the compiled micro-batch) consecutive rows, rank r rows [r*B, (r+1)*B) of
// the world*B rows a single process would read. So the ranks together see
// exactly the batch `--dp 1 --batch world*B` sees, and their slices are disjoint.
struct RowRange {
  int64_t begin = 0;
  int64_t count = 0;
};
RowRange RankRows(const LaunchEnv& env, int64_t rows_per_rank);

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_LAUNCH_ENV_H_
