#include "runtime/program_loader.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "compiler/ir/printer.h"
#include "compiler/program/param.h"
#include "compiler/program/plan.h"
#include "models/config.h"
#include "models/gpt2.h"
#include "passes/train_step.h"
#include "runtime/cpu_device.h"

namespace gptc::rt {
namespace {

// The sections gptc compile writes, built by hand (no codegen here).
program::Artifact MakeArtifact(const program::TrainProgram& program, const models::GptConfig& c,
                      int64_t batch, int64_t seq) {
  program::Artifact a;
  std::string ir;
  // The plan holds the signatures (its slots); the loader needs no thunk.
  program::Plan plan;
  for (const program::TrainEntry& e : program.entries) {
    ir += ir::PrintModule(*e.module);
    program::EntryPlan& p = plan.entries.emplace_back();
    p.role = e.role;
    for (const program::Slot& s : e.signature.inputs) p.inputs.push_back({s});
    for (const program::Slot& s : e.signature.outputs) p.outputs.push_back({s});
    p.donations = e.signature.donations;
  }
  a.manifest = {.model = {.name = c.name,
                          .layers = c.layers,
                          .heads = c.heads,
                          .width = c.width,
                          .positions = c.positions,
                          .vocab = c.vocab,
                          .padded_vocab = c.padded_vocab},
                .flags = {.batch = batch, .seq = seq, .grad_accum = program.grad_accum}};
  a.plan = program::ToJson(plan);
  a.params = program::ParamsSectionJson(program.params);
  a.sections = {{"manifest", program::ToJson(a.manifest).dump()},
                {"ir", ir},
                {"plan", a.plan.dump()},
                {"params", a.params.dump()}};
  return a;
}

class ProgramLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = models::ApplyOverrides(*models::FindGptConfig("gpt2-tiny"),
                                     {.layers = 1, .heads = 2, .width = 16});
    StatusOr<frontend::TracedModule> traced = models::TraceGpt2Forward(config_, 2, 8);
    ASSERT_TRUE(traced.ok()) << traced.status().message();
    passes::TrainStepOptions options;
    StatusOr<program::TrainProgram> p = passes::BuildTrainProgram(
        std::move(traced->module), traced->params, traced->inputs, options);
    ASSERT_TRUE(p.ok()) << p.status().message();
    StatusOr<frontend::TracedModule> logits = models::TraceGpt2Logits(config_, 1, 8);
    ASSERT_TRUE(logits.ok()) << logits.status().message();
    ASSERT_TRUE(passes::AddLogitsEntry(*p, std::move(logits->module), logits->inputs, options).ok());
    program_ = std::move(*p);
  }

  models::GptConfig config_;
  program::TrainProgram program_;
};

TEST_F(ProgramLoaderTest, LoadedProgramTrainsLikeTheOriginal) {
  program::Artifact a = MakeArtifact(program_, config_, 2, 8);
  StatusOr<LoadedProgram> loaded = LoadProgram(a, "t.gptx");
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->flags.batch, 2);
  EXPECT_EQ(loaded->flags.seq, 8);
  EXPECT_EQ(loaded->model.layers, 1);
  EXPECT_FALSE(loaded->complete);
  // MFU's N: the token table (the logits' weight) and the blocks' four
  // matrices, C = 16; not the position table, which is added.
  const int64_t c = config_.width;
  EXPECT_EQ(loaded->matmul_values,
            config_.padded_vocab * c + c * 3 * c + c * c + c * 4 * c + 4 * c * c);
  EXPECT_EQ(loaded->parameter_values, models::ParameterCount(config_, config_.padded_vocab));
  ASSERT_EQ(loaded->program.entries.size(), 2u);
  EXPECT_EQ(loaded->program.entries[1].role, program::EntryRole::kLogits);
  CpuTrainer original(&program_, 3), reloaded(&loaded->program, 3);
  for (int64_t s = 0; s < 2; ++s) {
    MicroBatch mb = PatternBatch(2, 8, config_.vocab, s);
    StatusOr<StepResult> x = original.Step({&mb, 1}, 1e-3);
    StatusOr<StepResult> y = reloaded.Step({&mb, 1}, 1e-3);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_EQ(x->loss, y->loss);
    EXPECT_EQ(x->grad_norm, y->grad_norm);
  }
  MicroBatch one = PatternBatch(1, 8, config_.vocab, 0);
  StatusOr<std::vector<eval::Literal>> logits =
      reloaded.Evaluate(*loaded->program.Find(program::EntryRole::kLogits), one);
  ASSERT_TRUE(logits.ok()) << logits.status().message();
  EXPECT_EQ(logits->at(0).shape.ToString(), fmt::format("f32[1,8,{}]", config_.padded_vocab));

  // One row, as the sampler reads it; and slices outside the output.
  const int64_t v = config_.padded_vocab;
  StatusOr<std::vector<double>> row =
      reloaded.EvaluateSlice(*loaded->program.Find(program::EntryRole::kLogits), one, 0, 5 * v, v);
  ASSERT_TRUE(row.ok()) << row.status().message();
  EXPECT_EQ(*row, std::vector<double>(logits->at(0).values.begin() + 5 * v,
                                      logits->at(0).values.begin() + 6 * v));
  EXPECT_EQ(
      reloaded
          .EvaluateSlice(*loaded->program.Find(program::EntryRole::kLogits), one, 0, 7 * v, v + 1)
          .status()
          .message(),
      fmt::format("logits: elements [{}, {}) of output 0 ({} elements)", 7 * v, 8 * v + 1, 8 * v));
  EXPECT_FALSE(
      reloaded.EvaluateSlice(*loaded->program.Find(program::EntryRole::kLogits), one, 1, 0, 1)
          .ok());
}

TEST_F(ProgramLoaderTest, InconsistentArtifactsAreErrors) {
  program::Artifact a = MakeArtifact(program_, config_, 2, 8);
  a.plan["entries"].erase(1);
  StatusOr<LoadedProgram> p = LoadProgram(a, "t.gptx");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "t.gptx: section 'plan' lists 1 entries, section 'ir' holds 2 modules");

  a = MakeArtifact(program_, config_, 2, 8);
  a.plan["entries"][0]["inputs"][0]["shape"] = "f32[3,3]";
  p = LoadProgram(a, "t.gptx");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("entry train_step inputs[0]"), std::string::npos)
      << p.status().message();

  a = MakeArtifact(program_, config_, 2, 8);
  a.plan["entries"][0]["outputs"][0]["role"] = "bogus";
  p = LoadProgram(a, "t.gptx");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("unknown role 'bogus'"), std::string::npos);

  a = MakeArtifact(program_, config_, 2, 8);
  a.manifest.flags.grad_accum = 0;
  p = LoadProgram(a, "t.gptx");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "t.gptx: flags: grad_accum 0 < 1");

  a = MakeArtifact(program_, config_, 2, 8);
  a.manifest.flags.grad_accum = 2;  // the program has train_step only
  p = LoadProgram(a, "t.gptx");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "t.gptx: grad_accum 2 needs entries accumulate and apply");
}

// Note [manifest against program]: a manifest whose model or flags disagree
// with the parameters and the entries (a checksum recomputed after an edit)
// is refused, naming both sides.
TEST_F(ProgramLoaderTest, TheManifestMustDescribeTheProgram) {
  auto refusal = [&](const std::function<void(program::Manifest&)>& edit) {
    program::Artifact a = MakeArtifact(program_, config_, 2, 8);
    edit(a.manifest);
    StatusOr<LoadedProgram> p = LoadProgram(a, "t.gptx");
    return p.ok() ? std::string("accepted") : p.status().message();
  };
  EXPECT_EQ(refusal([](program::Manifest& m) { m.model.layers = 3; }),
            "t.gptx: manifest.model (3 layers) has 40 parameters, section 'params' holds 16");
  EXPECT_EQ(refusal([](program::Manifest& m) { m.model.vocab = 60000; }),
            "t.gptx: manifest.model: 'vocab' 60000 exceeds 'padded_vocab' 50304");
  EXPECT_EQ(refusal([](program::Manifest& m) { m.model.padded_vocab = 50432; }),
            "t.gptx: section 'params' [0] is wte.weight f32[50304,16], manifest.model makes it "
            "wte.weight f32[50432,16]");
  EXPECT_EQ(refusal([](program::Manifest& m) { m.flags.batch = 1000000000; }),
            "t.gptx: entry train_step input %tokens is s32[2,8]; manifest.flags say batch "
            "1000000000 and seq 8");
  EXPECT_EQ(refusal([](program::Manifest& m) { m.flags.seq = int64_t{1} << 40; }),
            "t.gptx: manifest.flags: batch 2 and seq 1099511627776 must be positive, seq at most "
            "the model's 64 positions");
  EXPECT_EQ(refusal([](program::Manifest& m) { m.flags.zero_stage = 1; }),
            "t.gptx: flags: zero_stage 1 with world_size 1 (ZeRO-1 needs zero_stage 1 and two or "
            "more ranks)");
  // A ZeRO-1 manifest over a program of whole moments: its slots do not match.
  EXPECT_NE(refusal([](program::Manifest& m) {
              m.flags.zero_stage = 1;
              m.flags.world_size = 2;
            }).find("does not match a parameter of section 'params'"),
            std::string::npos);
  EXPECT_EQ(refusal([](program::Manifest& m) { m.flags.seq = 16; }),
            "t.gptx: entry train_step input %tokens is s32[2,8]; manifest.flags say batch 2 and "
            "seq 16");
}

}  // namespace
}  // namespace gptc::rt
