// The step phase of a gptrun run (tools/gptrun/train_loop.cc): one training
// step's batches (the data's, or --bench's synthetic ones), the trainer's
// step at the schedule's learning rate, its line and log event, and what
// Note [divergence] (tools/gptrun/train_loop.h) does with a non-finite one.
#ifndef GPTC_TOOLS_GPTRUN_TRAIN_STEP_H_
#define GPTC_TOOLS_GPTRUN_TRAIN_STEP_H_

#include <cstdint>
#include <vector>

#include "compiler/support/status.h"
#include "runtime/lr_schedule.h"
#include "runtime/trainer.h"
#include "tools/gptrun/train_context.h"

namespace gptc::tools {

class StepPhase {
 public:
  // After the run's setup: `run` has its trainer and data. The step lines
  // show MFU from `flops_per_token` and `peak_tflops` (0: unknown, "-").
  StepPhase(RunContext& run, double flops_per_token, double peak_tflops);

  // Trains step `step`; an error ends the run.
  Status Run(int64_t step);

  // Over the steps run so far.
  int64_t steps_run() const { return steps_run_; }
  double train_seconds() const { return train_seconds_; }
  double first_loss() const { return first_loss_; }
  double last_loss() const { return last_loss_; }

 private:
  StatusOr<std::vector<rt::MicroBatch>> Batches(int64_t step);
  // Note [divergence]: a non-finite step undone (from `before`, when
  // --skip-nonfinite allows) or the error that ends the run.
  Status NonFinite(int64_t step, const rt::StepResult& r, std::optional<rt::TrainerState> before);
  // One step's line and log event.
  void Report(int64_t step, const rt::StepResult& r, double lr, double dt);

  RunContext& run_;
  const rt::LrSchedule schedule_;
  const double flops_per_token_, peak_tflops_;
  std::vector<rt::MicroBatch> bench_batches_;  // made once: no data loading in the timing
  int64_t steps_run_ = 0;
  double train_seconds_ = 0, first_loss_ = 0, last_loss_ = 0;
  int64_t skipped_ = 0;  // steps undone for a non-finite loss or norm (Note [divergence])
};

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_TRAIN_STEP_H_
