#include "tools/gptrun/train_checkpoints.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "compiler/support/file.h"

namespace gptc::tools {

namespace fs = std::filesystem;
using nlohmann::json;

Status CheckpointPhase::Lock() {
  const std::string& dir = run_.o.ckpt_dir;
  RETURN_IF_ERROR(CheckCheckpointDirLength(dir));
  if (Status s = CheckWritableDirectory(dir); !s.ok()) {
    return Error("--ckpt-dir {}", s.message());
  }
  ASSIGN_OR_RETURN(CheckpointDirLock lock, CheckpointDirLock::Acquire(dir));
  lock_.emplace(std::move(lock));
  return Status::Ok();
}

Status CheckpointPhase::RemoveStale() {
  ASSIGN_OR_RETURN(std::vector<std::string> stale, RemoveStaleTemporaries(run_.o.ckpt_dir));
  for (const std::string& name : stale) {
    run_.console.Line(fmt::format("note: removed {}/{} (a checkpoint save that did not finish)",
                                  run_.o.ckpt_dir, name));
  }
  return Status::Ok();
}

StatusOr<int64_t> CheckpointPhase::Resume() {
  const TrainOptions& o = run_.o;
  run_id_ = NewRunId();  // a resumed run keeps its checkpoint's (Note [checkpoint ownership])
  if (o.resume.empty()) return 1;
  std::string dir = o.resume;
  std::vector<std::string> skipped;  // Note [whole step directories]
  auto say_skipped = [&] {
    for (const std::string& s : skipped) {
      run_.console.Line(
          fmt::format("note: --resume {} skipped {}, an incomplete checkpoint", o.resume, s));
    }
  };
  if (dir == "latest") {
    ASSIGN_OR_RETURN(dir, LatestCheckpoint(o.ckpt_dir, &skipped));
    say_skipped();
  } else if (dir == "auto") {  // one job script for the first start and every restart
    ASSIGN_OR_RETURN(std::optional<std::string> latest,
                     LatestCheckpointIfAny(o.ckpt_dir, &skipped));
    say_skipped();
    if (!latest) {
      run_.console.Line(
          fmt::format("--resume auto: no checkpoint in {} yet: starting at step 1", o.ckpt_dir));
      return 1;
    }
    dir = *latest;
  }
  StatusOr<rt::CheckpointData> ckpt = rt::LoadCheckpoint(dir, run_.program().params);
  if (!ckpt.ok()) return ckpt.status().WithPrefix("--resume");
  // Note [checkpoint config]: a different head count (or context) has the
  // same tensor shapes, so the shapes alone would resume it silently.
  RETURN_IF_ERROR(CheckCheckpointModel(ckpt->model, run_.model()).WithPrefix("--resume " + dir));
  RETURN_IF_ERROR(rt::RestoreTrainer(*ckpt, run_.trainer.get()).WithPrefix("--resume " + dir));
  if (!ckpt->run_id.empty()) run_id_ = ckpt->run_id;
  resumed_ = true;
  if (run_.train) RETURN_IF_ERROR(RestoreData(dir, *ckpt));
  run_.console.Line(fmt::format("resumed from {} at step {}", dir, ckpt->step));
  return ckpt->step + 1;
}

Status CheckpointPhase::RestoreData(const std::string& dir, const rt::CheckpointData& ckpt) {
  if (run_.o.reset_data) {
    run_.console.Line("--reset-data: the training data starts over from its first batch");
    return Status::Ok();
  }
  // The files compared, not the --train patterns (Note [shard identity]).
  if (std::vector<std::string> changes = rt::DataSourceChanges(ckpt.data_source, run_.data_source);
      !changes.empty()) {
    return UsageError(
        "--resume {}: this run has {}: the data order would change (some data repeated, some "
        "skipped); --reset-data starts the data over",
        dir, fmt::join(changes, "; "));
  }
  return run_.train->Restore(ckpt.data).WithPrefix(dir);
}

Status CheckpointPhase::Claim() {
  const std::string& dir = run_.o.ckpt_dir;
  ASSIGN_OR_RETURN(std::vector<StepCheckpoint> all, ListCheckpoints(dir));
  std::vector<StepCheckpoint> foreign;
  for (const StepCheckpoint& c : all) {
    // A checkpoint from before run ids belongs to the run that resumes it.
    if (!resumed_ || (!c.run_id.empty() && c.run_id != run_id_)) foreign.push_back(c);
  }
  if (foreign.empty()) return Status::Ok();
  std::vector<std::string> names;
  for (const StepCheckpoint& c : foreign) names.push_back(StepDirName(c.step));
  if (!run_.o.overwrite) {
    return Error(
        "--ckpt-dir {} holds another run's checkpoints ({}): --resume latest continues that run, "
        "--overwrite removes them, or choose another --ckpt-dir",
        dir, fmt::join(names, " "));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> removed, RemoveCheckpoints(foreign));
  run_.console.Line(fmt::format("--overwrite: removed another run's checkpoints from {}: {}", dir,
                                fmt::join(removed, " ")));
  return Status::Ok();
}

Status CheckpointPhase::Save(int64_t step, std::optional<double> val_loss) {
  const TrainOptions& o = run_.o;
  StatusOr<rt::CheckpointData> data =
      rt::CaptureTrainer(*run_.trainer, run_.program().params, run_.train->state(), run_.model());
  if (!data.ok()) return data.status().WithPrefix("checkpoint");
  data->run_id = run_id_;
  data->data_source = run_.data_source;
  // Note [divergence]: a non-finite parameter never reaches a checkpoint,
  // where it would rotate out the good ones.
  for (size_t i = 0; i < data->params.size(); ++i) {
    const std::vector<float>& v = data->values[i];
    if (std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); })) continue;
    return Error(
        "checkpoint of step {}: parameter {} holds a non-finite value: the run diverged "
        "(not written; the checkpoints before it are kept)",
        step, data->params[i].name);
  }
  RETURN_IF_ERROR(SaveStepCheckpoint(o.ckpt_dir, step, std::move(data).value(), val_loss));
  ASSIGN_OR_RETURN(std::vector<std::string> pruned, PruneCheckpoints(o.ckpt_dir, o.ckpt_keep));
  run_.console.Line(fmt::format(
      "checkpoint {}/{}{}", o.ckpt_dir, StepDirName(step),
      pruned.empty()
          ? ""
          : fmt::format(" (removed {}; --ckpt-keep {})", fmt::join(pruned, ", "), o.ckpt_keep)));
  run_.log->Write(json{{"event", "checkpoint"},
                       {"step", step},
                       {"dir", (fs::path(o.ckpt_dir) / StepDirName(step)).string()}});
  return run_.WriteReport();
}

Status CheckpointPhase::Contribute() {
  return run_.trainer->ExportState().status().WithPrefix("checkpoint");
}

}  // namespace gptc::tools
