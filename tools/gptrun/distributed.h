// gptrun's data parallelism (docs/DATA_PARALLEL.md): the launch environment
// (mpirun, torchrun, srun variables), the rendezvous on rank 0 and the
// communicator the trainer's all-reduces run through. With world size 1
// there is nothing to join and the communicator is null.
#ifndef GPTC_TOOLS_GPTRUN_DISTRIBUTED_H_
#define GPTC_TOOLS_GPTRUN_DISTRIBUTED_H_

#include <cstdint>
#include <memory>
#include <string>

#include "compiler/support/status.h"
#include "runtime/communicator.h"
#include "runtime/cpu_device.h"
#include "runtime/launch_env.h"
#include "runtime/trainer.h"

namespace gptc::tools {

struct Distributed {
  rt::LaunchEnv env;
  std::unique_ptr<rt::Communicator> comm;  // null with world size 1

  int64_t world() const { return env.world_size; }
  // Rank 0 alone logs, validates, samples and writes checkpoints.
  bool leader() const { return env.is_rank0(); }
  // Ends the other ranks' waits with `why` (they exit with one line too).
  void Abort(const Status& why) const {
    if (comm != nullptr) comm->Abort(why);
  }
};

// Reads the launch environment, checks it against the artifact's compiled
// world size (`gptc compile --dp N`) and, for more than one rank, joins the
// rendezvous. `device` is "cpu" or "gpu".
StatusOr<Distributed> JoinDistributed(int64_t compiled_world, const std::string& artifact,
                                      const std::string& device);

// Routes `trainer`'s all-reduces through `dist`'s communicator (no-op for one rank).
Status AttachCommunicator(const Distributed& dist, rt::Trainer& trainer);

// This rank's rows (RankRows) of a global batch of world * rows rows.
rt::MicroBatch RankSlice(const rt::MicroBatch& global, const rt::LaunchEnv& env, int64_t rows,
                         int64_t seq);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_DISTRIBUTED_H_
