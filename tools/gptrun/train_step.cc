#include "tools/gptrun/train_step.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "compiler/support/text.h"
#include "runtime/cpu_device.h"
#include "runtime/data_loader.h"

namespace gptc::tools {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

}  // namespace

StepPhase::StepPhase(RunContext& run, double flops_per_token, double peak_tflops)
    : run_(run),
      schedule_{.max_lr = run.o.lr,
                .min_lr = run.o.cosine ? run.o.lr_min : run.o.lr,
                .warmup_steps = run.o.warmup,
                .total_steps = run.o.steps},
      flops_per_token_(flops_per_token),
      peak_tflops_(peak_tflops) {
  if (run.o.bench) {
    const program::CompileFlags& f = run.flags();
    for (int64_t k = 0; k < run.program().grad_accum; ++k) {
      bench_batches_.push_back(rt::PatternBatch(f.batch, f.seq, run.model().vocab, k));
    }
  }
}

StatusOr<std::vector<rt::MicroBatch>> StepPhase::Batches(int64_t step) {
  if (run_.o.bench) return bench_batches_;
  const program::CompileFlags& f = run_.flags();
  std::vector<rt::MicroBatch> micro;
  for (int64_t k = 0; k < run_.program().grad_accum; ++k) {
    StatusOr<rt::MicroBatch> mb = run_.train->Next();
    if (!mb.ok()) return mb.status().WithPrefix(fmt::format("step {}", step));
    micro.push_back(run_.dist->world() > 1 ? RankSlice(*mb, run_.dist->env, f.batch, f.seq)
                                           : std::move(mb).value());
  }
  return micro;
}

Status StepPhase::Run(int64_t step) {
  ASSIGN_OR_RETURN(std::vector<rt::MicroBatch> micro, Batches(step));
  const double lr = schedule_.At(step);
  std::optional<rt::TrainerState> before;  // Note [divergence]: what a skipped step undoes
  if (skipped_ < run_.o.skip_nonfinite) {
    StatusOr<rt::TrainerState> state = run_.trainer->ExportState();
    if (!state.ok()) return state.status().WithPrefix(fmt::format("step {}", step));
    before.emplace(std::move(state).value());
  }
  auto t0 = Clock::now();
  run_.dist->BeginStep(step);
  StatusOr<rt::StepResult> r = run_.trainer->Step(micro, lr);
  run_.dist->EndStep();
  const double dt = Seconds(t0);
  if (!r.ok()) {
    // The GPU trainer names the step itself: a context, not a kind of error.
    const std::string prefix = fmt::format("step {}", step);
    return r.status().message().starts_with(prefix + ":") ? r.status()
                                                          : r.status().WithPrefix(prefix);
  }
  if (run_.hooks.after_step) run_.hooks.after_step(step, r->loss, r->grad_norm);
  if (steps_run_ == 0) first_loss_ = r->loss;
  last_loss_ = r->loss;
  run_.summary->losses.push_back(r->loss);
  train_seconds_ += dt;
  ++steps_run_;
  Report(step, *r, lr, dt);
  if (!run_.log->status().ok()) return run_.log->status();
  if (std::ferror(stdout)) {  // Note [checked stdout]: stop now, not after the whole run
    return Error("step {}: writing standard output failed ({})", step,
                 errno != 0 ? std::strerror(errno) : "write error");
  }
  // Note [divergence]: a non-finite loss or gradient norm (the norm is the
  // all-reduced one, the same on every rank) is undone while
  // --skip-nonfinite allows, else ends the run before anything is written
  // of it.
  if (std::isfinite(r->loss) && std::isfinite(r->grad_norm)) return Status::Ok();
  return NonFinite(step, *r, std::move(before));
}

Status StepPhase::NonFinite(int64_t step, const rt::StepResult& r,
                            std::optional<rt::TrainerState> before) {
  const TrainOptions& o = run_.o;
  if (!before) {
    return Error(
        "step {}: the loss is {} and the gradient norm {}: the run "
        "diverged (no checkpoint written after it; {})",
        step, r.loss, r.grad_norm,
        o.skip_nonfinite > 0 ? fmt::format("{} steps skipped already, --skip-nonfinite {}",
                                           skipped_, o.skip_nonfinite)
                             : "try a lower --lr, or --skip-nonfinite N");
  }
  ++skipped_;
  before->steps_done = step;  // done, without its update
  if (Status s = run_.trainer->ImportState(*before); !s.ok()) {
    return s.WithPrefix(fmt::format("step {}: undoing it", step));
  }
  run_.console.Line(
      fmt::format("step {}: the loss is {} and the gradient norm {}: skipped, "
                  "its update undone ({} of --skip-nonfinite {})",
                  step, r.loss, r.grad_norm, skipped_, o.skip_nonfinite));
  run_.log->Write(json{{"event", "skip"}, {"step", step}, {"skipped", skipped_}});
  return Status::Ok();
}

void StepPhase::Report(int64_t step, const rt::StepResult& r, double lr, double dt) {
  const double tok_s = static_cast<double>(run_.tokens_per_step) / dt;
  std::string mfu = "-";
  std::optional<double> mfu_value;
  if (peak_tflops_ > 0) {
    mfu_value = 100.0 * flops_per_token_ * tok_s / (peak_tflops_ * 1e12);
    mfu = fmt::format("{:.1f}%", *mfu_value);
  }
  run_.console.Line(
      fmt::format("step {}/{} | loss {:.4f} | lr {:.1e} | norm {:.2f} | {:.1f} ms | "
                  "{} tok/s | MFU {}",
                  step, run_.o.steps, r.loss, lr, r.grad_norm, dt * 1e3,
                  WithThousands(static_cast<int64_t>(tok_s + 0.5)), mfu));
  json event{{"event", "step"},     {"step", step},   {"loss", r.loss}, {"lr", lr},
             {"norm", r.grad_norm}, {"ms", dt * 1e3}, {"tok_s", tok_s}, {"mfu", nullptr}};
  if (mfu_value) event["mfu"] = *mfu_value;
  run_.log->Write(event);
}

}  // namespace gptc::tools
