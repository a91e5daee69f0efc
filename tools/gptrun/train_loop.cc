#include "tools/gptrun/train_loop.h"

#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "compiler/program/container.h"
#include "compiler/program/gpu_spec.h"
#include "compiler/support/file.h"
#include "compiler/support/text.h"
#include "runtime/checkpoint.h"
#include "runtime/cpu_device.h"
#include "runtime/data_loader.h"
#include "runtime/lr_schedule.h"
#include "runtime/program_loader.h"
#include "runtime/tokenizer.h"
#include "runtime/trainer.h"
#include "tools/common/progress.h"
#include "tools/gptrun/checkpoint_dir.h"
#include "tools/gptrun/devices.h"
#include "tools/gptrun/distributed.h"
#include "tools/gptrun/run_report.h"
#include "tools/gptrun/sampler.h"
#include "tools/gptrun/tensorboard.h"

namespace gptc::tools {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

int Fail(int code, const Status& status) {
  std::fprintf(stderr, "gptrun: %s\n", status.message().c_str());
  return code;
}

// stdout, with a progress bar under the log when it is a terminal.
class Console {
 public:
  Console() : tty_(isatty(STDOUT_FILENO) == 1) {}
  // Ranks other than 0 print nothing (their errors still go to stderr).
  void set_quiet(bool quiet) { quiet_ = quiet; }
  void Line(const std::string& text) {
    if (quiet_) return;
    Clear();
    std::fputs(text.c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  void Bar(int64_t step, int64_t total, double eta_s) {
    if (!tty_ || quiet_) return;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * step / std::max<int64_t>(total, 1));
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::printf("\r[%s] %lld/%lld eta %.0f s", bar.c_str(), static_cast<long long>(step),
                static_cast<long long>(total), eta_s);
    std::fflush(stdout);
    shown_ = true;
  }
  void Clear() {
    if (shown_) std::fputs("\r\033[K", stdout);
    shown_ = false;
  }

 private:
  bool tty_;
  bool quiet_ = false;
  bool shown_ = false;
};

// Note [stop signals]: SIGINT (Ctrl-C) and SIGTERM (what Slurm and
// Kubernetes send before they kill a preempted job) do not kill a run: the
// handler only records the signal, the loop finishes the step it is in,
// writes a checkpoint when --ckpt-dir is set, and the run ends with one line
// and exit code 128 + the signal (130, 143), so a requeued job continues with
// --resume latest (or auto) exactly where it stopped. A second signal kills
// at once, as the default action would have.
std::atomic<int> stop_signal{0};

extern "C" void RecordStopSignal(int signal) {
  if (stop_signal.exchange(signal) != 0) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
}

// Installs RecordStopSignal for SIGINT and SIGTERM while it lives.
class StopSignals {
 public:
  StopSignals() {
    stop_signal = 0;
    struct sigaction action = {};
    action.sa_handler = RecordStopSignal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ = {}, old_term_ = {};
};

// The --log file: one JSON object a line; no-op without a path. A line that
// could not be written (a full disk) is kept as
// the log's error, which the loop turns into the run's: a log is never left
// cut mid-line while the run reports success (Note [checked stdout] in
// tools/common/flags.h is the same for what gptrun prints).
class JsonLog {
 public:
  static StatusOr<JsonLog> Open(const std::string& path) {
    JsonLog log;
    if (path.empty()) return log;
    log.path_ = path;
    log.file_ = std::fopen(path.c_str(), "a");
    if (log.file_ == nullptr) return Error("--log {}: cannot open for writing", path);
    return log;
  }
  JsonLog() = default;
  JsonLog(JsonLog&& o) noexcept
      : file_(o.file_), path_(std::move(o.path_)), mirrors_(std::move(o.mirrors_)) {
    o.file_ = nullptr;
  }
  JsonLog& operator=(JsonLog&&) = delete;
  ~JsonLog() {
    if (file_ != nullptr) std::fclose(file_);
  }
  // Every event also goes to `to` (gptrun --report, --tensorboard), with or
  // without a file.
  void Mirror(std::function<void(const json&)> to) { mirrors_.push_back(std::move(to)); }
  void Write(const json& event) {
    for (const auto& to : mirrors_) to(event);
    if (file_ == nullptr || !status_.ok()) return;
    std::string line = event.dump() + "\n";
    errno = 0;
    if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
      status_ = Error("--log {}: {}", path_, errno != 0 ? std::strerror(errno) : "write error");
    }
  }
  // The first write that failed, if any.
  const Status& status() const { return status_; }

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  std::vector<std::function<void(const json&)>> mirrors_;
  Status status_;
};

// FLOPs of one token's forward + backward: 6 * (matmul parameters, as the
// loader counts them from the GPT-2 table) for the matmuls plus
// 12 * layers * seq * width for attention (as llm.c).
double FlopsPerToken(const rt::LoadedProgram& p) {
  return 6.0 * static_cast<double>(p.matmul_values) +
         12.0 * static_cast<double>(p.model.layers * p.flags.seq * p.model.width);
}

}  // namespace

double KnownPeakTflops(std::string_view device_name) {
  const std::optional<program::GpuSpec> gpu = program::GpuSpecOfDevice(device_name);
  return gpu ? gpu->peak_tflops : 0.0;
}

namespace {

// Note [agreement]: the training data as the ranks compare it: the shards'
// identities (Note [shard identity]), not the pattern; "" when they cannot
// be read (the data loader says why, after the join).
std::string DescribeTrainData(const std::string& pattern) {
  StatusOr<std::vector<std::string>> paths = rt::ExpandShardPattern(pattern);
  if (!paths.ok() || paths->empty()) return "";
  StatusOr<rt::DataSource> source = rt::MakeDataSource(pattern, *paths, 0, 0);
  if (!source.ok()) return "";
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const rt::ShardIdentity& f : source->files) {
    for (char c : fmt::format("{}/{}/{:x};", f.name, f.bytes, f.head)) {
      hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    }
  }
  const size_t n = source->files.size();
  return fmt::format("{}{} ({} shard{}, identity {:016x})", source->files.front().name,
                     n > 1 ? ".." + source->files.back().name : "", n, n == 1 ? "" : "s", hash);
}

// Note [agreement]: where a run starts, from its --resume checkpoint's
// metadata; "" when that cannot be read (Resume says why, after the join).
std::string DescribeStart(const TrainOptions& o) {
  if (o.resume.empty()) return "step 1";
  std::string dir = o.resume;
  if (dir == "latest" || dir == "auto") {
    StatusOr<std::optional<std::string>> latest = LatestCheckpointIfAny(o.ckpt_dir);
    if (!latest.ok()) return "";
    if (!*latest) return o.resume == "auto" ? "step 1" : "";
    dir = **latest;
  }
  const std::string path = dir + "/model.safetensors";
  StatusOr<std::map<std::string, std::string>> meta = rt::ReadSafeTensorsMetadata(path);
  if (!meta.ok()) return "";
  StatusOr<rt::CheckpointMetadata> m = rt::DecodeCheckpointMetadata(*meta, path);
  if (!m.ok()) return "";
  if (o.reset_data) return fmt::format("step {}, the data from its start", m->step + 1);
  return fmt::format("step {}, the data at epoch {} shard {} sequence {}", m->step + 1,
                     m->data.epoch, m->data.shard, m->data.sequence);
}

// One gptrun run, phase by phase (Train calls Run). Each phase returns
// the exit code of its failure, 0 to go on; after the rendezvous a failure
// also ends the other ranks (Abort), and every rank ends through Finish so
// that none takes another's exit for a failure.
class TrainRun {
 public:
  TrainRun(const TrainOptions& o, TrainSummary* summary)
      : o_(o), summary_(summary != nullptr ? summary : &own_summary_) {
    console_.set_quiet(o.quiet);
  }

  int Run() {
    summary_->first_step = start_;
    for (int (TrainRun::*phase)() :
         {&TrainRun::Load, &TrainRun::Agree, &TrainRun::Join, &TrainRun::OpenData,
          &TrainRun::StartTrainer, &TrainRun::Resume, &TrainRun::ClaimCheckpointDir}) {
      if (int code = (this->*phase)(); code != 0) return code;
    }
    if (start_ > o_.steps) {
      console_.Line(fmt::format("nothing to do: the checkpoint is at step {}, --steps {}",
                                start_ - 1, o_.steps));
      return Finish();
    }
    if (int code = Loop(); code != 0) return code;
    console_.Clear();
    const double steps_s = static_cast<double>(timed_steps_) / train_s_;
    summary_->train_seconds = train_s_;
    summary_->tokens_per_second = steps_s * static_cast<double>(tokens_per_step_);
    console_.Line(
        fmt::format("{}: {} in {:.2f} s | {:.3f} steps/s | {} tok/s | loss {:.4f} -> {:.4f}",
                    o_.bench ? "bench" : "done", Plural(timed_steps_, "step"), train_s_, steps_s,
                    WithThousands(static_cast<int64_t>(steps_s * tokens_per_step_ + 0.5)),
                    first_loss_, last_loss_));
    if (std::string report = ProfileReport(*trainer_, o_.profile); !report.empty()) {
      console_.Line(report);
    }
    if (!o_.profile_json.empty()) {
      Status written = WriteFileAtomically(o_.profile_json, ProfileJson(*trainer_));
      if (!written.ok()) return Abort(1, written.WithPrefix("--profile-json"));
    }
    if (!log_->status().ok()) return Abort(1, log_->status());
    if (tensorboard_ && !tensorboard_->status().ok()) return Abort(1, tensorboard_->status());
    if (Status s = WriteReport(); !s.ok()) return Abort(1, s);
    return Finish();
  }

 private:
  int Fail(int code, const Status& s) {
    summary_->error = s.message();
    return tools::Fail(code, s);
  }
  int Abort(int code, const Status& s) {
    if (dist_) dist_->Abort(s);
    return Fail(code, s);
  }
  Status WriteReport() {
    if (!report_ || !report_->enabled()) return Status::Ok();
    return report_->Write(*artifact_, o_.artifact, *trainer_, trainer_->DeviceName());
  }
  int Finish() {
    if (Status s = dist_->Finish(); !s.ok()) return Abort(1, s);
    return 0;
  }
  const program::ModelConfig& model() const { return loaded_->model; }
  const program::CompileFlags& flags() const { return loaded_->flags; }
  program::TrainProgram& program() { return loaded_->program; }

  // The artifact, its program and the device, checked before any rendezvous.
  int Load() {
    StatusOr<program::Artifact> artifact = program::ReadArtifact(o_.artifact);
    if (!artifact.ok()) return Fail(1, artifact.status());
    artifact_.emplace(std::move(artifact).value());
    StatusOr<rt::LoadedProgram> loaded = rt::LoadProgram(*artifact_, o_.artifact);
    if (!loaded.ok()) return Fail(1, loaded.status());
    loaded_.emplace(std::move(loaded).value());
    device_ = ChooseDevice(o_, *loaded_);
    summary_->device = device_.name;
    if (device_.name == "cpu" && loaded_->parameter_values > o_.cpu_max_params) {
      // Say why the GPU was not taken when the default fell back to the CPU.
      const std::string why = device_.note.empty() ? "" : " (" + device_.note.substr(6) + ")";
      return Fail(2, Error("{}: {} has {} parameters; the CPU device is for small models (at "
                           "most {}): compile gpt2-tiny, or run on a GPU{}",
                           o_.artifact, model().name, WithThousands(loaded_->parameter_values),
                           WithThousands(o_.cpu_max_params), why));
    }
    if (o_.grad_accum != 0 && o_.grad_accum != program().grad_accum) {
      return Fail(2, Error("--grad-accum {}: {} was compiled with grad-accum {} (recompile with "
                           "gptc compile --grad-accum {})",
                           o_.grad_accum, o_.artifact, program().grad_accum, o_.grad_accum));
    }
    logits_ = program().Find(program::EntryRole::kLogits);
    // Artifacts from before the eval entry validate through logits, row by row.
    eval_ = program().Find(program::EntryRole::kEval);
    return 0;
  }

  // Note [agreement] in runtime/rendezvous.h: what the ranks compare when
  // they join, known before (ranks only: one process has no one to agree with).
  int Agree() {
    if (program().world_size <= 1) return 0;
    const program::CompileFlags& f = flags();
    agreed_ = {{"the artifact's batch", std::to_string(f.batch)},
               {"the artifact's seq", std::to_string(f.seq)},
               {"the artifact's grad-accum", std::to_string(program().grad_accum)},
               {"the artifact's precision", f.precision},
               {"the artifact's remat", f.remat},
               {"the artifact", fmt::format("checksum {:016x}", artifact_->checksum)},
               {"--lr", fmt::format("{}", o_.lr)},
               {"--warmup", std::to_string(o_.warmup)},
               {"--cosine", o_.cosine ? fmt::format("to --lr-min {}", o_.lr_min) : "off"},
               {"--steps", std::to_string(o_.steps)},
               {"--seed", std::to_string(o_.seed)},
               {"--skip-nonfinite", std::to_string(o_.skip_nonfinite)},
               {"--bench", o_.bench ? "on" : "off"},
               {"--train", o_.bench ? "none" : DescribeTrainData(o_.train)},
               {"the start", DescribeStart(o_)}};
    return 0;
  }

  int Join() {
    StatusOr<Distributed> joined =
        JoinDistributed(program().world_size, o_.artifact, device_.name, o_.gpu, agreed_);
    if (!joined.ok()) return Fail(1, joined.status());
    dist_.emplace(std::move(joined).value());
    return 0;
  }

  // Rank 0 writes the checkpoints.
  bool WritesCheckpoints() const { return !o_.ckpt_dir.empty() && !o_.bench && dist_->leader(); }

  // The checkpoint directory, the data, the log.
  int OpenData() {
    const bool writes_checkpoints = WritesCheckpoints();
    // Refuse a directory where checkpoints cannot go now, not at the first
    // checkpoint (by default after the last step), and one another run is
    // writing (Note [checkpoint ownership]).
    if (writes_checkpoints) {
      if (Status s = CheckCheckpointDirLength(o_.ckpt_dir); !s.ok()) return Abort(1, s);
      if (Status s = CheckWritableDirectory(o_.ckpt_dir); !s.ok()) {
        return Abort(1, Error("--ckpt-dir {}", s.message()));
      }
      StatusOr<CheckpointDirLock> lock = CheckpointDirLock::Acquire(o_.ckpt_dir);
      if (!lock.ok()) return Abort(1, lock.status());
      lock_.emplace(std::move(lock).value());
    }
    if (!o_.bench) {
      if (o_.train.empty()) return Abort(2, Error("--train GLOB is required (or --bench)"));
      const program::ModelConfig& m = model();
      const program::CompileFlags& f = flags();
      StatusOr<rt::DataLoader> t = rt::DataLoader::Open(
          {.pattern = o_.train,
           .batch = f.batch * dist_->world(),  // every rank reads the global batch, keeps its rows
           .seq = f.seq,
           .seed = o_.seed,
           .vocab = m.vocab});
      if (!t.ok()) return Abort(1, t.status().WithPrefix("--train"));
      train_.emplace(std::move(t).value());
      StatusOr<rt::DataSource> source =
          rt::MakeDataSource(o_.train, train_->shards(), f.seq, o_.seed);
      if (!source.ok()) return Abort(1, source.status().WithPrefix("--train"));
      data_source_ = std::move(source).value();
      if (!o_.val.empty()) {
        StatusOr<rt::DataLoader> v = rt::DataLoader::Open({.pattern = o_.val,
                                                           .batch = f.batch,
                                                           .seq = f.seq,
                                                           .shuffle = false,
                                                           .vocab = m.vocab});
        if (!v.ok()) return Abort(1, v.status().WithPrefix("--val"));
        val_.emplace(std::move(v).value());
      }
    }
    StatusOr<JsonLog> log = JsonLog::Open(o_.bench || !dist_->leader() ? "" : o_.log_path);
    if (!log.ok()) return Abort(1, log.status());
    log_.emplace(std::move(log).value());
    report_.emplace(dist_->leader() ? o_.report_path : "",
                    o_.log_path.empty() ? "this run" : fs::path(o_.log_path).filename().string());
    log_->Mirror([this](const json& event) { report_->Record(event); });
    if (!o_.tensorboard_dir.empty() && dist_->leader()) {
      StatusOr<TensorBoardWriter> tb = TensorBoardWriter::Open(o_.tensorboard_dir);
      if (!tb.ok()) return Abort(1, tb.status());
      tensorboard_.emplace(std::move(tb).value());
      log_->Mirror([this](const json& event) { tensorboard_->Write(event); });
    }
    console_.set_quiet(o_.quiet || !dist_->leader());
    if (writes_checkpoints) {
      // A save that a killed run left half-written (Note [checkpoint housekeeping]).
      StatusOr<std::vector<std::string>> stale = RemoveStaleTemporaries(o_.ckpt_dir);
      if (!stale.ok()) return Abort(1, stale.status());
      for (const std::string& name : *stale) {
        console_.Line(fmt::format("note: removed {}/{} (a checkpoint save that did not finish)",
                                  o_.ckpt_dir, name));
      }
    }
    return 0;
  }

  // Note [load progress]: on a GPU or the emulator, making the trainer loads
  // every kernel, prepares every entry and times every distinct gemm
  // (autotuning): for gpt2-124m on the emulator, half a minute. A status
  // line on a terminal says which of these it is at; and for a step of
  // kSlowLoadFlops or more a plain line first says what comes, so that a
  // log shows why it is quiet.
  static constexpr double kSlowLoadFlops = 1e11;
  void AnnounceLoad() {
    const program::CompileFlags& f = flags();
    const double flops = 6.0 * static_cast<double>(loaded_->parameter_values) *
                         static_cast<double>(f.batch * f.seq);
    if (device_.name == "cpu" || flops < kSlowLoadFlops) return;
    const auto gemms = artifact_->manifest.counts.thunks.find("gemm");
    const int64_t n = gemms == artifact_->manifest.counts.thunks.end() ? 0 : gemms->second;
    console_.Line(fmt::format(
        "gptrun: loading {} on {}: {} kernels, {} gemm launches{} ...", model().name, device_.name,
        artifact_->manifest.kernels.size(), n,
        o_.autotune == rt::gpu::AutotuneMode::kOn ? " to autotune (--autotune cached or off "
                                                    "skips the timing)"
                                                  : ""));
  }

  // The device's trainer, the banner, the tokenizer of the samples.
  int StartTrainer() {
    AnnounceLoad();
    ProgressLine progress("gptrun", TerminalProgress() && !o_.quiet && dist_->leader());
    TrainOptions o = o_;
    o.load_progress = [&progress](const std::string& status) { progress.Show(status); };
    StatusOr<std::unique_ptr<rt::Trainer>> made =
        MakeTrainer(device_.name, o, *artifact_, &program(), *dist_);
    progress.Clear();
    if (!made.ok()) return Abort(o_.profile && device_.name == "cpu" ? 2 : 1, made.status());
    trainer_ = std::move(made).value();
    const program::ModelConfig& m = model();
    const program::CompileFlags& f = flags();
    tokens_per_step_ = f.batch * f.seq * program().grad_accum * dist_->world();
    flops_per_token_ = FlopsPerToken(*loaded_);
    peak_tflops_ = o_.peak_tflops > 0 ? o_.peak_tflops : KnownPeakTflops(trainer_->DeviceName());
    console_.Line(
        fmt::format("gptrun: {} ({} layers, {} heads, width {}; {} parameters) on {} | "
                    "batch {} x seq {} x grad-accum {} = {} tokens/step{}",
                    m.name, m.layers, m.heads, m.width, WithThousands(loaded_->parameter_values),
                    trainer_->DeviceDescription(), f.batch, f.seq, program().grad_accum,
                    WithThousands(tokens_per_step_),
                    o_.bench ? " | bench (synthetic batches)"
                             : fmt::format(" | train {} shards, {} tokens", train_->shards().size(),
                                           WithThousands(train_->total_tokens()))));
    if (!device_.note.empty()) console_.Line(device_.note);
    if (dist_->world() > 1) {
      console_.Line(fmt::format("data parallel: {} ranks, each {} rows of every batch; this is {}",
                                dist_->world(), f.batch, dist_->env.ToString()));
    }
    if (std::string summary = LoadSummary(*trainer_); !summary.empty()) console_.Line(summary);

    sample_every_ = o_.bench ? 0 : o_.sample_every;
    if (sample_every_ > 0 && logits_ == nullptr) {
      console_.Line(fmt::format(
          "note: {} has no logits entry (compiled with --no-logits): no samples, no validation",
          o_.artifact));
      sample_every_ = 0;
    } else if (sample_every_ > 0) {
      StatusOr<rt::Tokenizer> tok = rt::Tokenizer::Load(o_.tokenizer_dir);
      if (!tok.ok() && o_.tokenizer_given) {  // asked for by name: as gpt-tokenize does
        return Fail(1, tok.status().WithPrefix("--tokenizer " + o_.tokenizer_dir));
      }
      if (!tok.ok()) {
        console_.Line(fmt::format("note: no tokenizer at {} (run scripts/data): samples skipped",
                                  o_.tokenizer_dir));
        sample_every_ = 0;
      } else {
        tokenizer_.emplace(std::move(tok).value());
      }
    }
    validate_ = val_.has_value() && (eval_ != nullptr || logits_ != nullptr);
    return 0;
  }

  // --resume: the trainer's and the data's state from a checkpoint.
  int Resume() {
    run_id_ = NewRunId();  // a resumed run keeps its checkpoint's (Note [checkpoint ownership])
    if (o_.resume.empty()) return 0;
    std::string dir = o_.resume;
    std::vector<std::string> skipped;  // Note [whole step directories]
    auto say_skipped = [&] {
      for (const std::string& s : skipped) {
        console_.Line(fmt::format("note: --resume {} skipped {}, an incomplete checkpoint",
                                  o_.resume, s));
      }
    };
    if (dir == "latest") {
      StatusOr<std::string> latest = LatestCheckpoint(o_.ckpt_dir, &skipped);
      if (!latest.ok()) return Abort(1, latest.status());
      say_skipped();
      dir = *latest;
    } else if (dir == "auto") {  // one job script for the first start and every restart
      StatusOr<std::optional<std::string>> latest = LatestCheckpointIfAny(o_.ckpt_dir, &skipped);
      if (!latest.ok()) return Abort(1, latest.status());
      say_skipped();
      if (!*latest) {
        console_.Line(
            fmt::format("--resume auto: no checkpoint in {} yet: starting at step 1", o_.ckpt_dir));
        return 0;
      }
      dir = **latest;
    }
    StatusOr<rt::CheckpointData> ckpt = rt::LoadCheckpoint(dir, program().params);
    if (!ckpt.ok()) return Abort(1, ckpt.status().WithPrefix("--resume"));
    // Note [checkpoint config]: a different head count (or context) has the
    // same tensor shapes, so the shapes alone would resume it silently.
    if (Status s = CheckCheckpointModel(ckpt->model, model()); !s.ok()) {
      return Abort(1, s.WithPrefix("--resume " + dir));
    }
    if (Status s = rt::RestoreTrainer(*ckpt, trainer_.get()); !s.ok()) {
      return Abort(1, s.WithPrefix("--resume " + dir));
    }
    if (!ckpt->run_id.empty()) run_id_ = ckpt->run_id;
    resumed_ = true;
    if (train_) {
      if (int code = RestoreData(dir, *ckpt); code != 0) return code;
    }
    start_ = ckpt->step + 1;
    summary_->first_step = start_;
    console_.Line(fmt::format("resumed from {} at step {}", dir, ckpt->step));
    return 0;
  }

  // Note [data source]: the loader continues where the checkpoint's stopped
  // only when it reads the same data the same way.
  int RestoreData(const std::string& dir, const rt::CheckpointData& ckpt) {
    if (o_.reset_data) {
      console_.Line("--reset-data: the training data starts over from its first batch");
      return 0;
    }
    // The files compared, not the --train patterns (Note [shard identity]).
    if (std::vector<std::string> changes = rt::DataSourceChanges(ckpt.data_source, data_source_);
        !changes.empty()) {
      return Abort(2, Error("--resume {}: this run has {}: the data order would change (some "
                            "data repeated, some skipped); --reset-data starts the data over",
                            dir, fmt::join(changes, "; ")));
    }
    if (Status s = train_->Restore(ckpt.data); !s.ok()) return Abort(1, s.WithPrefix(dir));
    return 0;
  }

  // Note [checkpoint ownership]: the step directories in --ckpt-dir must be
  // this run's, or none.
  int ClaimCheckpointDir() {
    if (!WritesCheckpoints()) return 0;
    StatusOr<std::vector<StepCheckpoint>> all = ListCheckpoints(o_.ckpt_dir);
    if (!all.ok()) return Abort(1, all.status());
    std::vector<StepCheckpoint> foreign;
    for (const StepCheckpoint& c : *all) {
      // A checkpoint from before run ids belongs to the run that resumes it.
      if (!resumed_ || (!c.run_id.empty() && c.run_id != run_id_)) foreign.push_back(c);
    }
    if (foreign.empty()) return 0;
    std::vector<std::string> names;
    for (const StepCheckpoint& c : foreign) names.push_back(StepDirName(c.step));
    if (!o_.overwrite) {
      return Abort(1, Error("--ckpt-dir {} holds another run's checkpoints ({}): --resume latest "
                            "continues that run, --overwrite removes them, or choose another "
                            "--ckpt-dir",
                            o_.ckpt_dir, fmt::join(names, " ")));
    }
    StatusOr<std::vector<std::string>> removed = RemoveCheckpoints(foreign);
    if (!removed.ok()) return Abort(1, removed.status());
    console_.Line(fmt::format("--overwrite: removed another run's checkpoints from {}: {}",
                              o_.ckpt_dir, fmt::join(*removed, " ")));
    return 0;
  }

  Status Validate(int64_t step) {
    auto t0 = Clock::now();
    RETURN_IF_ERROR(val_->Restore(rt::DataLoader::State{}));
    double sum = 0;
    for (int64_t i = 0; i < o_.val_steps; ++i) {
      ASSIGN_OR_RETURN(rt::MicroBatch mb, val_->Next());
      ASSIGN_OR_RETURN(double loss, eval_ != nullptr
                                        ? EvalLoss(*trainer_, *eval_, mb)
                                        : ForwardLoss(*trainer_, *logits_, mb, model().vocab));
      sum += loss;
    }
    const double loss = sum / static_cast<double>(o_.val_steps);
    last_val_ = {step, loss};
    summary_->val_losses.push_back(last_val_);
    console_.Line(fmt::format("val loss {:.4f} | step {} | {} batches | {:.1f} s", loss, step,
                              o_.val_steps, Seconds(t0)));
    log_->Write(
        json{{"event", "val"}, {"step", step}, {"val_loss", loss}, {"batches", o_.val_steps}});
    return Status::Ok();
  }

  Status Sample(int64_t step) {
    auto t0 = Clock::now();
    SampleOptions so{.length = o_.sample_len,
                     .top_k = o_.top_k,
                     .seed = o_.seed,
                     .salt = static_cast<uint64_t>(step),
                     .vocab = model().vocab};
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, SampleTokens(*trainer_, *logits_, so));
    const std::string text = tokenizer_->Decode(ids);
    console_.Line(fmt::format("sample | step {} | {} tokens, top-k {} | {:.1f} s\n{}\n---", step,
                              o_.sample_len, o_.top_k, Seconds(t0), text));
    log_->Write(json{{"event", "sample"}, {"step", step}, {"tokens", ids}, {"text", text}});
    return Status::Ok();
  }

  Status Checkpoint(int64_t step) {
    StatusOr<rt::CheckpointData> data =
        rt::CaptureTrainer(*trainer_, program().params, train_->state(), model());
    if (!data.ok()) return data.status().WithPrefix("checkpoint");
    data->run_id = run_id_;
    data->data_source = data_source_;
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
    const std::optional<double> val_loss =
        last_val_.first == step ? std::optional<double>(last_val_.second) : std::nullopt;
    RETURN_IF_ERROR(SaveStepCheckpoint(o_.ckpt_dir, step, std::move(data).value(), val_loss));
    ASSIGN_OR_RETURN(std::vector<std::string> pruned, PruneCheckpoints(o_.ckpt_dir, o_.ckpt_keep));
    console_.Line(fmt::format("checkpoint {}/{}{}", o_.ckpt_dir, StepDirName(step),
                              pruned.empty() ? ""
                                             : fmt::format(" (removed {}; --ckpt-keep {})",
                                                           fmt::join(pruned, ", "), o_.ckpt_keep)));
    log_->Write(json{{"event", "checkpoint"},
                     {"step", step},
                     {"dir", (fs::path(o_.ckpt_dir) / StepDirName(step)).string()}});
    return WriteReport();
  }

  // One step's line and log event.
  void Report(int64_t step, const rt::StepResult& r, double lr, double dt) {
    const double tok_s = static_cast<double>(tokens_per_step_) / dt;
    std::string mfu = "-";
    std::optional<double> mfu_value;
    if (peak_tflops_ > 0) {
      mfu_value = 100.0 * flops_per_token_ * tok_s / (peak_tflops_ * 1e12);
      mfu = fmt::format("{:.1f}%", *mfu_value);
    }
    console_.Line(
        fmt::format("step {}/{} | loss {:.4f} | lr {:.1e} | norm {:.2f} | {:.1f} ms | "
                    "{} tok/s | MFU {}",
                    step, o_.steps, r.loss, lr, r.grad_norm, dt * 1e3,
                    WithThousands(static_cast<int64_t>(tok_s + 0.5)), mfu));
    json event{{"event", "step"},     {"step", step},   {"loss", r.loss}, {"lr", lr},
               {"norm", r.grad_norm}, {"ms", dt * 1e3}, {"tok_s", tok_s}, {"mfu", nullptr}};
    if (mfu_value) event["mfu"] = *mfu_value;
    log_->Write(event);
  }

  // Note [stop signals]: after step `step`, its checkpoint (unless the loop
  // wrote it already), one line, exit 128 + signal.
  int StopOnSignal(int signal, int64_t step, bool checkpointed) {
    const char* name = signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal";
    std::string kept = " (no --ckpt-dir: nothing kept)";
    if (!o_.ckpt_dir.empty() && !o_.bench) {
      if (!checkpointed) {
        if (Status s = Checkpoint(step); !s.ok()) return Abort(1, s.WithPrefix(name));
      }
      kept = fmt::format("; checkpoint {}: --resume latest continues",
                         (fs::path(o_.ckpt_dir) / StepDirName(step)).string());
    }
    return Abort(128 + signal, Error("stopped by {} after step {}{}", name, step, kept));
  }

  int Loop() {
    const rt::LrSchedule schedule{.max_lr = o_.lr,
                                  .min_lr = o_.cosine ? o_.lr_min : o_.lr,
                                  .warmup_steps = o_.warmup,
                                  .total_steps = o_.steps};
    const program::ModelConfig& m = model();
    const program::CompileFlags& f = flags();
    // Bench: one synthetic batch set, made once (no data loading in the timing).
    std::vector<rt::MicroBatch> bench_batches;
    if (o_.bench) {
      for (int64_t k = 0; k < program().grad_accum; ++k) {
        bench_batches.push_back(rt::PatternBatch(f.batch, f.seq, m.vocab, k));
      }
    }
    auto run_start = Clock::now();
    for (int64_t step = start_; step <= o_.steps; ++step) {
      std::vector<rt::MicroBatch> micro;
      if (o_.bench) {
        micro = bench_batches;
      } else {
        for (int64_t k = 0; k < program().grad_accum; ++k) {
          StatusOr<rt::MicroBatch> mb = train_->Next();
          if (!mb.ok()) return Abort(1, mb.status().WithPrefix(fmt::format("step {}", step)));
          micro.push_back(dist_->world() > 1 ? RankSlice(*mb, dist_->env, f.batch, f.seq)
                                             : std::move(mb).value());
        }
      }
      const double lr = schedule.At(step);
      std::optional<rt::TrainerState> before;  // Note [divergence]: what a skipped step undoes
      if (skipped_ < o_.skip_nonfinite) {
        StatusOr<rt::TrainerState> state = trainer_->ExportState();
        if (!state.ok()) return Abort(1, state.status().WithPrefix(fmt::format("step {}", step)));
        before.emplace(std::move(state).value());
      }
      auto t0 = Clock::now();
      dist_->BeginStep(step);
      StatusOr<rt::StepResult> r = trainer_->Step(micro, lr);
      dist_->EndStep();
      const double dt = Seconds(t0);
      if (!r.ok()) {
        // The GPU trainer names the step itself.
        const std::string prefix = fmt::format("step {}", step);
        return Abort(1, r.status().message().starts_with(prefix + ":")
                            ? r.status()
                            : r.status().WithPrefix(prefix));
      }
      if (std::find(o_.fault_nonfinite_steps.begin(), o_.fault_nonfinite_steps.end(), step) !=
          o_.fault_nonfinite_steps.end()) {
        r->loss = std::numeric_limits<double>::quiet_NaN();
      }
      if (step == start_) first_loss_ = r->loss;
      last_loss_ = r->loss;
      summary_->losses.push_back(r->loss);
      train_s_ += dt;
      ++timed_steps_;
      Report(step, *r, lr, dt);
      if (!log_->status().ok()) return Abort(1, log_->status());
      if (std::ferror(stdout)) {  // Note [checked stdout]: stop now, not after the whole run
        return Abort(1, Error("step {}: writing standard output failed ({})", step,
                              errno != 0 ? std::strerror(errno) : "write error"));
      }
      // Note [divergence]: a non-finite loss or gradient norm (the norm is
      // the all-reduced one, the same on every rank) is undone while
      // --skip-nonfinite allows, else ends the run before anything is
      // written of it.
      const bool finite = std::isfinite(r->loss) && std::isfinite(r->grad_norm);
      if (!finite && !before) {
        return Abort(1, Error("step {}: the loss is {} and the gradient norm {}: the run "
                              "diverged (no checkpoint written after it; {})",
                              step, r->loss, r->grad_norm,
                              o_.skip_nonfinite > 0
                                  ? fmt::format("{} steps skipped already, --skip-nonfinite {}",
                                                skipped_, o_.skip_nonfinite)
                                  : "try a lower --lr, or --skip-nonfinite N"));
      }
      if (!finite) {
        ++skipped_;
        before->steps_done = step;  // done, without its update
        if (Status s = trainer_->ImportState(*before); !s.ok()) {
          return Abort(1, s.WithPrefix(fmt::format("step {}: undoing it", step)));
        }
        console_.Line(
            fmt::format("step {}: the loss is {} and the gradient norm {}: skipped, "
                        "its update undone ({} of --skip-nonfinite {})",
                        step, r->loss, r->grad_norm, skipped_, o_.skip_nonfinite));
        log_->Write(json{{"event", "skip"}, {"step", step}, {"skipped", skipped_}});
      }

      const bool last = step == o_.steps;
      if (!dist_->leader()) {  // the others wait at the next step's all-reduces
        if (const int signal = stop_signal.load(); signal != 0 && !last) {
          return StopOnSignal(signal, step, /*checkpointed=*/true);
        }
        continue;
      }
      if (validate_ && ((o_.val_every > 0 && step % o_.val_every == 0) || last)) {
        if (Status s = Validate(step); !s.ok()) return Abort(1, s.WithPrefix("validation"));
      }
      if (sample_every_ > 0 && (step % sample_every_ == 0)) {
        if (Status s = Sample(step); !s.ok()) return Abort(1, s.WithPrefix("sample"));
      }
      const bool checkpointed = !o_.ckpt_dir.empty() && !o_.bench &&
                                ((o_.ckpt_every > 0 && step % o_.ckpt_every == 0) || last);
      if (checkpointed) {
        if (Status s = Checkpoint(step); !s.ok()) return Abort(1, s);
      }
      if (const int signal = stop_signal.load(); signal != 0 && !last) {
        return StopOnSignal(signal, step, checkpointed);
      }
      const double per_step = Seconds(run_start) / static_cast<double>(step - start_ + 1);
      console_.Bar(step, o_.steps, per_step * static_cast<double>(o_.steps - step));
    }
    return 0;
  }

  const TrainOptions& o_;
  TrainSummary own_summary_;  // when the caller wants none
  TrainSummary* summary_;
  std::optional<program::Artifact> artifact_;
  std::optional<rt::LoadedProgram> loaded_;
  ChosenDevice device_;
  std::optional<Distributed> dist_;
  const program::TrainEntry* logits_ = nullptr;
  const program::TrainEntry* eval_ = nullptr;
  std::optional<rt::DataLoader> train_, val_;
  std::optional<CheckpointDirLock> lock_;  // held for the run (Note [checkpoint ownership])
  std::string run_id_;
  bool resumed_ = false;
  rt::DataSource data_source_;
  rt::AgreedFields agreed_;  // Note [agreement]: what the ranks compare when they join
  std::optional<RunReport> report_;  // before log_, whose mirrors point to them
  std::optional<TensorBoardWriter> tensorboard_;
  std::optional<JsonLog> log_;
  Console console_;
  std::unique_ptr<rt::Trainer> trainer_;
  std::optional<rt::Tokenizer> tokenizer_;
  int64_t tokens_per_step_ = 0, sample_every_ = 0, start_ = 1;
  double flops_per_token_ = 0, peak_tflops_ = 0;
  bool validate_ = false;
  std::pair<int64_t, double> last_val_{-1, 0.0};  // (step, loss) of the latest validation
  double train_s_ = 0, first_loss_ = 0, last_loss_ = 0;
  int64_t timed_steps_ = 0;
  int64_t skipped_ = 0;  // steps undone for a non-finite loss or norm (Note [divergence])
};

}  // namespace

int Train(const TrainOptions& options, TrainSummary* summary) {
  if (summary != nullptr) *summary = TrainSummary{};
  StopSignals signals;  // Note [stop signals]
  return TrainRun(options, summary).Run();
}

}  // namespace gptc::tools
