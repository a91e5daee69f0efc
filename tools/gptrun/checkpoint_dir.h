// The checkpoints of a --ckpt-dir: DIR/step_NNNNNN directories, each saved
// atomically (written as step_NNNNNN.tmp, then renamed), the latest for
// --resume latest, and the housekeeping a long run needs (Note [checkpoint
// housekeeping]).
#ifndef GPTC_TOOLS_GPTRUN_CHECKPOINT_DIR_H_
#define GPTC_TOOLS_GPTRUN_CHECKPOINT_DIR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/support/status.h"
#include "runtime/checkpoint.h"

namespace gptc::tools {

// 40 -> "step_000040".
std::string StepDirName(int64_t step);

// The highest step_NNNNNN directory in `dir`.
StatusOr<std::string> LatestCheckpoint(const std::string& dir);

// The same for --resume auto: nothing when `dir` does not exist yet or
// holds no checkpoint (the run starts fresh).
StatusOr<std::optional<std::string>> LatestCheckpointIfAny(const std::string& dir);

// Writes DIR/step_NNNNNN via DIR/step_NNNNNN.tmp renamed into place. With a
// `val_loss` (a validation at this step), the checkpoint records it, so that
// PruneCheckpoints can keep the best one.
Status SaveStepCheckpoint(const std::string& dir, int64_t step, rt::CheckpointData data,
                          std::optional<double> val_loss = std::nullopt);

// Removes the step_NNNNNN.tmp directories a killed run left behind; returns
// their names.
StatusOr<std::vector<std::string>> RemoveStaleTemporaries(const std::string& dir);

// Note [checkpoint housekeeping]: keeps the newest `keep` checkpoints and the
// one with the lowest recorded validation loss, and removes the other
// step_NNNNNN directories; returns the removed names. keep <= 0 keeps all.
// A checkpoint whose model file cannot be read is never removed.
StatusOr<std::vector<std::string>> PruneCheckpoints(const std::string& dir, int64_t keep);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_CHECKPOINT_DIR_H_
