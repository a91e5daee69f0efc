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

// Note [checkpoint ownership]: a --ckpt-dir belongs to one run at a time
// and holds one run's checkpoints.
// - While it trains, the run holds an exclusive flock(2) on DIR/.gptrun.lock,
//   which says "pid P host H" for the message of a second run, refused at
//   start. The kernel drops the lock when its holder dies however it dies, so
//   a lock file left behind is never stale: nothing needs removing.
// - Each run has a random id, recorded in every checkpoint it writes
//   ("gptc.run_id"); a resumed run keeps its checkpoint's id. A fresh run
//   (no --resume) in a directory that holds step_NNNNNN directories, or a
//   resumed run where some belong to another run, is refused before step 1
//   (the old run's "latest" would otherwise be silently continued or
//   overwritten), unless --overwrite removes them.
// - --resume latest refuses a directory holding several runs' checkpoints.
// Checkpoints from before run ids have none and belong to whoever resumes them.
class CheckpointDirLock {
 public:
  // Creates `dir` if needed and locks it, or fails naming the holder.
  static StatusOr<CheckpointDirLock> Acquire(const std::string& dir);
  CheckpointDirLock(CheckpointDirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  CheckpointDirLock& operator=(CheckpointDirLock&&) = delete;
  ~CheckpointDirLock();

 private:
  explicit CheckpointDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Note [checkpoint config]: a checkpoint with config.json must be of the
// artifact's model (a different head count has the same tensor shapes);
// older checkpoints have none (layers 0) and pass.
Status CheckCheckpointModel(const program::ModelConfig& ckpt, const program::ModelConfig& artifact);

// Refuses a `dir` too long for the files a checkpoint writes in it (the path
// limit would otherwise fail the first checkpoint, after the training).
Status CheckCheckpointDirLength(const std::string& dir);

// A new run id: 16 random hex digits.
std::string NewRunId();

// One step_NNNNNN directory and the run that wrote it ("" when unknown: an
// older checkpoint, or one whose model file does not read).
struct StepCheckpoint {
  int64_t step = 0;
  std::string path, run_id;
};
StatusOr<std::vector<StepCheckpoint>> ListCheckpoints(const std::string& dir);

// Removes the checkpoints `foreign` (--overwrite); returns their names.
StatusOr<std::vector<std::string>> RemoveCheckpoints(const std::vector<StepCheckpoint>& foreign);

// The highest step_NNNNNN directory in `dir`; refuses a directory with
// checkpoints of several runs (Note [checkpoint ownership]).
StatusOr<std::string> LatestCheckpoint(const std::string& dir);

// The same for --resume auto: nothing when `dir` does not exist yet or
// holds no checkpoint (the run starts fresh); several runs' checkpoints are
// refused as for latest.
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
