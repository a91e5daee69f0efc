#include "tools/gptrun/train_loop.h"

#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "compiler/support/file.h"
#include "compiler/support/text.h"
#include "compiler/program/container.h"
#include "runtime/checkpoint.h"
#include "runtime/cpu_device.h"
#include "runtime/data_loader.h"
#include "runtime/lr_schedule.h"
#include "runtime/program_loader.h"
#include "runtime/tokenizer.h"
#include "runtime/trainer.h"
#include "tools/gptrun/checkpoint_dir.h"
#include "tools/gptrun/devices.h"
#include "tools/gptrun/distributed.h"
#include "tools/gptrun/sampler.h"

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

// One JSON object a line; no-op without a path.
class JsonLog {
 public:
  static StatusOr<JsonLog> Open(const std::string& path) {
    JsonLog log;
    if (path.empty()) return log;
    log.file_ = std::fopen(path.c_str(), "a");
    if (log.file_ == nullptr) return Error("--log {}: cannot open for writing", path);
    return log;
  }
  JsonLog() = default;
  JsonLog(JsonLog&& o) noexcept : file_(o.file_) { o.file_ = nullptr; }
  JsonLog& operator=(JsonLog&&) = delete;
  ~JsonLog() {
    if (file_ != nullptr) std::fclose(file_);
  }
  void Write(const json& event) {
    if (file_ == nullptr) return;
    std::string line = event.dump() + "\n";
    std::fwrite(line.data(), 1, line.size(), file_);
    std::fflush(file_);
  }

 private:
  std::FILE* file_ = nullptr;
};

// A checkpoint with config.json (older ones have none: layers 0) must be
// of the artifact's model.
Status CheckSameModel(const program::ModelConfig& ckpt, const program::ModelConfig& artifact) {
  if (ckpt.layers == 0) return Status::Ok();
  auto describe = [](const program::ModelConfig& c) {
    return fmt::format("{} (layers {}, heads {}, width {}, positions {}, vocab {} padded to {})",
                       c.name, c.layers, c.heads, c.width, c.positions, c.vocab, c.padded_vocab);
  };
  program::ModelConfig a = artifact, b = ckpt;
  a.name = b.name = "";
  if (a == b) return Status::Ok();
  return Error("the checkpoint is of {}, the artifact of {}", describe(ckpt), describe(artifact));
}

// FLOPs of one token's forward + backward: 6 * (matmul parameters) for the
// matmuls plus 12 * layers * seq * width for attention (as llm.c).
double FlopsPerToken(const rt::LoadedProgram& p) {
  int64_t matmul = 0;
  for (const program::ParamSpec& s : p.program.params) {
    if (s.shape.rank() == 2 && !s.name.starts_with("wpe")) matmul += s.shape.num_elements();
  }
  return 6.0 * static_cast<double>(matmul) +
         12.0 * static_cast<double>(p.model.layers * p.model.seq * p.model.width);
}

}  // namespace

double KnownPeakTflops(std::string_view device_name) {
  // Dense bf16 tensor-core peaks (no sparsity), SXM parts.
  if (device_name.find("H200") != std::string_view::npos) return 989.0;
  if (device_name.find("H100") != std::string_view::npos) return 989.0;
  if (device_name.find("A100") != std::string_view::npos) return 312.0;
  return 0.0;
}

int RunTraining(const RunOptions& o) {
  StatusOr<program::Artifact> artifact = program::ReadArtifact(o.artifact);
  if (!artifact.ok()) return Fail(1, artifact.status());
  StatusOr<rt::LoadedProgram> loaded = rt::LoadProgram(*artifact, o.artifact);
  if (!loaded.ok()) return Fail(1, loaded.status());
  const rt::ModelInfo& m = loaded->model;
  program::TrainProgram& program = loaded->program;
  const ChosenDevice device = ChooseDevice(o, *loaded);
  if (device.name == "cpu" && loaded->parameter_values > o.cpu_max_params) {
    // Say why the GPU was not taken when the default fell back to the CPU.
    const std::string why = device.note.empty() ? "" : " (" + device.note.substr(6) + ")";
    return Fail(2, Error("{}: {} has {} parameters; the CPU device is for small models (at most "
                         "{}): compile gpt2-tiny, or run on a GPU{}",
                         o.artifact, m.name, WithThousands(loaded->parameter_values),
                         WithThousands(o.cpu_max_params), why));
  }
  if (o.grad_accum != 0 && o.grad_accum != program.grad_accum) {
    return Fail(2, Error("--grad-accum {}: {} was compiled with grad-accum {} (recompile with "
                         "gptc compile --grad-accum {})",
                         o.grad_accum, o.artifact, program.grad_accum, o.grad_accum));
  }
  const program::TrainEntry* logits = program.Find("logits");
  StatusOr<Distributed> joined = JoinDistributed(program.world_size, o.artifact, device.name, o.gpu);
  if (!joined.ok()) return Fail(1, joined.status());
  const Distributed& dist = *joined;
  // After the rendezvous every failure must end the other ranks too.
  auto fail = [&](int code, const Status& s) {
    dist.Abort(s);
    return Fail(code, s);
  };
  // Every rank ends here, so that none takes another's exit for a failure.
  auto finish = [&]() {
    if (Status s = dist.Finish(); !s.ok()) return fail(1, s);
    return 0;
  };

  // Rank 0 writes the checkpoints: refuse a directory where they cannot go
  // now, not at the first checkpoint (by default after the last step).
  if (!o.ckpt_dir.empty() && !o.bench && dist.leader()) {
    if (Status s = CheckWritableDirectory(o.ckpt_dir); !s.ok()) {
      return fail(1, Error("--ckpt-dir {}", s.message()));
    }
  }

  std::optional<rt::DataLoader> train, val;
  if (!o.bench) {
    if (o.train.empty()) return fail(2, Error("--train GLOB is required (or --bench)"));
    StatusOr<rt::DataLoader> t = rt::DataLoader::Open(
        {.pattern = o.train,
         .batch = m.batch * dist.world(),  // every rank reads the global batch, keeps its rows
         .seq = m.seq,
         .seed = o.seed,
         .vocab = m.vocab});
    if (!t.ok()) return fail(1, t.status().WithPrefix("--train"));
    train.emplace(std::move(t).value());
    if (!o.val.empty()) {
      StatusOr<rt::DataLoader> v = rt::DataLoader::Open(
          {.pattern = o.val, .batch = m.batch, .seq = m.seq, .shuffle = false, .vocab = m.vocab});
      if (!v.ok()) return fail(1, v.status().WithPrefix("--val"));
      val.emplace(std::move(v).value());
    }
  }
  StatusOr<JsonLog> log = JsonLog::Open(o.bench || !dist.leader() ? "" : o.log_path);
  if (!log.ok()) return fail(1, log.status());
  Console console;
  console.set_quiet(!dist.leader());
  if (!o.ckpt_dir.empty() && !o.bench && dist.leader()) {
    // A save that a killed run left half-written (Note [checkpoint housekeeping]).
    StatusOr<std::vector<std::string>> stale = RemoveStaleTemporaries(o.ckpt_dir);
    if (!stale.ok()) return fail(1, stale.status());
    for (const std::string& name : *stale) {
      console.Line(fmt::format("note: removed {}/{} (a checkpoint save that did not finish)",
                               o.ckpt_dir, name));
    }
  }

  StatusOr<std::unique_ptr<rt::Trainer>> made = MakeTrainer(device.name, o, *artifact, &program, dist);
  if (!made.ok()) return fail(o.profile && device.name == "cpu" ? 2 : 1, made.status());
  rt::Trainer& trainer = **made;
  const int64_t tokens_per_step = m.batch * m.seq * program.grad_accum * dist.world();
  const double flops_per_token = FlopsPerToken(*loaded);
  const double peak_tflops =
      o.peak_tflops > 0 ? o.peak_tflops : KnownPeakTflops(trainer.DeviceName());
  console.Line(
      fmt::format("gptrun: {} ({} layers, {} heads, width {}; {} parameters) on {} | "
                  "batch {} x seq {} x grad-accum {} = {} tokens/step{}",
                  m.name, m.layers, m.heads, m.width, WithThousands(loaded->parameter_values),
                  trainer.DeviceDescription(), m.batch, m.seq, program.grad_accum,
                  WithThousands(tokens_per_step),
                  o.bench ? " | bench (synthetic batches)"
                          : fmt::format(" | train {} shards, {} tokens", train->shards().size(),
                                        WithThousands(train->total_tokens()))));
  if (!device.note.empty()) console.Line(device.note);
  if (dist.world() > 1) {
    console.Line(fmt::format("data parallel: {} ranks, each {} rows of every batch; this is {}",
                             dist.world(), m.batch, dist.env.ToString()));
  }
  if (std::string summary = LoadSummary(trainer); !summary.empty()) console.Line(summary);

  std::optional<rt::Tokenizer> tokenizer;
  int64_t sample_every = o.bench ? 0 : o.sample_every;
  if (sample_every > 0 && logits == nullptr) {
    console.Line(
        fmt::format("note: {} has no logits entry (compiled with --no-logits): no "
                    "samples, no validation",
                    o.artifact));
    sample_every = 0;
  } else if (sample_every > 0) {
    StatusOr<rt::Tokenizer> tok = rt::Tokenizer::Load(o.tokenizer_dir);
    if (!tok.ok()) {
      console.Line(fmt::format("note: no tokenizer at {} (run scripts/data): samples skipped",
                               o.tokenizer_dir));
      sample_every = 0;
    } else {
      tokenizer.emplace(std::move(tok).value());
    }
  }
  // Artifacts from before the eval entry validate through logits, row by row.
  const program::TrainEntry* eval_entry = program.Find("eval");
  const bool validate = val.has_value() && (eval_entry != nullptr || logits != nullptr);

  int64_t start = 1;
  if (!o.resume.empty()) {
    std::string dir = o.resume;
    if (dir == "latest") {
      StatusOr<std::string> latest = LatestCheckpoint(o.ckpt_dir);
      if (!latest.ok()) return fail(1, latest.status());
      dir = *latest;
    }
    StatusOr<rt::CheckpointData> ckpt = rt::LoadCheckpoint(dir, program.params);
    if (!ckpt.ok()) return fail(1, ckpt.status().WithPrefix("--resume"));
    // Note [checkpoint config]: a different head count (or context) has the
    // same tensor shapes, so the shapes alone would resume it silently.
    if (Status s = CheckSameModel(ckpt->model, m); !s.ok()) {
      return fail(1, s.WithPrefix("--resume " + dir));
    }
    if (Status s = rt::RestoreTrainer(*ckpt, &trainer); !s.ok()) {
      return fail(1, s.WithPrefix("--resume " + dir));
    }
    if (train) {
      if (Status s = train->Restore(ckpt->data); !s.ok()) return fail(1, s.WithPrefix(dir));
    }
    start = ckpt->step + 1;
    console.Line(fmt::format("resumed from {} at step {}", dir, ckpt->step));
  }

  rt::LrSchedule schedule{.max_lr = o.lr,
                          .min_lr = o.cosine ? o.lr_min : o.lr,
                          .warmup_steps = o.warmup,
                          .total_steps = o.steps};
  if (start > o.steps) {
    console.Line(
        fmt::format("nothing to do: the checkpoint is at step {}, --steps {}", start - 1, o.steps));
    return finish();
  }

  std::pair<int64_t, double> last_val{-1, 0.0};  // (step, loss) of the latest validation
  auto run_val = [&](int64_t step) -> Status {
    auto t0 = Clock::now();
    RETURN_IF_ERROR(val->Restore(rt::DataLoader::State{}));
    double sum = 0;
    for (int64_t i = 0; i < o.val_steps; ++i) {
      ASSIGN_OR_RETURN(rt::MicroBatch mb, val->Next());
      ASSIGN_OR_RETURN(double loss, eval_entry != nullptr
                                        ? EvalLoss(trainer, *eval_entry, mb)
                                        : ForwardLoss(trainer, *logits, mb, m.vocab));
      sum += loss;
    }
    const double loss = sum / static_cast<double>(o.val_steps);
    last_val = {step, loss};
    console.Line(fmt::format("val loss {:.4f} | step {} | {} batches | {:.1f} s", loss, step,
                             o.val_steps, Seconds(t0)));
    log->Write(
        json{{"event", "val"}, {"step", step}, {"val_loss", loss}, {"batches", o.val_steps}});
    return Status::Ok();
  };
  auto run_sample = [&](int64_t step) -> Status {
    auto t0 = Clock::now();
    SampleOptions so{.length = o.sample_len,
                     .top_k = o.top_k,
                     .seed = o.seed,
                     .salt = static_cast<uint64_t>(step),
                     .vocab = m.vocab};
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, SampleTokens(trainer, *logits, so));
    const std::string text = tokenizer->Decode(ids);
    console.Line(fmt::format("sample | step {} | {} tokens, top-k {} | {:.1f} s\n{}\n---", step,
                             o.sample_len, o.top_k, Seconds(t0), text));
    log->Write(json{{"event", "sample"}, {"step", step}, {"tokens", ids}, {"text", text}});
    return Status::Ok();
  };

  // Bench: one synthetic batch set, made once (no data loading in the timing).
  std::vector<rt::MicroBatch> bench_batches;
  if (o.bench) {
    for (int64_t k = 0; k < program.grad_accum; ++k) {
      bench_batches.push_back(rt::PatternBatch(m.batch, m.seq, m.vocab, k));
    }
  }
  double train_s = 0, first_loss = 0, last_loss = 0;
  int64_t timed_steps = 0;
  auto run_start = Clock::now();
  for (int64_t step = start; step <= o.steps; ++step) {
    std::vector<rt::MicroBatch> micro;
    if (o.bench) {
      micro = bench_batches;
    } else {
      for (int64_t k = 0; k < program.grad_accum; ++k) {
        StatusOr<rt::MicroBatch> mb = train->Next();
        if (!mb.ok()) return fail(1, mb.status().WithPrefix(fmt::format("step {}", step)));
        micro.push_back(dist.world() > 1 ? RankSlice(*mb, dist.env, m.batch, m.seq)
                                         : std::move(mb).value());
      }
    }
    const double lr = schedule.At(step);
    auto t0 = Clock::now();
    dist.BeginStep(step);
    StatusOr<rt::StepResult> r = trainer.Step(micro, lr);
    dist.EndStep();
    const double dt = Seconds(t0);
    if (!r.ok()) {
      // The GPU trainer names the step itself.
      const std::string prefix = fmt::format("step {}", step);
      return fail(1, r.status().message().starts_with(prefix + ":")
                         ? r.status()
                         : r.status().WithPrefix(prefix));
    }
    if (step == start) first_loss = r->loss;
    last_loss = r->loss;
    train_s += dt;
    ++timed_steps;
    const double tok_s = static_cast<double>(tokens_per_step) / dt;
    std::string mfu = "-";
    std::optional<double> mfu_value;
    if (peak_tflops > 0) {
      mfu_value = 100.0 * flops_per_token * tok_s / (peak_tflops * 1e12);
      mfu = fmt::format("{:.1f}%", *mfu_value);
    }
    console.Line(
        fmt::format("step {}/{} | loss {:.4f} | lr {:.1e} | norm {:.2f} | {:.1f} ms | "
                    "{} tok/s | MFU {}",
                    step, o.steps, r->loss, lr, r->grad_norm, dt * 1e3,
                    WithThousands(static_cast<int64_t>(tok_s + 0.5)), mfu));
    json event{{"event", "step"},      {"step", step},   {"loss", r->loss}, {"lr", lr},
               {"norm", r->grad_norm}, {"ms", dt * 1e3}, {"tok_s", tok_s},  {"mfu", nullptr}};
    if (mfu_value) event["mfu"] = *mfu_value;
    log->Write(event);

    const bool last = step == o.steps;
    if (!dist.leader()) continue;  // the others wait at the next step's all-reduces
    if (validate && ((o.val_every > 0 && step % o.val_every == 0) || last)) {
      if (Status s = run_val(step); !s.ok()) return fail(1, s.WithPrefix("validation"));
    }
    if (sample_every > 0 && (step % sample_every == 0)) {
      if (Status s = run_sample(step); !s.ok()) return fail(1, s.WithPrefix("sample"));
    }
    if (!o.ckpt_dir.empty() && !o.bench &&
        ((o.ckpt_every > 0 && step % o.ckpt_every == 0) || last)) {
      StatusOr<rt::CheckpointData> data =
          rt::CaptureTrainer(trainer, program.params, train->state(), m);
      if (!data.ok()) return fail(1, data.status().WithPrefix("checkpoint"));
      const std::optional<double> val_loss =
          last_val.first == step ? std::optional<double>(last_val.second) : std::nullopt;
      if (Status s = SaveStepCheckpoint(o.ckpt_dir, step, std::move(data).value(), val_loss);
          !s.ok()) {
        return fail(1, s);
      }
      StatusOr<std::vector<std::string>> pruned = PruneCheckpoints(o.ckpt_dir, o.ckpt_keep);
      if (!pruned.ok()) return fail(1, pruned.status());
      console.Line(fmt::format("checkpoint {}/{}{}", o.ckpt_dir, StepDirName(step),
                               pruned->empty()
                                   ? ""
                                   : fmt::format(" (removed {}; --ckpt-keep {})",
                                                 fmt::join(*pruned, ", "), o.ckpt_keep)));
      log->Write(json{{"event", "checkpoint"},
                      {"step", step},
                      {"dir", (fs::path(o.ckpt_dir) / StepDirName(step)).string()}});
    }
    const double per_step = Seconds(run_start) / static_cast<double>(step - start + 1);
    console.Bar(step, o.steps, per_step * static_cast<double>(o.steps - step));
  }
  console.Clear();
  const double steps_s = static_cast<double>(timed_steps) / train_s;
  console.Line(fmt::format(
      "{}: {} steps in {:.2f} s | {:.3f} steps/s | {} tok/s | loss {:.4f} -> "
      "{:.4f}",
      o.bench ? "bench" : "done", timed_steps, train_s, steps_s,
      WithThousands(static_cast<int64_t>(steps_s * tokens_per_step + 0.5)), first_loss, last_loss));
  if (std::string report = ProfileReport(trainer, o.profile); !report.empty()) {
    console.Line(report);
  }
  return finish();
}

}  // namespace gptc::tools
