// Training on the CPU reference device: gpt2-tiny (real vocabulary) on a
// learnable token cycle; the loss must fall by at least half. And the
// validation entry `eval`, against the loss the train step reports.
#include <gtest/gtest.h>

#include "models/gpt2.h"
#include "runtime/cpu_device.h"
#include "runtime/lr_schedule.h"
#include "passes/train_step.h"

namespace gptc::rt {
namespace {

StatusOr<program::TrainProgram> Compile(int64_t batch, int64_t seq, int64_t accum) {
  ASSIGN_OR_RETURN(models::GptConfig config, models::FindGptConfig("gpt2-tiny"));
  ASSIGN_OR_RETURN(frontend::TracedModule traced, models::TraceGpt2Forward(config, batch, seq));
  passes::TrainStepOptions options;
  options.grad_accum = accum;
  return passes::BuildTrainProgram(std::move(traced.module), std::move(traced.params),
                                   traced.inputs, options);
}

void TrainAndExpectLossHalves(int64_t accum, int64_t steps) {
  constexpr int64_t kBatch = 2, kSeq = 16;
  StatusOr<program::TrainProgram> program = Compile(kBatch, kSeq, accum);
  ASSERT_TRUE(program.ok()) << program.status().message();
  CpuTrainer trainer(&*program, /*seed=*/0);
  LrSchedule schedule{.max_lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 2, .total_steps = steps};
  double first = 0, last = 0;
  for (int64_t s = 1; s <= steps; ++s) {
    std::vector<MicroBatch> micro;
    for (int64_t k = 0; k < accum; ++k) {
      micro.push_back(PatternBatch(kBatch, kSeq, models::kGpt2Vocab, (s - 1) * accum + k));
    }
    StatusOr<StepResult> r = trainer.Step(micro, schedule.At(s));
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_TRUE(std::isfinite(r->loss) && std::isfinite(r->grad_norm));
    if (s == 1) first = r->loss;
    last = r->loss;
  }
  EXPECT_GT(first, 10.0);  // about ln(50257) at initialization
  EXPECT_LT(last, first / 2) << "first " << first << ", last " << last;
  EXPECT_EQ(trainer.steps_done(), steps);
}

TEST(CpuTrainTest, Gpt2TinyLossHalves) { TrainAndExpectLossHalves(1, 20); }

TEST(CpuTrainTest, Gpt2TinyWithGradAccumulation) { TrainAndExpectLossHalves(2, 16); }

TEST(CpuTrainTest, WrongMicroBatchCount) {
  StatusOr<program::TrainProgram> program = Compile(1, 4, 1);
  ASSERT_TRUE(program.ok());
  CpuTrainer trainer(&*program, 0);
  StatusOr<StepResult> r = trainer.Step({}, 1e-3);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "step 1: 0 micro-batches given, grad_accum is 1");
}

// The eval entry (forward and loss only, fused as in an artifact) gives the
// loss the train step reports for the same weights and batch.
TEST(CpuTrainTest, EvalEntryGivesTheStepsLoss) {
  constexpr int64_t kBatch = 2, kSeq = 8;
  const models::GptConfig config = models::ApplyOverrides(
      *models::FindGptConfig("gpt2-tiny"), {.layers = 1, .heads = 2, .width = 16});
  passes::TrainStepOptions options;
  options.precision.policy = passes::PrecisionPolicy::kBF16;
  options.optimize = true;
  StatusOr<frontend::TracedModule> traced = models::TraceGpt2Forward(config, kBatch, kSeq);
  ASSERT_TRUE(traced.ok()) << traced.status().message();
  StatusOr<program::TrainProgram> program =
      passes::BuildTrainProgram(std::move(traced->module), traced->params, traced->inputs, options);
  ASSERT_TRUE(program.ok()) << program.status().message();
  StatusOr<frontend::TracedModule> forward = models::TraceGpt2Forward(config, kBatch, kSeq);
  ASSERT_TRUE(forward.ok());
  Status added = passes::AddEvalEntry(*program, std::move(forward->module), forward->inputs, options);
  ASSERT_TRUE(added.ok()) << added.message();
  const program::TrainEntry* eval = program->Find(program::EntryRole::kEval);
  ASSERT_NE(eval, nullptr);
  EXPECT_TRUE(eval->signature.donations.empty());
  ASSERT_EQ(eval->signature.outputs.size(), 1u);
  EXPECT_EQ(eval->signature.outputs[0].role, program::SlotRole::kLoss);

  CpuTrainer trainer(&*program, /*seed=*/4);
  for (int64_t s = 0; s < 2; ++s) {  // at initialization, then after one update
    MicroBatch batch = PatternBatch(kBatch, kSeq, config.vocab, s);
    StatusOr<std::vector<eval::Literal>> out = trainer.Evaluate(*eval, batch);
    ASSERT_TRUE(out.ok()) << out.status().message();
    StatusOr<StepResult> step = trainer.Step({&batch, 1}, 1e-2);
    ASSERT_TRUE(step.ok()) << step.status().message();
    EXPECT_NEAR(out->at(0).values[0], step->loss, 1e-5 * step->loss) << "step " << s + 1;
  }

  // A second eval entry, or a module that is not the train step's forward.
  StatusOr<frontend::TracedModule> again = models::TraceGpt2Forward(config, kBatch, kSeq);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(passes::AddEvalEntry(*program, std::move(again->module), again->inputs, options).message(),
            "train program already has an eval entry");
  program->entries.pop_back();
  StatusOr<frontend::TracedModule> logits = models::TraceGpt2Logits(config, 1, kSeq);
  ASSERT_TRUE(logits.ok());
  Status wrong = passes::AddEvalEntry(*program, std::move(logits->module), logits->inputs, options);
  EXPECT_NE(wrong.message().find("no targets input"), std::string::npos) << wrong.message();
}

}  // namespace
}  // namespace gptc::rt
