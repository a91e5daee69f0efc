// gptrun eval: a checkpoint's accuracy on a multiple-choice eval set
// (HellaSwag in llm.c's .bin format) through the artifact's score entry
// (tools/gptrun/eval_set.h), on any device, split across data-parallel
// ranks when launched as several.
#include <cstdio>
#include <optional>
#include <string>

#include "compiler/program/container.h"
#include "compiler/support/file.h"
#include "runtime/checkpoint.h"
#include "runtime/program_loader.h"
#include "tools/common/flags.h"
#include "tools/common/progress.h"
#include "tools/gptrun/checkpoint_dir.h"
#include "tools/gptrun/devices.h"
#include "tools/gptrun/distributed.h"
#include "tools/gptrun/eval_set.h"

namespace gptc::tools {

namespace {

struct EvalOptions {
  std::string artifact, checkpoint, hellaswag, json;
  int64_t limit = 0;  // 0: every example
  uint64_t seed = 0;  // without --resume: the initial parameters' seed
  DeviceFlags device;
  int gpu = -1;
};

Flags DeclareEvalFlags() {
  Flags flags("gptrun eval", "FILE.gptx --hellaswag FILE.bin [--resume CKPT_DIR] [flags]",
              "Scores a checkpoint (a step_NNNNNN directory, of gptrun or of gptc import-hf) on a "
              "multiple-choice eval set with the artifact's score entry, on any device: acc (the "
              "completion of least summed loss) and acc_norm (least mean loss) with their 95% "
              "intervals (docs/EVAL.md). Launched as data-parallel ranks, each scores its share.");
  flags.Value("hellaswag", "FILE", "the eval set, in llm.c's .bin format (gpt-tokenize --eval)")
      .Value("resume", "CKPT_DIR",
             "the checkpoint to score (default: the untrained initial parameters of --seed)")
      .Value("seed", "S", "without --resume: the initial parameters' seed", "0")
      .Value("limit", "N", "score the first N examples only (default: all)")
      .Value("json", "FILE", "write the result (and, with one rank, every example's) as JSON");
  DeclareDeviceChoiceFlags(flags);
  return flags;
}

StatusOr<EvalOptions> ReadEvalOptions(const Flags& flags) {
  if (flags.positional().size() != 1) {
    return UsageError("eval takes one FILE.gptx (see gptrun eval --help)");
  }
  if (!flags.Has("hellaswag")) {
    return UsageError("eval needs --hellaswag FILE.bin: the examples to score");
  }
  EvalOptions o;
  o.artifact = flags.positional()[0];
  o.hellaswag = flags.Get("hellaswag");
  o.checkpoint = flags.Get("resume");
  o.json = flags.Get("json");
  ASSIGN_OR_RETURN(o.device, ReadDeviceFlags(flags));
  int64_t seed = 0, gpu = -1;
  RETURN_IF_ERROR(flags.ReadInts({{"limit", &o.limit, 1}, {"seed", &seed, 0}, {"gpu", &gpu, 0}}));
  o.seed = static_cast<uint64_t>(seed);
  o.gpu = static_cast<int>(gpu);
  if (!o.json.empty()) RETURN_IF_ERROR(CheckOutputTarget(o.json).WithPrefix("--json"));
  return o;
}

class Evaluation {
 public:
  explicit Evaluation(const EvalOptions& o) : o_(o) {}

  Status Run() {
    RETURN_IF_ERROR(Load());
    RETURN_IF_ERROR(Restore());
    ASSIGN_OR_RETURN(rt::EvalSet set,
                     LoadEvalSet(o_.hellaswag, o_.limit, *score_, loaded_->model.vocab));
    const bool leader = dist_->leader();
    ProgressLine progress("gptrun eval", leader && TerminalProgress());
    auto show = [&](int64_t done, int64_t total) {
      progress.Show(fmt::format("{}/{} examples", done, total));
    };
    if (leader) {
      std::fprintf(stderr, "gptrun eval: %s (%zu examples) with %s on %s%s\n", o_.hellaswag.c_str(),
                   set.examples.size(), where_.c_str(), device_.c_str(),
                   dist_->world() > 1 ? fmt::format(", {} ranks", dist_->world()).c_str() : "");
    }
    ASSIGN_OR_RETURN(EvalSetScores scores,
                     ScoreEvalSet(*trainer_, *score_, set, dist_->env.rank, dist_->world(), show));
    progress.Clear();
    RETURN_IF_ERROR(dist_->Finish());
    if (!leader) return Status::Ok();
    std::printf("%s\n", EvalLine("hellaswag", scores).c_str());
    return o_.json.empty() ? Status::Ok() : WriteJson(scores);
  }

  // After a failure: the other ranks stop waiting for this one.
  void Abort(const Status& why) const {
    if (dist_.has_value()) dist_->Abort(why);
  }

 private:
  // The artifact, its score entry, the ranks and the device's trainer.
  Status Load() {
    ASSIGN_OR_RETURN(program::Artifact artifact, program::ReadArtifact(o_.artifact));
    artifact_.emplace(std::move(artifact));
    ASSIGN_OR_RETURN(rt::LoadedProgram loaded, rt::LoadProgram(*artifact_, o_.artifact));
    loaded_.emplace(std::move(loaded));
    score_ = loaded_->program.Find(program::EntryRole::kScore);
    if (score_ == nullptr) {
      return UsageError(
          "{} has no score entry (compiled with --no-logits, or by an older gptc): "
          "compile it again without --no-logits",
          o_.artifact);
    }
    TrainOptions t;
    t.artifact = o_.artifact;  // the devices' errors name it
    t.device = o_.device.device;
    t.gpu = o_.gpu;
    t.emu_checks = o_.device.emu_checks;
    t.trust_artifact = o_.device.trust_artifact;
    t.seed = o_.seed;
    device_ = ChooseDevice(t, *loaded_).name;
    ASSIGN_OR_RETURN(Distributed dist,
                     JoinDistributed(loaded_->program.world_size, o_.artifact, device_, o_.gpu));
    dist_.emplace(std::move(dist));
    ASSIGN_OR_RETURN(trainer_, MakeTrainer(device_, t, *artifact_, &loaded_->program, *dist_));
    return Status::Ok();
  }

  // The checkpoint's weights (no optimizer state), or the initial ones.
  Status Restore() {
    if (o_.checkpoint.empty()) {
      where_ = fmt::format("the initial parameters (seed {})", o_.seed);
      return Status::Ok();
    }
    const std::string prefix = "--resume " + o_.checkpoint;
    StatusOr<rt::CheckpointData> loaded =
        rt::LoadCheckpoint(o_.checkpoint, loaded_->program.params, rt::CheckpointParts::kModelOnly);
    if (!loaded.ok()) return loaded.status().WithPrefix("--resume");
    const rt::CheckpointData& ckpt = *loaded;
    RETURN_IF_ERROR(CheckCheckpointModel(ckpt.model, loaded_->model).WithPrefix(prefix));
    RETURN_IF_ERROR(rt::RestoreTrainer(ckpt, trainer_.get()).WithPrefix(prefix));
    step_ = ckpt.step;
    where_ = fmt::format("{} (step {})", o_.checkpoint, step_);
    return Status::Ok();
  }

  Status WriteJson(const EvalSetScores& scores) const {
    nlohmann::json j = TallyJson(scores.tally);
    j["format"] = "gptrun-eval-1";
    j["set"] = o_.hellaswag;
    j["artifact"] = o_.artifact;
    j["checkpoint"] = o_.checkpoint;
    j["step"] = step_;
    j["device"] = device_;
    j["ranks"] = dist_->world();
    j["seconds"] = scores.seconds;
    if (dist_->world() == 1) {
      nlohmann::json examples = nlohmann::json::array();
      for (const rt::ExampleScore& e : scores.examples) examples.push_back(ExampleJson(e));
      j["per_example"] = std::move(examples);
    }
    return WriteFileAtomically(o_.json, j.dump(1) + "\n").WithPrefix("--json");
  }

  const EvalOptions& o_;
  std::optional<program::Artifact> artifact_;
  std::optional<rt::LoadedProgram> loaded_;
  const program::TrainEntry* score_ = nullptr;
  std::string device_, where_;
  std::optional<Distributed> dist_;
  std::unique_ptr<rt::Trainer> trainer_;
  int64_t step_ = 0;
};

}  // namespace

int EvalMain(int argc, char** argv) {
  Flags flags = DeclareEvalFlags();
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return FailWith("gptrun", s);
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  StatusOr<EvalOptions> o = ReadEvalOptions(flags);
  if (!o.ok()) return FailWith("gptrun", o.status());
  Evaluation evaluation(*o);
  if (Status s = evaluation.Run(); !s.ok()) {
    evaluation.Abort(s);
    return FailWith("gptrun", s);
  }
  return ExitWithStdoutChecked("gptrun", 0);
}

}  // namespace gptc::tools
