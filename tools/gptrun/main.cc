// gptrun: trains with a compiled .gptx artifact.
//
//   gptrun gpt2-tiny.gptx --device cpu --train 'data/brown/train_*.bin'
//          --val 'data/brown/val_*.bin' --steps 40 --lr 1e-3 --warmup 5 --cosine
//          --val-every 20 --sample-every 40 --ckpt-dir out/ckpt --log out/metrics.jsonl
//
// One line a step, as llm.c:
//   step 120/5000 | loss 4.8123 | lr 6.0e-04 | norm 0.91 | 34.8 ms | 470,512 tok/s | MFU 40.6%
// The batch, seq, grad-accum and AdamW hyper-parameters are the artifact's
// (gptc compile). `--device gpu` runs the artifact's thunk plan (kernels,
// cuBLASLt, CUDA graph; runtime/gpu/); `--device cpu` evaluates its optimized IR
// with the reference evaluator (small models only; it needs no kernels, so
// artifacts from `gptc compile --no-codegen` run too). Without --device: the
// GPU when there is one and the artifact can run on it, else the CPU.
// `--device emu` runs the GPU runtime on the emulated device (docs/EMULATOR.md:
// the artifact's kernels compiled for this host by gptc compile --emu, with
// memory and race checks unless --emu-checks off). Those kernels are native
// code: gptrun loads them only when this machine's gptc built them, or with
// --trust-artifact (Note [trusted emulator libraries]).
// `gptrun generate FILE.gptx --resume CKPT --prompt TEXT` generates text from a
// checkpoint (tools/gptrun/generate.h).
// `gptrun eval FILE.gptx --hellaswag FILE.bin --resume CKPT` scores a checkpoint
// on a multiple-choice eval set (tools/gptrun/eval_set.h).
// `gptrun --model NAME --batch N --seq T ...` compiles the model first, as a
// JIT would, through gptc's compile cache (tools/gptrun/jit.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "compiler/support/file.h"
#include "compiler/support/status.h"
#include "compiler/support/text.h"
#include "runtime/gpu/autotune_options.h"
#include "tools/common/data_files.h"
#include "tools/common/flags.h"
#include "tools/gptrun/devices.h"
#include "tools/gptrun/jit.h"
#include "tools/gptrun/train_loop.h"

namespace gptc::tools {

int GenerateMain(int argc, char** argv);  // tools/gptrun/generate_command.cc
int EvalMain(int argc, char** argv);      // tools/gptrun/eval_command.cc

namespace {

constexpr char kAbout[] =
    "Trains with a compiled artifact (gptc compile -o FILE.gptx), or with --model NAME compiles "
    "one first through gptc's compile cache. The batch, sequence length, grad-accum and AdamW "
    "settings are the artifact's; --grad-accum only checks it (with --model: compiles it). `gptrun "
    "generate --help`: text from a checkpoint; `gptrun eval --help`: HellaSwag accuracy.";

int Fail(const Status& status) { return FailWith("gptrun", status); }
// A refusal of the command line by a check whose every error is one.
int FailUsage(const Status& status) { return Fail(status.WithCode(StatusCode::kUsage)); }

// The device section of gptrun's flags.
void DeclareDeviceFlags(Flags& flags) {
  const TrainOptions d;
  auto str = [](auto v) { return fmt::format("{}", v); };
  flags.Section("device")
      .Value("device", "cpu|gpu|emu",
             "gpu: the GPU runtime (the default when a GPU is present and the artifact is "
             "complete); cpu: the reference evaluator (small models, e.g. gpt2-tiny); emu: the "
             "GPU runtime on the emulated device, the artifact's kernels compiled for this host "
             "(gptc compile --emu), with memory and race checks (docs/EMULATOR.md); that native "
             "code is loaded only if this machine's gptc compiled it, else the artifact is "
             "refused (see --trust-artifact)")
      .Value("gpu", "N",
             "GPU: the device index (default: 0; the ranks of a --dp artifact take the GPU of "
             "their local rank)")
      .Conflicts("device", "cpu")
      .Conflicts("device", "emu")
      .Value("emu-checks", "on|off",
             "emu: the memory and race checks; off runs several times faster", "on")
      .Requires("device", "emu")
      .Bool("trust-artifact",
            "emu: load and run the artifact's emulator library, native x86-64 code, even though "
            "this machine's gptc did not build it (without it such an artifact is refused: "
            "docs/EMULATOR.md, \"What it loads\")")
      .Requires("device", "emu")
      .Bool("no-graph", "GPU: launch every thunk every step (no CUDA graph replay)")
      .Bool("profile",
            "GPU/emu: time every thunk (no graph) and print the top thunks, kernel and gemm "
            "totals and each gemm's tuning after the last step; emu: with stand-in times and "
            "every kernel's memory counters (docs/EMULATOR.md)")
      .Value("profile-json", "FILE",
             "with --profile: also write the profile, and each gemm's tuning, there as JSON")
      .Requires("profile")
      .Value("autotune", "off|cached|on",
             "GPU/emu: time cuBLASLt's candidate algorithms for every distinct gemm at load and "
             "keep the fastest (on), only take earlier choices from the cache (cached), or take "
             "the heuristic's first (off); the cache is $XDG_CACHE_HOME/gptc/autotune.json",
             "on")
      .Bool("debug-sync", "GPU: synchronize after every thunk so a fault names its thunk")
      .Value("cpu-max-params", "N", "cpu: refuse models larger than this", str(d.cpu_max_params));
}

Flags DeclareFlags() {
  const TrainOptions d;  // the defaults --help shows are the ones Train gets
  auto str = [](auto v) { return fmt::format("{}", v); };
  Flags flags("gptrun", "FILE.gptx|--model NAME --train GLOB [flags]", kAbout);
  flags.Section("just in time: a model instead of FILE.gptx")
      .Value("model", "NAME",
             "compile this model (gptc models) with the gptc beside gptrun, through its "
             "compile cache, and train it")
      .Value("batch", "N|auto",
             "--model: sequences per step; auto: the largest that fits --memory-budget "
             "(gptc compile --batch auto; needs --remat auto)",
             "4")
      .Value("tokens-per-step", "N", "--model --batch auto: grad-accum to make N tokens a step")
      .Value("remat", "none|dots|wide|block|auto|PLAN",
             "--model: what the backward recomputes (gptc compile --remat)", "none")
      .Value("memory-budget", "BYTES|GPU",
             "--model --remat auto: what the arenas may take, or a card's (h100, h200, a100) "
             "memory less the runtime's (default on a GPU: its free memory less the runtime's "
             "reserve and workspace)")
      .Value("seq", "T", "--model: tokens per sequence (default: the model's context length)")
      .Value("attention-mma", "mma.sync|wgmma",
             "--model: the attention's tensor-core instructions (gptc compile)", "mma.sync")
      .Value("artifact-out", "FILE.gptx", "--model: also keep the artifact there");
  DeclareDeviceFlags(flags);
  flags.Section("training")
      .Value("train", "GLOB", "the training token shards (gpt-tokenize's .bin files)")
      .Value("steps", "N", "optimizer steps", str(d.steps))
      .Value("lr", "LR", "the peak learning rate", str(d.lr))
      .Value("warmup", "W", "steps of linear warmup to --lr", str(d.warmup))
      .Bool("cosine", "decay from --lr to --lr-min by a cosine after the warmup (else constant)")
      .Value("lr-min", "LR", "the cosine schedule's floor", str(d.lr_min))
      .Requires("cosine")
      .Value("grad-accum", "K",
             "checks the artifact's gradient accumulation (default: the "
             "artifact's)")
      .Value("seed", "S", "the data order and sampling seed", str(d.seed))
      .Value("skip-nonfinite", "N",
             "undo up to N steps whose loss or gradient norm is not finite instead of ending the "
             "run (the state is copied through the host before each step)",
             str(d.skip_nonfinite))
      .Bool("bench", "time steps on synthetic batches (no data, validation or checkpoints)")
      .Value("peak-tflops", "T",
             "the device's dense bf16 peak, for MFU (default: known for H100/H200/A100 from the "
             "GPU's name)");
  flags.Section("validation and samples")
      .Value("val", "GLOB", "the validation token shards")
      .Value("val-every", "N",
             "validation loss every N steps and after the last; 0 for only "
             "after the last",
             str(d.val_every))
      .Requires("val")
      .Value("val-steps", "N", "batches per validation", str(d.val_steps))
      .Requires("val")
      .Value("sample-every", "N", "a text sample every N steps; 0 for none", str(d.sample_every))
      .Value("sample-len", "N", "tokens per sample", str(d.sample_len))
      .Value("top-k", "K", "sample from the K likeliest tokens; 1 for greedy", str(d.top_k))
      .Value("tokenizer", "DIR",
             "the GPT-2 encoder files for samples (default: found in $GPTC_DATA, the install "
             "prefix or the source tree)")
      .Value("hellaswag", "FILE",
             "HellaSwag (or another multiple-choice set) in llm.c's .bin format: acc and "
             "acc_norm every --hellaswag-every steps and after the last (docs/EVAL.md)")
      .Value("hellaswag-every", "N",
             "steps between HellaSwag evaluations; 0 for only after the last", "0")
      .Requires("hellaswag")
      .Value("hellaswag-limit", "N", "score the first N examples only (default: all)")
      .Requires("hellaswag");
  flags.Section("checkpoints and logs")
      .Value("ckpt-dir", "DIR",
             "checkpoints DIR/step_NNNNNN every --ckpt-every steps and at the end (DIR is "
             "created and checked for writing before step 1)")
      .Value("ckpt-every", "N", "steps between checkpoints; 0 for only at the end",
             str(d.ckpt_every))
      .Requires("ckpt-dir")
      .Value("ckpt-keep", "N",
             "keep the newest N checkpoints and the one with the lowest validation loss, "
             "removing older ones; 0 keeps all",
             str(d.ckpt_keep))
      .Requires("ckpt-dir")
      .Value("resume", "DIR|latest|auto",
             "continue bit-identically from a checkpoint (latest: the newest in --ckpt-dir; "
             "auto: that, or start fresh when --ckpt-dir has none yet)")
      .Bool("reset-data",
            "with --resume: start the training data over from its first batch (needed to resume "
            "with another --train, --seed or sequence length)")
      .Requires("resume")
      .Bool("overwrite",
            "remove the checkpoints of another run from --ckpt-dir (a run refuses a directory "
            "holding them)")
      .Requires("ckpt-dir")
      .Value("log", "FILE.jsonl", "one JSON line per step, validation, sample and checkpoint")
      .Value("report", "FILE.html",
             "an HTML page of the step's kernels and arena and of this run's curves, written at "
             "each checkpoint and at the end (docs/REPORTS.md; gptc report draws several runs)")
      .Value("tensorboard", "DIR",
             "also write loss, val_loss, lr, grad_norm, tok_s, mfu and the HellaSwag accuracies "
             "as a TensorBoard event file in DIR");
  return flags;
}

// --autotune, --profile-json and --report into `o`.
Status ReadTuningFlags(const Flags& flags, TrainOptions& o) {
  o.profile_json = flags.Get("profile-json");
  const std::string autotune = flags.Get("autotune");
  const std::optional<rt::gpu::AutotuneMode> mode = rt::gpu::ParseAutotuneMode(autotune);
  if (!mode) return Error("--autotune must be off, cached or on, got '{}'", autotune);
  o.autotune = *mode;
  o.report_path = flags.Get("report");
  o.tensorboard_dir = flags.Get("tensorboard");
  if (!o.report_path.empty()) {
    // Refused before the run, not after its last step.
    RETURN_IF_ERROR(CheckOutputTarget(o.report_path).WithPrefix("--report"));
    const std::filesystem::path dir = std::filesystem::path(o.report_path).parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir)) {
      return Error("--report {}: {} is not a directory", o.report_path, dir.string());
    }
  }
  if (!o.tensorboard_dir.empty()) {
    RETURN_IF_ERROR(CheckWritableDirectory(o.tensorboard_dir).WithPrefix("--tensorboard"));
  }
  if (o.profile_json.empty()) return Status::Ok();
  return CheckOutputTarget(o.profile_json).WithPrefix("--profile-json");
}

// Flags that would do nothing in this run are refused, not ignored: a
// --bench run reads no data and writes no checkpoints, log or samples (its
// steps still reach --report and --tensorboard), samples need
// --sample-every, the CPU device has no gemms to tune.
Status CheckInapplicable(const Flags& flags, const TrainOptions& o) {
  if (o.bench) {
    for (const char* name : {"ckpt-dir", "log", "val", "sample-every", "hellaswag"}) {
      if (flags.Has(name))
        return Error("--{} does not apply to --bench (it trains on no data)", name);
    }
  }
  if (flags.Has("sample-len") && o.sample_every == 0) {
    return Error("--sample-len needs --sample-every N (samples are written every N steps)");
  }
  if (flags.Has("autotune") && o.device == "cpu") {
    return Error("--autotune applies to --device gpu or emu (the CPU device runs no cuBLASLt)");
  }
  return Status::Ok();
}

// --model's --memory-budget: as given, or for --remat auto on a GPU its free
// memory less what the runtime keeps beside the arenas (said on stderr).
Status JitMemoryBudget(const Flags& flags, JitOptions& jo, int64_t gpu) {
  if (flags.Has("memory-budget")) {  // gptc checks the text
    jo.memory_budget = flags.Get("memory-budget");
    return Status::Ok();
  }
  if (jo.remat != "auto") return Status::Ok();
  if (jo.device != JitDevice::kGpu) {
    return Error("--remat auto on the {} device needs --memory-budget", JitDeviceName(jo.device));
  }
  StatusOr<int64_t> budget = GpuMemoryBudget(static_cast<int>(std::max<int64_t>(gpu, 0)));
  if (!budget.ok()) return budget.status().WithPrefix("--remat auto without --memory-budget");
  jo.memory_budget = std::to_string(*budget);
  fmt::print(stderr, "gptrun: --memory-budget {} (the GPU's free memory less the runtime's)\n",
             FormatBytes(*budget));
  return Status::Ok();
}

// --model's compile from the flags (`o`: the train options parsed from
// them); a usage error names the flag.
StatusOr<JitOptions> JitOptionsOf(const Flags& flags, const TrainOptions& o) {
  JitOptions jo;
  jo.model = flags.Get("model");
  jo.grad_accum = std::max<int64_t>(1, o.grad_accum);  // 0: not given
  jo.artifact_out = flags.Get("artifact-out");
  jo.batch_auto = flags.Get("batch") == "auto";
  jo.remat = flags.Get("remat");
  jo.attention_mma = flags.Get("attention-mma");
  for (auto [name, field] : {std::pair{"batch", &jo.batch}, std::pair{"seq", &jo.seq},
                             std::pair{"tokens-per-step", &jo.tokens_per_step}}) {
    if (std::string_view(name) == "batch" && jo.batch_auto) continue;
    ASSIGN_OR_RETURN(const int64_t v, flags.GetInt(name, *field));
    if (flags.Has(name) && v < 1) return Error("--{} must be >= 1, got {}", name, v);
    *field = v;
  }
  // Kernels only for a device that runs them (no GPU here: the CPU device).
  const std::string device = o.device.empty() ? (GpuPresent() ? "gpu" : "cpu") : o.device;
  std::optional<JitDevice> parsed = ParseJitDevice(device);
  if (!parsed) return Error("--device must be cpu, gpu or emu, got '{}'", device);
  jo.device = *parsed;
  return jo;
}

// The run's options from gptrun's flags (not --model's compile flags);
// every error is a usage error naming the flag.
StatusOr<TrainOptions> ReadTrainOptions(const Flags& flags) {
  TrainOptions o;
  ASSIGN_OR_RETURN(const DeviceFlags device, ReadDeviceFlags(flags));
  o.device = device.device;
  o.emu_checks = device.emu_checks;
  o.trust_artifact = device.trust_artifact;
  o.no_graph = flags.Has("no-graph");
  o.profile = flags.Has("profile");
  if (Status s = ReadTuningFlags(flags, o); !s.ok()) return s.WithCode(StatusCode::kUsage);
  o.debug_sync = flags.Has("debug-sync");
  o.train = flags.Get("train");
  o.val = flags.Get("val");
  o.hellaswag = flags.Get("hellaswag");
  o.ckpt_dir = flags.Get("ckpt-dir");
  o.resume = flags.Get("resume");
  o.reset_data = flags.Has("reset-data");
  o.overwrite = flags.Has("overwrite");
  o.log_path = flags.Get("log");
  o.cosine = flags.Has("cosine");
  o.bench = flags.Has("bench");
  if (flags.Has("tokenizer")) {
    o.tokenizer_dir = flags.Get("tokenizer");
    o.tokenizer_given = true;
  } else if (StatusOr<std::string> found = FindTokenizerDir(); found.ok()) {
    o.tokenizer_dir = *found;
  }
  int64_t seed = 0, gpu = o.gpu;
  RETURN_IF_ERROR(flags.ReadInts({{"steps", &o.steps, 1},
                                  {"warmup", &o.warmup, 0},
                                  {"grad-accum", &o.grad_accum, 1},
                                  {"seed", &seed, 0},
                                  {"val-every", &o.val_every, 0},
                                  {"val-steps", &o.val_steps, 1},
                                  {"sample-every", &o.sample_every, 0},
                                  {"sample-len", &o.sample_len, 1},
                                  {"top-k", &o.top_k, 1},
                                  {"hellaswag-every", &o.hellaswag_every, 0},
                                  {"hellaswag-limit", &o.hellaswag_limit, 1},
                                  {"ckpt-every", &o.ckpt_every, 0},
                                  {"ckpt-keep", &o.ckpt_keep, 0},
                                  {"skip-nonfinite", &o.skip_nonfinite, 0},
                                  {"cpu-max-params", &o.cpu_max_params, 1},
                                  {"gpu", &gpu, 0}}));
  o.seed = static_cast<uint64_t>(seed);
  o.gpu = static_cast<int>(gpu);
  for (auto [name, field] : {std::pair{"lr", &o.lr}, std::pair{"lr-min", &o.lr_min},
                             std::pair{"peak-tflops", &o.peak_tflops}}) {
    StatusOr<double> v = flags.GetDouble(name, *field);
    if (!v.ok()) return v.status().WithCode(StatusCode::kUsage);
    if (!std::isfinite(*v) || *v < 0) {
      return UsageError("--{} must be a finite number >= 0, got {}", name, *v);
    }
    *field = *v;
  }
  if (o.cosine && o.lr_min > o.lr) {
    return UsageError(
        "--lr-min {} is above --lr {} (the cosine schedule decays from --lr to --lr-min)", o.lr_min,
        o.lr);
  }
  if (o.warmup > o.steps) o.warmup = o.steps;
  if ((o.resume == "latest" || o.resume == "auto") && o.ckpt_dir.empty()) {
    return UsageError("--resume {} needs --ckpt-dir", o.resume);
  }
  if (!o.resume.empty() && o.bench) return UsageError("--resume does not apply to --bench");
  if (o.profile && o.device == "cpu") return UsageError("--profile needs --device gpu or emu");
  if (Status s = CheckInapplicable(flags, o); !s.ok()) return s.WithCode(StatusCode::kUsage);
  return o;
}

int Main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "generate") return GenerateMain(argc, argv);
  if (argc >= 2 && std::string_view(argv[1]) == "eval") return EvalMain(argc, argv);
  Flags flags = DeclareFlags();
  if (Status s = flags.Parse(argc, argv, 1); !s.ok()) return FailUsage(s);
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  const bool jit = flags.Has("model");
  if (flags.positional().empty() && !jit) {
    return Fail(UsageError("needs one artifact FILE.gptx or --model NAME (see gptrun --help)"));
  }
  if (flags.positional().size() > (jit ? 0u : 1u)) {
    return Fail(UsageError("unexpected argument '{}'{}", flags.positional().back(),
                           jit ? " (--model compiles the artifact)" : ""));
  }
  for (const char* name : {"batch", "seq", "artifact-out", "tokens-per-step", "remat",
                           "memory-budget", "attention-mma"}) {
    if (flags.Has(name) && !jit) return Fail(UsageError("--{} applies to --model", name));
  }
  StatusOr<TrainOptions> read = ReadTrainOptions(flags);
  if (!read.ok()) return Fail(read.status());
  TrainOptions o = *std::move(read);
  if (!jit) {
    o.artifact = flags.positional()[0];
    return Train(o);
  }
  StatusOr<JitOptions> jo = JitOptionsOf(flags, o);
  if (!jo.ok()) return FailUsage(jo.status());
  if (Status s = JitMemoryBudget(flags, *jo, o.gpu); !s.ok()) return FailUsage(s);
  bool temporary = false;
  StatusOr<std::string> artifact = CompileThroughCache(*jo, temporary);
  if (!artifact.ok()) return Fail(artifact.status());
  o.artifact = *artifact;
  const int code = Train(o);
  if (temporary) std::remove(artifact->c_str());  // Note [temporary artifact] (gptc)
  return code;
}

}  // namespace
}  // namespace gptc::tools

int main(int argc, char** argv) {
  return gptc::tools::ExitWithStdoutChecked("gptrun", gptc::tools::Main(argc, argv));
}
