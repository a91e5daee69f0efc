// gptc-train-cpu: trains a model on the CPU reference device.
//
//   gptc-train-cpu --model gpt2-tiny [--batch B] [--seq T] [--steps N] [--lr LR]
//                  [--warmup W] [--lr-min LR] [--grad-accum K] [--seed S]
//                  [--weight-decay WD] [--clip-norm C]
//
// Compiles the train step in process (trace -> autodiff -> optimizer), then
// runs it with the reference evaluator on a synthetic learnable corpus (a
// repeating token cycle, runtime/cpu_device.h), printing one line a step:
//   step 3/50 | loss 9.8123 | lr 6.0e-04 | norm 1.23 | 412.3 ms | 620 tok/s
// Stand-in for `gptrun --device cpu` until the runtime lands.
#include <chrono>
#include <cstdio>
#include <vector>

#include "models/config.h"
#include "models/gpt2.h"
#include "passes/train_step.h"
#include "runtime/cpu_device.h"
#include "runtime/lr_schedule.h"
#include "tools/common/flags.h"

namespace gptc {
namespace {

constexpr char kUsage[] =
    "usage: gptc-train-cpu --model gpt2-tiny [--batch B] [--seq T] [--steps N] [--lr LR]\n"
    "                      [--warmup W] [--lr-min LR] [--grad-accum K] [--seed S]\n"
    "                      [--weight-decay WD] [--clip-norm C]\n"
    "Trains on the CPU reference device on a synthetic learnable corpus.\n";

int Fail(int code, const Status& status) {
  std::fprintf(stderr, "gptc-train-cpu: %s\n", status.message().c_str());
  return code;
}

int Main(int argc, char** argv) {
  tools::Flags flags;
  flags.Value("model").Value("batch").Value("seq").Value("steps").Value("lr").Value("warmup");
  flags.Value("lr-min").Value("grad-accum").Value("seed").Value("weight-decay").Value(
      "clip-norm");
  flags.Bool("help");
  if (Status s = flags.Parse(argc, argv, 1); !s.ok()) return Fail(2, s);
  if (flags.Has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!flags.positional().empty()) {
    return Fail(2, Error("unexpected argument '{}'", flags.positional()[0]));
  }
  StatusOr<models::GptConfig> config = models::FindGptConfig(flags.Get("model", "gpt2-tiny"));
  if (!config.ok()) return Fail(2, config.status());
  StatusOr<int64_t> batch = flags.GetInt("batch", 4);
  StatusOr<int64_t> seq = flags.GetInt("seq", 64);
  StatusOr<int64_t> steps = flags.GetInt("steps", 50);
  StatusOr<int64_t> warmup = flags.GetInt("warmup", 5);
  StatusOr<int64_t> accum = flags.GetInt("grad-accum", 1);
  StatusOr<int64_t> seed = flags.GetInt("seed", 0);
  StatusOr<double> lr = flags.GetDouble("lr", 1e-3);
  StatusOr<double> lr_min = flags.GetDouble("lr-min", 1e-4);
  StatusOr<double> wd = flags.GetDouble("weight-decay", 0.1);
  StatusOr<double> clip = flags.GetDouble("clip-norm", 1.0);
  for (const Status* s : {&batch.status(), &seq.status(), &steps.status(), &warmup.status(),
                          &accum.status(), &seed.status(), &lr.status(), &lr_min.status(),
                          &wd.status(), &clip.status()}) {
    if (!s->ok()) return Fail(2, *s);
  }
  if (*steps < 1) return Fail(2, Error("--steps must be >= 1, got {}", *steps));
  if (*accum < 1) return Fail(2, Error("--grad-accum must be >= 1, got {}", *accum));
  if (Status s = models::ValidateTraceShape(*config, *batch, *seq); !s.ok()) return Fail(2, s);

  auto t0 = std::chrono::steady_clock::now();
  StatusOr<frontend::TracedModule> traced = models::TraceGpt2Forward(*config, *batch, *seq);
  if (!traced.ok()) return Fail(1, traced.status());
  passes::TrainStepOptions options;
  options.grad_accum = *accum;
  options.adamw.weight_decay = *wd;
  options.adamw.clip_norm = *clip;
  StatusOr<passes::TrainProgram> program = passes::BuildTrainProgram(
      std::move(traced->module), std::move(traced->params), options);
  if (!program.ok()) return Fail(1, program.status());
  double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("compiled %s train step (batch %lld x %lld micro-batches, seq %lld) in %.2f s\n",
              config->name.c_str(), static_cast<long long>(*batch),
              static_cast<long long>(*accum), static_cast<long long>(*seq), compile_s);

  rt::CpuTrainer trainer(&*program, static_cast<uint64_t>(*seed));
  rt::LrSchedule schedule{.max_lr = *lr, .min_lr = *lr_min, .warmup_steps = *warmup,
                          .total_steps = *steps};
  const double tokens_per_step = static_cast<double>(*batch * *seq * *accum);
  double total_s = 0, first_loss = 0, last_loss = 0;
  for (int64_t s = 1; s <= *steps; ++s) {
    std::vector<rt::MicroBatch> micro;
    for (int64_t k = 0; k < *accum; ++k) {
      micro.push_back(rt::PatternBatch(*batch, *seq, config->vocab, (s - 1) * *accum + k));
    }
    const double step_lr = schedule.At(s);
    auto start = std::chrono::steady_clock::now();
    StatusOr<rt::StepResult> r = trainer.Step(micro, step_lr);
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!r.ok()) return Fail(1, r.status());
    total_s += dt;
    if (s == 1) first_loss = r->loss;
    last_loss = r->loss;
    std::printf("step %lld/%lld | loss %.4f | lr %.1e | norm %.2f | %.1f ms | %.0f tok/s\n",
                static_cast<long long>(s), static_cast<long long>(*steps), r->loss, step_lr,
                r->grad_norm, dt * 1e3, tokens_per_step / dt);
    std::fflush(stdout);
  }
  std::printf("done: %lld steps in %.2f s | %.3f steps/s | %.0f tok/s | loss %.4f -> %.4f\n",
              static_cast<long long>(*steps), total_s, *steps / total_s,
              tokens_per_step * *steps / total_s, first_loss, last_loss);
  return 0;
}

}  // namespace
}  // namespace gptc

int main(int argc, char** argv) { return gptc::Main(argc, argv); }
