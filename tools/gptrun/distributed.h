// gptrun's data parallelism (docs/DATA_PARALLEL.md): the launch environment
// (mpirun, torchrun, srun variables), the rendezvous on rank 0 and the
// communicator the trainer's all-reduces run through: over TCP for CPU
// ranks, NCCL for GPU ranks (each on the GPU of its local rank, watched by
// a watchdog: runtime/watchdog.h). With world size 1 there is nothing to
// join and there is no communicator.
#ifndef GPTC_TOOLS_GPTRUN_DISTRIBUTED_H_
#define GPTC_TOOLS_GPTRUN_DISTRIBUTED_H_

#include <cstdint>
#include <memory>
#include <string>

#include "compiler/support/status.h"
#include "runtime/communicator.h"
#include "runtime/gpu/communicator.h"
#include "runtime/launch_env.h"
#include "runtime/rendezvous.h"
#include "runtime/trainer.h"
#include "runtime/watchdog.h"

namespace gptc::tools {

struct Distributed {
  rt::LaunchEnv env;
  std::unique_ptr<rt::Communicator> comm;           // CPU ranks: over TCP
  std::unique_ptr<rt::gpu::Communicator> gpu_comm;  // GPU ranks: NCCL
  // GPU ranks: ends every rank when one dies or hangs. Declared after
  // gpu_comm, so it stops before the communicator it probes goes.
  std::unique_ptr<rt::Watchdog> watchdog;
  int gpu = 0;  // the GPU this rank runs on (--gpu, or the local rank)

  int64_t world() const { return env.world_size; }
  // Rank 0 alone logs, validates, samples and writes checkpoints.
  bool leader() const { return env.is_rank0(); }
  // Ends the other ranks' waits with `why` (they exit with one line too).
  void Abort(const Status& why) const;
  // Brackets a train step: a GPU step that outlasts GPTC_DIST_TIMEOUT is a hang.
  void BeginStep(int64_t step) const;
  void EndStep() const;
  // The clean end of a run: waits until every rank is done (GPU ranks), so
  // that none takes another's exit for a failure.
  Status Finish() const;
};

// Reads the launch environment, checks it against the artifact's compiled
// world size (`gptc compile --dp N`) and, for more than one rank, joins the
// rendezvous and makes the communicator of `device` ("cpu" or "gpu"). A
// "gpu" rank's GPU is checked before joining, so that a rank without one
// fails at once; while the join waits, stderr says for whom.
// `gpu_flag` is --gpu (-1 when not given): a single process's GPU; ranks
// take the GPU of their local rank instead. `agreed`: what every rank must
// agree on (Note [agreement] in runtime/rendezvous.h); a rank that differs
// fails the join on every rank.
StatusOr<Distributed> JoinDistributed(int64_t compiled_world, const std::string& artifact,
                                      const std::string& device, int gpu_flag,
                                      rt::AgreedFields agreed = {});

// This rank's rows (RankRows) of a global batch of world * rows rows.
rt::MicroBatch RankSlice(const rt::MicroBatch& global, const rt::LaunchEnv& env, int64_t rows,
                         int64_t seq);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_DISTRIBUTED_H_
