// The persist phase of a gptrun run (tools/gptrun/train_loop.cc): the
// --ckpt-dir it holds (Note [checkpoint ownership]), --resume's restore of
// the trainer and the data, and the step checkpoints it writes.
#ifndef GPTC_TOOLS_GPTRUN_TRAIN_CHECKPOINTS_H_
#define GPTC_TOOLS_GPTRUN_TRAIN_CHECKPOINTS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "compiler/support/status.h"
#include "runtime/checkpoint.h"
#include "tools/gptrun/checkpoint_dir.h"
#include "tools/gptrun/train_context.h"

namespace gptc::tools {

class CheckpointPhase {
 public:
  explicit CheckpointPhase(RunContext& run) : run_(run) {}

  // Before the data is opened, when this rank writes checkpoints: refuses a
  // directory where they cannot go (now, not at the first checkpoint) or
  // that another run is writing, and holds it for the run.
  Status Lock();
  // Once the log is open: removes the saves a killed run left half-written
  // (Note [checkpoint housekeeping]), with a note for each.
  Status RemoveStale();
  // --resume: the trainer's and the data's state from a checkpoint; returns
  // the first step to run (1 without one).
  StatusOr<int64_t> Resume();
  // Note [checkpoint ownership]: the step directories in --ckpt-dir must be
  // this run's, or none.
  Status Claim();
  // Writes step `step`'s checkpoint (with its validation loss, when it was
  // validated) and prunes to --ckpt-keep.
  Status Save(int64_t step, std::optional<double> val_loss);
  // Note [sharded checkpoints]: on a rank that does not write, its part in
  // the leader's Save of a ZeRO-1 run (the trainer gathers every rank's
  // shards of the state).
  Status Contribute();

 private:
  // Note [data source]: the loader continues where the checkpoint's stopped
  // only when it reads the same data the same way.
  Status RestoreData(const std::string& dir, const rt::CheckpointData& ckpt);

  RunContext& run_;
  std::optional<CheckpointDirLock> lock_;  // held for the run (Note [checkpoint ownership])
  std::string run_id_;
  bool resumed_ = false;
};

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_TRAIN_CHECKPOINTS_H_
