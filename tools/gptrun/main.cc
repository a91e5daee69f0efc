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
// memory and race checks unless --emu-checks off).
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>

#include "compiler/support/status.h"
#include "tools/common/flags.h"
#include "tools/gptrun/train_loop.h"

namespace gptc::tools {
namespace {

constexpr char kUsage[] =
    "usage: gptrun FILE.gptx [--device cpu|gpu|emu] [--gpu N] [--no-graph] [--profile]\n"
    "              [--debug-sync] [--emu-checks on|off]\n"
    "              --train GLOB [--val GLOB] [--steps N]\n"
    "              [--lr LR] [--warmup W] [--lr-min LR] [--cosine] [--grad-accum K] [--seed S]\n"
    "              [--val-every N] [--val-steps N] [--sample-every N] [--sample-len N]\n"
    "              [--top-k K] [--ckpt-dir DIR] [--ckpt-every N] [--resume DIR|latest]\n"
    "              [--log FILE.jsonl] [--peak-tflops T] [--bench] [--tokenizer DIR]\n"
    "              [--cpu-max-params N]\n"
    "Trains with a compiled artifact (gptc compile -o FILE.gptx). The batch, sequence length,\n"
    "grad-accum and AdamW settings are the artifact's; --grad-accum only checks it.\n"
    "  --device gpu       the GPU runtime (the default when a GPU is present and the artifact\n"
    "                     is complete); --gpu N picks the device (ranks of a --dp artifact\n"
    "                     take the GPU of their local rank)\n"
    "  --device cpu       the reference evaluator (small models, e.g. gpt2-tiny)\n"
    "  --device emu       the GPU runtime on the emulated device: the artifact's kernels\n"
    "                     compiled for this host (gptc compile --emu), gemms with cuBLASLt's\n"
    "                     semantics, memory and race checks (docs/EMULATOR.md)\n"
    "  --emu-checks off   emu: skip the memory and race checks (several times faster)\n"
    "  --no-graph         GPU: launch every thunk every step (no CUDA graph replay)\n"
    "  --profile          GPU: time every thunk with CUDA events (no graph) and print the\n"
    "                     top thunks, kernel and gemm totals after the last step\n"
    "  --debug-sync       GPU: synchronize after every thunk so a fault names its thunk\n"
    "  --lr-min LR        the cosine schedule's floor (with --cosine; else lr is constant\n"
    "                     after the warmup)\n"
    "  --val-every N      validation loss over --val-steps batches (default 20) every N\n"
    "                     steps and after the last\n"
    "  --sample-every N   a text sample of --sample-len tokens (top-k --top-k, 1 = greedy)\n"
    "  --ckpt-dir DIR     checkpoints DIR/step_NNNNNN every --ckpt-every steps and at the end\n"
    "  --resume DIR       continue bit-identically from a checkpoint (`latest`: the newest\n"
    "                     in --ckpt-dir)\n"
    "  --peak-tflops T    the device's dense bf16 peak, for MFU (default: known for\n"
    "                     H100/H200/A100 from the GPU's name)\n"
    "  --bench            time steps on synthetic batches (no data, validation or checkpoints)\n";

int Fail(int code, const Status& status) {
  std::fprintf(stderr, "gptrun: %s\n", status.message().c_str());
  return code;
}

int Main(int argc, char** argv) {
  Flags flags;
  flags.Value("device").Value("train").Value("val").Value("steps").Value("lr").Value("warmup");
  flags.Value("lr-min").Bool("cosine").Value("grad-accum").Value("seed").Value("val-every");
  flags.Value("val-steps").Value("sample-every").Value("sample-len").Value("top-k");
  flags.Value("ckpt-dir").Value("ckpt-every").Value("resume").Value("log").Value("peak-tflops");
  flags.Bool("bench").Value("tokenizer").Value("cpu-max-params").Bool("help");
  flags.Value("gpu").Bool("no-graph").Bool("profile").Bool("debug-sync").Value("emu-checks");
  if (Status s = flags.Parse(argc, argv, 1); !s.ok()) return Fail(2, s);
  if (flags.Has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (flags.positional().empty()) {
    return Fail(2, Error("needs one artifact FILE.gptx (see gptrun --help)"));
  }
  if (flags.positional().size() > 1) {
    return Fail(2, Error("unexpected argument '{}'", flags.positional()[1]));
  }
  RunOptions o;
  o.artifact = flags.positional()[0];
  o.device = flags.Get("device");
  if (flags.Has("device") && o.device != "cpu" && o.device != "gpu" && o.device != "emu") {
    return Fail(2, Error("--device must be cpu, gpu or emu, got '{}'", o.device));
  }
  const std::string checks = flags.Get("emu-checks", "on");
  if (checks != "on" && checks != "off") {
    return Fail(2, Error("--emu-checks must be on or off, got '{}'", checks));
  }
  if (flags.Has("emu-checks") && o.device != "emu") {
    return Fail(2, Error("--emu-checks applies to --device emu"));
  }
  o.emu_checks = checks == "on";
  o.no_graph = flags.Has("no-graph");
  o.profile = flags.Has("profile");
  o.debug_sync = flags.Has("debug-sync");
  o.train = flags.Get("train");
  o.val = flags.Get("val");
  o.ckpt_dir = flags.Get("ckpt-dir");
  o.resume = flags.Get("resume");
  o.log_path = flags.Get("log");
  o.cosine = flags.Has("cosine");
  o.bench = flags.Has("bench");
  o.tokenizer_dir = flags.Get("tokenizer", o.tokenizer_dir);
  int64_t seed = 0, gpu = -1;
  for (auto [name, field, min] :
       {std::tuple{"steps", &o.steps, int64_t{1}}, std::tuple{"warmup", &o.warmup, int64_t{0}},
        std::tuple{"grad-accum", &o.grad_accum, int64_t{1}}, std::tuple{"seed", &seed, int64_t{0}},
        std::tuple{"val-every", &o.val_every, int64_t{0}},
        std::tuple{"val-steps", &o.val_steps, int64_t{1}},
        std::tuple{"sample-every", &o.sample_every, int64_t{0}},
        std::tuple{"sample-len", &o.sample_len, int64_t{1}},
        std::tuple{"top-k", &o.top_k, int64_t{1}},
        std::tuple{"ckpt-every", &o.ckpt_every, int64_t{0}},
        std::tuple{"cpu-max-params", &o.cpu_max_params, int64_t{1}},
        std::tuple{"gpu", &gpu, int64_t{0}}}) {
    StatusOr<int64_t> v = flags.GetInt(name, *field);
    if (!v.ok()) return Fail(2, v.status());
    if (flags.Has(name) && *v < min)
      return Fail(2, Error("--{} must be >= {}, got {}", name, min, *v));
    *field = *v;
  }
  o.seed = static_cast<uint64_t>(seed);
  o.gpu = static_cast<int>(gpu);
  for (auto [name, field] : {std::pair{"lr", &o.lr}, std::pair{"lr-min", &o.lr_min},
                             std::pair{"peak-tflops", &o.peak_tflops}}) {
    StatusOr<double> v = flags.GetDouble(name, *field);
    if (!v.ok()) return Fail(2, v.status());
    if (!std::isfinite(*v) || *v < 0) {
      return Fail(2, Error("--{} must be a finite number >= 0, got {}", name, *v));
    }
    *field = *v;
  }
  if (o.cosine && o.lr_min > o.lr) {
    return Fail(2, Error("--lr-min {} is above --lr {} (the cosine schedule decays from --lr to "
                         "--lr-min)",
                         o.lr_min, o.lr));
  }
  if (o.warmup > o.steps) o.warmup = o.steps;
  if (!o.resume.empty() && o.bench) return Fail(2, Error("--resume does not apply to --bench"));
  if (o.profile && o.device == "cpu") return Fail(2, Error("--profile needs --device gpu or emu"));
  return RunTraining(o);
}

}  // namespace
}  // namespace gptc::tools

int main(int argc, char** argv) { return gptc::tools::Main(argc, argv); }
