// The score entry (passes::AddScoreEntry) on the CPU reference device: each
// row's masked loss sum and mask count equal what the host computes from the
// logits entry's logits (the next-token cross-entropy over the real
// vocabulary, summed where the mask is 1), unfused and fused, f32 and bf16;
// and the entry refuses what it cannot be.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "models/gpt2.h"
#include "passes/train_step.h"
#include "runtime/cpu_device.h"

namespace gptc::rt {
namespace {

constexpr int64_t kBatch = 3, kSeq = 8;

models::GptConfig SmallConfig() {
  return models::ApplyOverrides(*models::FindGptConfig("gpt2-tiny"),
                                {.layers = 1, .heads = 2, .width = 16});
}

// The train step with the logits (batch 1) and score entries.
StatusOr<program::TrainProgram> Compile(const passes::TrainStepOptions& options) {
  const models::GptConfig config = SmallConfig();
  ASSIGN_OR_RETURN(frontend::TracedModule traced, models::TraceGpt2Forward(config, kBatch, kSeq));
  ASSIGN_OR_RETURN(
      program::TrainProgram program,
      passes::BuildTrainProgram(std::move(traced.module), traced.params, traced.inputs, options));
  ASSIGN_OR_RETURN(frontend::TracedModule logits, models::TraceGpt2Logits(config, 1, kSeq));
  RETURN_IF_ERROR(
      passes::AddLogitsEntry(program, std::move(logits.module), logits.inputs, options));
  ASSIGN_OR_RETURN(frontend::TracedModule score, models::TraceGpt2Score(config, kBatch, kSeq));
  RETURN_IF_ERROR(passes::AddScoreEntry(program, std::move(score.module), score.inputs, options));
  return program;
}

MicroBatch RandomBatch(int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab) - 1);
  MicroBatch b;
  for (int64_t i = 0; i < kBatch * kSeq; ++i) {
    b.tokens.push_back(token(rng));
    b.targets.push_back(token(rng));
    b.mask.push_back(rng() % 3 == 0 ? 0 : 1);
  }
  b.mask[kSeq] = 1;  // no row without a counted target...
  for (int64_t t = 0; t < kSeq; ++t) b.mask[2 * kSeq + t] = 0;  // ...but the last row
  return b;
}

// Row `row`'s masked loss sum from the logits entry, in double on the host.
double HostLossSum(CpuTrainer& trainer, const program::TrainEntry& logits, const MicroBatch& b,
                   int64_t row, int64_t vocab) {
  MicroBatch one;
  one.tokens.assign(b.tokens.begin() + row * kSeq, b.tokens.begin() + (row + 1) * kSeq);
  StatusOr<std::vector<eval::Literal>> out = trainer.Evaluate(logits, one);
  EXPECT_TRUE(out.ok()) << out.status().message();
  if (!out.ok()) return NAN;
  const std::vector<double>& v = out->at(0).values;
  const int64_t padded = static_cast<int64_t>(v.size()) / kSeq;
  double sum = 0;
  for (int64_t t = 0; t < kSeq; ++t) {
    if (b.mask[row * kSeq + t] == 0) continue;
    const double* x = v.data() + t * padded;
    double top = x[0];
    for (int64_t c = 1; c < vocab; ++c) top = std::max(top, x[c]);
    double z = 0;
    for (int64_t c = 0; c < vocab; ++c) z += std::exp(x[c] - top);
    sum += top + std::log(z) - x[b.targets[row * kSeq + t]];
  }
  return sum;
}

void ExpectScoresMatchTheLogits(passes::PrecisionPolicy policy, bool optimize, double tolerance) {
  passes::TrainStepOptions options;
  options.precision.policy = policy;
  options.optimize = optimize;
  StatusOr<program::TrainProgram> program = Compile(options);
  ASSERT_TRUE(program.ok()) << program.status().message();
  const program::TrainEntry* score = program->Find(program::EntryRole::kScore);
  const program::TrainEntry* logits = program->Find(program::EntryRole::kLogits);
  ASSERT_NE(score, nullptr);
  EXPECT_TRUE(score->signature.donations.empty());
  EXPECT_EQ(program->ArenaHost(*score), program->Find(program::EntryRole::kTrainStep));
  ASSERT_EQ(score->signature.outputs.size(), 2u);
  EXPECT_EQ(score->signature.outputs[0].role, program::SlotRole::kLossSums);
  EXPECT_EQ(score->signature.outputs[1].role, program::SlotRole::kTokenCounts);
  EXPECT_GE(score->signature.FindInput(program::SlotRole::kMask), 0);

  const int64_t vocab = SmallConfig().vocab;
  CpuTrainer trainer(&*program, /*seed=*/3);
  const MicroBatch batch = RandomBatch(vocab, 7);
  StatusOr<std::vector<eval::Literal>> out = trainer.Evaluate(*score, batch);
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->size(), 2u);
  for (int64_t row = 0; row < kBatch; ++row) {
    double count = 0;
    for (int64_t t = 0; t < kSeq; ++t) count += batch.mask[row * kSeq + t];
    EXPECT_EQ(out->at(1).values[row], count) << "row " << row;
    const double want = HostLossSum(trainer, *logits, batch, row, vocab);
    EXPECT_NEAR(out->at(0).values[row], want, tolerance * std::max(1.0, std::abs(want)))
        << "row " << row;
  }
  EXPECT_EQ(out->at(0).values[2], 0.0);  // the row without a counted target
}

TEST(ScoreEntryTest, F32UnfusedEqualsTheLogitsEntrysLosses) {
  ExpectScoresMatchTheLogits(passes::PrecisionPolicy::kF32, false, 1e-6);
}

TEST(ScoreEntryTest, F32FusedEqualsTheLogitsEntrysLosses) {
  ExpectScoresMatchTheLogits(passes::PrecisionPolicy::kF32, true, 1e-6);
}

// Mixed precision: the score entry's cross-entropy reads the head's logits
// rounded to bf16 (as the train step's loss does), the logits entry returns
// them in f32; a few bf16 roundings of ~11-nat losses stay within 1e-4.
TEST(ScoreEntryTest, Bf16FusedEqualsTheLogitsEntrysLosses) {
  ExpectScoresMatchTheLogits(passes::PrecisionPolicy::kBF16, true, 1e-4);
}

TEST(ScoreEntryTest, RefusesASecondEntryAndAnotherModule) {
  passes::TrainStepOptions options;
  StatusOr<program::TrainProgram> program = Compile(options);
  ASSERT_TRUE(program.ok()) << program.status().message();
  const models::GptConfig config = SmallConfig();
  StatusOr<frontend::TracedModule> again = models::TraceGpt2Score(config, kBatch, kSeq);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(
      passes::AddScoreEntry(*program, std::move(again->module), again->inputs, options).message(),
      "train program already has a score entry");
  program->entries.pop_back();
  StatusOr<frontend::TracedModule> forward = models::TraceGpt2Forward(config, kBatch, kSeq);
  ASSERT_TRUE(forward.ok());
  Status wrong =
      passes::AddScoreEntry(*program, std::move(forward->module), forward->inputs, options);
  EXPECT_NE(wrong.message().find("no mask input"), std::string::npos) << wrong.message();
}

}  // namespace
}  // namespace gptc::rt
