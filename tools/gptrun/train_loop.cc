#include "tools/gptrun/train_loop.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compiler/program/container.h"
#include "compiler/program/gpu_spec.h"
#include "compiler/support/file.h"
#include "compiler/support/text.h"
#include "runtime/checkpoint.h"
#include "runtime/checkpoint_metadata.h"
#include "runtime/data_loader.h"
#include "runtime/program_loader.h"
#include "runtime/safetensors.h"
#include "runtime/trainer.h"
#include "tools/common/flags.h"
#include "tools/common/progress.h"
#include "tools/gptrun/checkpoint_dir.h"
#include "tools/gptrun/devices.h"
#include "tools/gptrun/distributed.h"
#include "tools/gptrun/train_checkpoints.h"
#include "tools/gptrun/train_context.h"
#include "tools/gptrun/train_evaluate.h"
#include "tools/gptrun/train_hellaswag.h"
#include "tools/gptrun/train_output.h"
#include "tools/gptrun/train_step.h"

namespace gptc::tools {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

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

// One gptrun run, phase by phase (Train calls Run): the setup (Load, Agree,
// Join, OpenData, StartTrainer), the checkpoint phase's Resume and Claim,
// then the Loop over the step, evaluation and checkpoint phases. Each setup
// phase returns the exit code of its failure, 0 to go on; after the
// rendezvous a failure also ends the other ranks (Abort), and every rank
// ends through Finish so that none takes another's exit for a failure.
class TrainRun {
 public:
  TrainRun(const TrainOptions& o, TrainSummary* summary, const TrainHooks& hooks)
      : o_(o), run_(o, hooks, summary != nullptr ? summary : &own_summary_) {
    run_.console.set_quiet(o.quiet);
  }

  int Run() {
    run_.summary->first_step = start_;
    for (int (TrainRun::*phase)() :
         {&TrainRun::Load, &TrainRun::Agree, &TrainRun::Join, &TrainRun::OpenData,
          &TrainRun::StartTrainer, &TrainRun::Resume, &TrainRun::ClaimCheckpointDir}) {
      if (int code = (this->*phase)(); code != 0) return code;
    }
    if (start_ > o_.steps) {
      run_.console.Line(fmt::format("nothing to do: the checkpoint is at step {}, --steps {}",
                                    start_ - 1, o_.steps));
      return Finish();
    }
    if (int code = Loop(); code != 0) return code;
    run_.console.Clear();
    const double train_s = steps_->train_seconds();
    const int64_t steps_run = steps_->steps_run();
    const double steps_s = static_cast<double>(steps_run) / train_s;
    run_.summary->train_seconds = train_s;
    run_.summary->tokens_per_second = steps_s * static_cast<double>(run_.tokens_per_step);
    run_.console.Line(
        fmt::format("{}: {} in {:.2f} s | {:.3f} steps/s | {} tok/s | loss {:.4f} -> {:.4f}",
                    o_.bench ? "bench" : "done", Plural(steps_run, "step"), train_s, steps_s,
                    WithThousands(static_cast<int64_t>(steps_s * run_.tokens_per_step + 0.5)),
                    steps_->first_loss(), steps_->last_loss()));
    if (std::string report = ProfileReport(*run_.trainer, o_.profile); !report.empty()) {
      run_.console.Line(report);
    }
    if (!o_.profile_json.empty()) {
      Status written = WriteFileAtomically(o_.profile_json, ProfileJson(*run_.trainer));
      if (!written.ok()) return Abort(written.WithPrefix("--profile-json"));
    }
    if (!run_.log->status().ok()) return Abort(run_.log->status());
    if (run_.tensorboard && !run_.tensorboard->status().ok()) {
      return Abort(run_.tensorboard->status());
    }
    if (Status s = run_.WriteReport(); !s.ok()) return Abort(s);
    return Finish();
  }

 private:
  // The exit code of `s` (ExitCodeOf), or `code` where given.
  int Fail(const Status& s, std::optional<int> code = std::nullopt) {
    run_.summary->error = s.message();
    return FailWith("gptrun", code.value_or(ExitCodeOf(s)), s);
  }
  int Abort(const Status& s, std::optional<int> code = std::nullopt) {
    if (run_.dist) run_.dist->Abort(s);
    return Fail(s, code);
  }
  int Finish() {
    if (Status s = run_.dist->Finish(); !s.ok()) return Abort(s);
    return 0;
  }
  const program::ModelConfig& model() const { return run_.model(); }
  const program::CompileFlags& flags() const { return run_.flags(); }
  program::TrainProgram& program() { return run_.program(); }

  // The artifact, its program and the device, checked before any rendezvous.
  int Load() {
    StatusOr<program::Artifact> artifact = program::ReadArtifact(o_.artifact);
    if (!artifact.ok()) return Fail(artifact.status());
    run_.artifact.emplace(std::move(artifact).value());
    StatusOr<rt::LoadedProgram> loaded = rt::LoadProgram(*run_.artifact, o_.artifact);
    if (!loaded.ok()) return Fail(loaded.status());
    run_.loaded.emplace(std::move(loaded).value());
    run_.device = ChooseDevice(o_, *run_.loaded);
    const ChosenDevice& device = run_.device;
    run_.summary->device = device.name;
    const int64_t parameters = run_.loaded->parameter_values;
    if (device.name == "cpu" && parameters > o_.cpu_max_params) {
      // Say why the GPU was not taken when the default fell back to the CPU.
      const std::string why = device.note.empty() ? "" : " (" + device.note.substr(6) + ")";
      return Fail(
          UsageError("{}: {} has {} parameters; the CPU device is for small models (at "
                     "most {}): compile gpt2-tiny, or run on a GPU{}",
                     o_.artifact, model().name, WithThousands(parameters),
                     WithThousands(o_.cpu_max_params), why));
    }
    if (o_.grad_accum != 0 && o_.grad_accum != program().grad_accum) {
      return Fail(
          UsageError("--grad-accum {}: {} was compiled with grad-accum {} (recompile with "
                     "gptc compile --grad-accum {})",
                     o_.grad_accum, o_.artifact, program().grad_accum, o_.grad_accum));
    }
    run_.logits = program().Find(program::EntryRole::kLogits);
    // Artifacts from before the eval entry validate through logits, row by row.
    run_.eval = program().Find(program::EntryRole::kEval);
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
               {"the artifact", fmt::format("checksum {:016x}", run_.artifact->checksum)},
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
        JoinDistributed(program().world_size, o_.artifact, run_.device.name, o_.gpu, agreed_);
    if (!joined.ok()) return Fail(joined.status());
    run_.dist.emplace(std::move(joined).value());
    return 0;
  }

  // The checkpoint directory, the data, the log.
  int OpenData() {
    const bool writes_checkpoints = run_.WritesCheckpoints();
    if (writes_checkpoints) {
      if (Status s = checkpoints_.Lock(); !s.ok()) return Abort(s);
    }
    if (!o_.bench) {
      if (o_.train.empty()) return Abort(UsageError("--train GLOB is required (or --bench)"));
      const program::ModelConfig& m = model();
      const program::CompileFlags& f = flags();
      // Every rank reads the global batch and keeps its rows.
      StatusOr<rt::DataLoader> t = rt::DataLoader::Open({.pattern = o_.train,
                                                         .batch = f.batch * run_.dist->world(),
                                                         .seq = f.seq,
                                                         .seed = o_.seed,
                                                         .vocab = m.vocab});
      if (!t.ok()) return Abort(t.status().WithPrefix("--train"));
      run_.train.emplace(std::move(t).value());
      StatusOr<rt::DataSource> source =
          rt::MakeDataSource(o_.train, run_.train->shards(), f.seq, o_.seed);
      if (!source.ok()) return Abort(source.status().WithPrefix("--train"));
      run_.data_source = std::move(source).value();
      if (!o_.val.empty()) {
        StatusOr<rt::DataLoader> v = rt::DataLoader::Open({.pattern = o_.val,
                                                           .batch = f.batch,
                                                           .seq = f.seq,
                                                           .shuffle = false,
                                                           .vocab = m.vocab});
        if (!v.ok()) return Abort(v.status().WithPrefix("--val"));
        run_.val.emplace(std::move(v).value());
      }
    }
    if (int code = OpenLogs(); code != 0) return code;
    run_.console.set_quiet(o_.quiet || !run_.dist->leader());
    if (writes_checkpoints) {
      if (Status s = checkpoints_.RemoveStale(); !s.ok()) return Abort(s);
    }
    return 0;
  }

  // The --log file, and what mirrors it: --report, --tensorboard (rank 0's).
  int OpenLogs() {
    const bool leader = run_.dist->leader();
    StatusOr<JsonLog> log = JsonLog::Open(o_.bench || !leader ? "" : o_.log_path);
    if (!log.ok()) return Abort(log.status());
    run_.log.emplace(std::move(log).value());
    run_.report.emplace(
        leader ? o_.report_path : "",
        o_.log_path.empty() ? "this run" : fs::path(o_.log_path).filename().string());
    run_.log->Mirror([this](const json& event) { run_.report->Record(event); });
    if (!o_.tensorboard_dir.empty() && leader) {
      StatusOr<TensorBoardWriter> tb = TensorBoardWriter::Open(o_.tensorboard_dir);
      if (!tb.ok()) return Abort(tb.status());
      run_.tensorboard.emplace(std::move(tb).value());
      run_.log->Mirror([this](const json& event) { run_.tensorboard->Write(event); });
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
    const double flops = 6.0 * static_cast<double>(run_.loaded->parameter_values) *
                         static_cast<double>(f.batch * f.seq);
    if (run_.device.name == "cpu" || flops < kSlowLoadFlops) return;
    const program::Artifact& artifact = *run_.artifact;
    const auto gemms = artifact.manifest.counts.thunks.find("gemm");
    const int64_t n = gemms == artifact.manifest.counts.thunks.end() ? 0 : gemms->second;
    run_.console.Line(fmt::format(
        "gptrun: loading {} on {}: {} kernels, {} gemm launches{} ...", model().name,
        run_.device.name, artifact.manifest.kernels.size(), n,
        o_.autotune == rt::gpu::AutotuneMode::kOn ? " to autotune (--autotune cached or off "
                                                    "skips the timing)"
                                                  : ""));
  }

  // The device's trainer, the banner, what the run evaluates.
  int StartTrainer() {
    AnnounceLoad();
    const Distributed& dist = *run_.dist;
    ProgressLine progress("gptrun", TerminalProgress() && !o_.quiet && dist.leader());
    TrainOptions o = o_;
    o.load_progress = [&progress](const std::string& status) { progress.Show(status); };
    StatusOr<std::unique_ptr<rt::Trainer>> made =
        MakeTrainer(run_.device.name, o, *run_.artifact, &program(), dist);
    progress.Clear();
    if (!made.ok()) return Abort(made.status());
    run_.trainer = std::move(made).value();
    rt::Trainer& trainer = *run_.trainer;
    const program::ModelConfig& m = model();
    const program::CompileFlags& f = flags();
    run_.tokens_per_step = f.batch * f.seq * program().grad_accum * dist.world();
    flops_per_token_ = FlopsPerToken(*run_.loaded);
    peak_tflops_ = o_.peak_tflops > 0 ? o_.peak_tflops : KnownPeakTflops(trainer.DeviceName());
    run_.console.Line(fmt::format(
        "gptrun: {} ({} layers, {} heads, width {}; {} parameters) on {} | "
        "batch {} x seq {} x grad-accum {} = {} tokens/step{}",
        m.name, m.layers, m.heads, m.width, WithThousands(run_.loaded->parameter_values),
        trainer.DeviceDescription(), f.batch, f.seq, program().grad_accum,
        WithThousands(run_.tokens_per_step),
        o_.bench ? " | bench (synthetic batches)"
                 : fmt::format(" | train {} shards, {} tokens", run_.train->shards().size(),
                               WithThousands(run_.train->total_tokens()))));
    if (!run_.device.note.empty()) run_.console.Line(run_.device.note);
    if (dist.world() > 1) {
      run_.console.Line(fmt::format(
          "data parallel: {} ranks, each {} rows of every batch{}; this is {}", dist.world(),
          f.batch,
          program().zero_stage > 0
              ? fmt::format(", ZeRO-1: each keeps 1/{} of the optimizer state", dist.world())
              : "",
          dist.env.ToString()));
    }
    if (std::string summary = LoadSummary(trainer); !summary.empty()) run_.console.Line(summary);
    if (Status s = evaluate_.Prepare(); !s.ok()) return Fail(s);
    if (Status s = hellaswag_.Prepare(); !s.ok()) return Abort(s);
    return 0;
  }

  // --resume: the trainer's and the data's state from a checkpoint.
  int Resume() {
    StatusOr<int64_t> start = checkpoints_.Resume();
    if (!start.ok()) return Abort(start.status());
    start_ = *start;
    run_.summary->first_step = start_;
    return 0;
  }

  // Note [checkpoint ownership]: the step directories in --ckpt-dir must be
  // this run's, or none.
  int ClaimCheckpointDir() {
    if (!run_.WritesCheckpoints()) return 0;
    if (Status s = checkpoints_.Claim(); !s.ok()) return Abort(s);
    return 0;
  }

  Status Checkpoint(int64_t step) { return checkpoints_.Save(step, evaluate_.ValLossAt(step)); }

  // Note [stop signals]: after step `step`, its checkpoint (unless the loop
  // wrote it already), one line, exit 128 + signal.
  int StopOnSignal(int signal, int64_t step, bool checkpointed) {
    const char* name = signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal";
    std::string kept = " (no --ckpt-dir: nothing kept)";
    if (!o_.ckpt_dir.empty() && !o_.bench) {
      if (!checkpointed) {
        if (Status s = Checkpoint(step); !s.ok()) return Abort(s.WithPrefix(name));
      }
      kept = fmt::format("; checkpoint {}: --resume latest continues",
                         (fs::path(o_.ckpt_dir) / StepDirName(step)).string());
    }
    return Abort(Error("stopped by {} after step {}{}", name, step, kept), 128 + signal);
  }

  // Note [sharded checkpoints]: a ZeRO-1 run's optimizer state lives in
  // shards on every rank, so every rank takes part in each checkpoint (the
  // leader's trainer gathers the shards; the others contribute theirs), and
  // the ranks agree after each step on whether a stop signal arrived, so
  // that they stop, and save, after the same step.
  StatusOr<int> AgreedSignal(int signal) {
    std::vector<double> stopping = {signal != 0 ? 1.0 : 0.0};
    RETURN_IF_ERROR(run_.trainer->SumOverRanks(stopping).WithPrefix("agreeing on a stop"));
    if (stopping[0] == 0) return 0;
    return signal != 0 ? signal : SIGTERM;  // another rank's
  }

  // The steps from start_ on; after each, on rank 0, its evaluation and
  // checkpoint when due; a stop signal ends the run after the step.
  int Loop() {
    steps_.emplace(run_, flops_per_token_, peak_tflops_);
    const bool sharded = program().zero_stage > 0 && run_.dist->world() > 1;
    const bool saves = !o_.ckpt_dir.empty() && !o_.bench;
    auto run_start = Clock::now();
    for (int64_t step = start_; step <= o_.steps; ++step) {
      if (Status s = steps_->Run(step); !s.ok()) return Abort(s);
      const bool last = step == o_.steps;
      // Every rank scores its share of the set.
      if (Status s = hellaswag_.AfterStep(step, last); !s.ok()) return Abort(s);
      int signal = stop_signal.load();
      if (sharded) {
        StatusOr<int> agreed = AgreedSignal(signal);
        if (!agreed.ok()) return Abort(agreed.status().WithPrefix(fmt::format("step {}", step)));
        signal = *agreed;
      }
      const bool stopping = signal != 0 && !last;
      const bool checkpointed = saves && ((o_.ckpt_every > 0 && step % o_.ckpt_every == 0) || last);
      if (!run_.dist->leader()) {  // the others wait at the next step's collectives
        if (sharded && saves && (checkpointed || stopping)) {
          if (Status s = checkpoints_.Contribute(); !s.ok()) return Abort(s);
        }
        if (stopping) return StopOnSignal(signal, step, /*checkpointed=*/true);
        continue;
      }
      if (Status s = evaluate_.AfterStep(step, last); !s.ok()) return Abort(s);
      if (checkpointed) {
        if (Status s = Checkpoint(step); !s.ok()) return Abort(s);
      }
      if (stopping) return StopOnSignal(signal, step, checkpointed);
      const double per_step = Seconds(run_start) / static_cast<double>(step - start_ + 1);
      run_.console.Bar(step, o_.steps, per_step * static_cast<double>(o_.steps - step));
    }
    return 0;
  }

  const TrainOptions& o_;
  TrainSummary own_summary_;  // when the caller wants none
  RunContext run_;
  rt::AgreedFields agreed_;  // Note [agreement]: what the ranks compare when they join
  CheckpointPhase checkpoints_{run_};
  EvaluatePhase evaluate_{run_};
  HellaSwagPhase hellaswag_{run_};
  std::optional<StepPhase> steps_;  // made by Loop
  int64_t start_ = 1;
  double flops_per_token_ = 0, peak_tflops_ = 0;
};

}  // namespace

int Train(const TrainOptions& options, TrainSummary* summary, const TrainHooks& hooks) {
  if (summary != nullptr) *summary = TrainSummary{};
  StopSignals signals;  // Note [stop signals]
  return TrainRun(options, summary, hooks).Run();
}

}  // namespace gptc::tools
