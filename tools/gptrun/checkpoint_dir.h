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
//
// Note [lock file]: the lock is opened with O_NOFOLLOW and must be a regular
// file: a symbolic link planted at DIR/.gptrun.lock (by another user, in a
// shared directory) would otherwise make gptrun truncate and write the file
// it points to. Such a lock is refused, and its target left untouched.
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
// older checkpoint, or an incomplete one).
struct StepCheckpoint {
  int64_t step = 0;
  std::string path, run_id;
  // Why it cannot be resumed ("no optim.safetensors", a header that does not
  // read), or "" (Note [whole step directories]).
  std::string incomplete;
};
StatusOr<std::vector<StepCheckpoint>> ListCheckpoints(const std::string& dir);

// Removes the checkpoints `foreign` (--overwrite); returns their names.
StatusOr<std::vector<std::string>> RemoveCheckpoints(const std::vector<StepCheckpoint>& foreign);

// The highest complete step_NNNNNN directory in `dir`; refuses a directory
// with checkpoints of several runs (Note [checkpoint ownership]). The
// incomplete ones newer than it are added to `skipped` ("DIR/step_000009 (no
// model.safetensors)"), for the caller to say so.
StatusOr<std::string> LatestCheckpoint(const std::string& dir,
                                       std::vector<std::string>* skipped = nullptr);

// The same for --resume auto: nothing when `dir` does not exist yet or
// holds no complete checkpoint (the run starts fresh); several runs'
// checkpoints are refused as for latest.
StatusOr<std::optional<std::string>> LatestCheckpointIfAny(
    const std::string& dir, std::vector<std::string>* skipped = nullptr);

// Note [whole step directories]: a step_NNNNNN directory is always a whole
// checkpoint, however a run is killed. It comes to be by one rename of a
// DIR/step_NNNNNN.tmp written in full (or, when one of that step is there
// already, by one exchange of the two), and goes by one rename to
// step_NNNNNN.removing before it is deleted; the next run removes what a
// killed one left under either name. Directories written by gptrun versions
// that deleted checkpoints in place may still be incomplete: --resume
// latest and auto skip them, saying so, and --ckpt-keep neither counts nor
// removes them.
//
// Writes DIR/step_NNNNNN so. With a `val_loss` (a validation at this step),
// the checkpoint records it, so that PruneCheckpoints can keep the best one.
Status SaveStepCheckpoint(const std::string& dir, int64_t step, rt::CheckpointData data,
                          std::optional<double> val_loss = std::nullopt);

// Removes the step_NNNNNN.tmp and step_NNNNNN.removing directories a killed
// run left behind; returns their names.
StatusOr<std::vector<std::string>> RemoveStaleTemporaries(const std::string& dir);

// Note [checkpoint housekeeping]: keeps the newest `keep` checkpoints and the
// one with the lowest recorded validation loss, and removes the other
// step_NNNNNN directories; returns the removed names. keep <= 0 keeps all.
// A checkpoint whose model file cannot be read is neither counted nor removed.
StatusOr<std::vector<std::string>> PruneCheckpoints(const std::string& dir, int64_t keep);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_CHECKPOINT_DIR_H_
