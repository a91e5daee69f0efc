#include "passes/data_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "compiler/analysis/buffer_assignment.h"
#include "compiler/analysis/kernel_count.h"
#include "compiler/eval/evaluator.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"
#include "models/gpt2.h"
#include "passes/autodiff.h"
#include "passes/dce.h"
#include "passes/fusion.h"
#include "passes/train_step.h"
#include "tests/testing/pass_harness.h"
#include "tests/testing/small_models.h"

namespace gptc::passes {
namespace {

using ::gptc::testing::Differentiated;
using ::gptc::testing::ExpectLiteralsNear;
using ::gptc::testing::ParseOrDie;
using ir::Instruction;
using ir::Opcode;

// loss = sum(w * broadcast(x)) + sum(b * b) (tests/testing/small_models.h).
constexpr std::string_view kModel = ::gptc::testing::kLinearLossModule;

std::vector<const Instruction*> AllReduces(const ir::Computation& c) {
  std::vector<const Instruction*> out;
  for (const auto& inst : c.instructions()) {
    if (inst->opcode() == Opcode::kAllReduce) out.push_back(inst.get());
  }
  return out;
}

int64_t Position(const ir::Computation& c, const Instruction* inst) {
  for (int64_t i = 0; i < c.instruction_count(); ++i) {
    if (c.instructions()[i].get() == inst) return i;
  }
  return -1;
}

// With every rank holding the same values (the evaluator's simulated
// replicas, world_size 2), mean over ranks is the identity: the module
// evaluates as before.
void ExpectSameOnIdenticalReplicas(const ir::Module& before, const ir::Module& after,
                                   int64_t world) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 3; ++trial) {
    std::vector<eval::Literal> args;
    for (const Instruction* p : before.entry()->parameters()) {
      args.push_back(eval::Literal::Random(p->shape(), rng));
    }
    StatusOr<eval::Literal> want = eval::Evaluate(before, args);
    StatusOr<eval::Literal> got = eval::Evaluate(after, args, {.world_size = world});
    ASSERT_TRUE(want.ok()) << want.status().message();
    ASSERT_TRUE(got.ok()) << got.status().message();
    ExpectLiteralsNear(*want, *got, 1e-6);
  }
}

TEST(DataParallelTest, StepAveragesLossAndEveryGradient) {
  std::unique_ptr<ir::Module> module = Differentiated(kModel);
  std::unique_ptr<ir::Module> before = module->Clone();
  StatusOr<bool> changed = DataParallel({.world_size = 2}).Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(ir::VerifyModule(*module).ok()) << ir::PrintModule(*module);
  const ir::Computation& entry = *module->entry();
  std::vector<const Instruction*> ars = AllReduces(entry);
  ASSERT_EQ(ars.size(), 3u);  // loss, dw, db
  const Instruction* root = entry.root();
  for (int64_t i = 0; i < 3; ++i) {
    const Instruction* mean = root->operand(i);
    ASSERT_EQ(mean->opcode(), Opcode::kAllReduce) << mean->name();
    EXPECT_EQ(mean->attrs().reduce_kind, ir::ReduceKind::kSum);
    // Note [scale first]: times 1/N, then the sum.
    EXPECT_EQ(mean->operand(0)->opcode(), Opcode::kMul);
  }
  EXPECT_EQ(root->operand(0)->name(), "dp.loss.mean");
  EXPECT_EQ(root->operand(1)->name(), "dp.w.mean");
  EXPECT_EQ(root->operand(2)->name(), "dp.b.mean");
  EXPECT_EQ(root->operand(1)->metadata(), "data_parallel.w");
  EXPECT_EQ(root->operand(1)->operand(0)->metadata(), "data_parallel.w");
  // Each all-reduce follows the instruction that makes its value final (only
  // its own scaling in between), in the order the values are computed.
  for (const Instruction* ar : ars) {
    const Instruction* value = ar->operand(0)->operand(0);
    const int64_t gap = Position(entry, ar) - Position(entry, value);
    EXPECT_GE(gap, 2) << ar->name();
    EXPECT_LE(gap, 4) << ar->name();  // constant, broadcast, mul, all-reduce
  }
  ExpectSameOnIdenticalReplicas(*before, *module, 2);
}

TEST(DataParallelTest, AccumulateAveragesOnlyTheLoss) {
  std::unique_ptr<ir::Module> module = Differentiated(kModel);
  std::unique_ptr<ir::Module> before = module->Clone();
  StatusOr<bool> changed =
      DataParallel({.world_size = 4, .mode = OptimizerMode::kAccumulate}).Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  std::vector<const Instruction*> ars = AllReduces(*module->entry());
  ASSERT_EQ(ars.size(), 1u);
  EXPECT_EQ(ars[0]->name(), "dp.loss.mean");
  ExpectSameOnIdenticalReplicas(*before, *module, 4);
}

TEST(DataParallelTest, ApplyAveragesTheAccumulators) {
  std::unique_ptr<ir::Module> module = Differentiated(kModel);
  Optimizer optimizer({.mode = OptimizerMode::kApply, .grad_accum = 2});
  ASSERT_TRUE(optimizer.Run(*module).ok());
  std::unique_ptr<ir::Module> before = module->Clone();
  StatusOr<bool> changed =
      DataParallel({.world_size = 2, .mode = OptimizerMode::kApply}).Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  ASSERT_TRUE(ir::VerifyModule(*module).ok()) << ir::PrintModule(*module);
  std::vector<const Instruction*> ars = AllReduces(*module->entry());
  ASSERT_EQ(ars.size(), 2u);
  EXPECT_EQ(ars[0]->operand(0)->operand(0)->name(), "grad_acc.w");
  EXPECT_EQ(ars[1]->operand(0)->operand(0)->name(), "grad_acc.b");
  // The accumulators feed nothing but their mean now.
  for (const Instruction* ar : ars) EXPECT_EQ(ar->operand(0)->operand(0)->users().size(), 1u);
  ExpectSameOnIdenticalReplicas(*before, *module, 2);
  // And the signature is unchanged.
  EXPECT_TRUE(CheckSignature(*module, optimizer.signature()).ok());
}

// Note [scale first]: autodiff seeded with 1/N plus the prescaled pass equals
// plain autodiff on identical replicas, with no multiply on any gradient.
TEST(DataParallelTest, PrescaledGradientsGetTheirAllReduceAlone) {
  std::unique_ptr<ir::Module> plain = Differentiated(kModel);
  std::unique_ptr<ir::Module> module = ParseOrDie(kModel);
  ASSERT_TRUE(Autodiff({.loss_scale = 0.25}).Run(*module).ok());
  ASSERT_TRUE(Dce().Run(*module).ok());
  StatusOr<bool> changed =
      DataParallel({.world_size = 4, .gradients_prescaled = true}).Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  const ir::Computation& entry = *module->entry();
  EXPECT_NE(entry.FindInstruction("dp.loss.scaled"), nullptr);
  EXPECT_EQ(entry.FindInstruction("dp.w.scaled"), nullptr);
  EXPECT_EQ(entry.FindInstruction("dp.b.scaled"), nullptr);
  EXPECT_EQ(AllReduces(entry).size(), 3u);
  ExpectSameOnIdenticalReplicas(*plain, *module, 4);
}

TEST(DataParallelTest, WorldOfOneLeavesTheModuleAlone) {
  std::unique_ptr<ir::Module> module = Differentiated(kModel);
  const std::string text = ir::PrintModule(*module);
  StatusOr<bool> changed = DataParallel({.world_size = 1}).Run(*module);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(ir::PrintModule(*module), text);
}

TEST(DataParallelTest, ErrorsNameTheProblem) {
  std::unique_ptr<ir::Module> forward = ParseOrDie(kModel);
  StatusOr<bool> r = DataParallel({.world_size = 2}).Run(*forward);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "data-parallel (mode step): entry %main is not an autodiff output (loss, "
            "gradients...): its root is not a tuple");

  std::unique_ptr<ir::Module> twice = Differentiated(kModel);
  ASSERT_TRUE(DataParallel({.world_size = 2}).Run(*twice).ok());
  r = DataParallel({.world_size = 2}).Run(*twice);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "data-parallel: entry %main already has all-reduce %dp.loss.mean (run the pass once)");

  std::unique_ptr<ir::Module> step = Differentiated(kModel);
  r = DataParallel({.world_size = 2, .mode = OptimizerMode::kApply}).Run(*step);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "data-parallel (mode apply): entry %main has no gradient-phase parameters (the "
            "accumulated gradients; run it on the optimizer's apply entry)");

  r = DataParallel({.world_size = 0}).Run(*step);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "data-parallel: world size must be >= 1, got 0");
}

TEST(DataParallelTest, ParsesOptions) {
  StatusOr<DataParallelOptions> o = ParseDataParallelOptions({{"world", "8"}, {"mode", "apply"}});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->world_size, 8);
  EXPECT_EQ(o->mode, OptimizerMode::kApply);
  EXPECT_EQ(ParseDataParallelOptions({{"world", "two"}}).status().message(),
            "data-parallel: world must be an integer, got 'two'");
  EXPECT_EQ(ParseDataParallelOptions({{"world", "0"}}).status().message(),
            "data-parallel: world must be >= 1, got 0");
  EXPECT_EQ(ParseDataParallelOptions({{"mode", "sgd"}}).status().message(),
            "data-parallel: mode must be step, accumulate or apply, got 'sgd'");
  EXPECT_EQ(ParseDataParallelOptions({{"size", "2"}}).status().message(),
            "data-parallel: unknown option 'size' (known: world, mode, prescaled, gradients)");
  EXPECT_TRUE(ParseDataParallelOptions({{"prescaled", "true"}})->gradients_prescaled);
  EXPECT_FALSE(ParseDataParallelOptions({{"gradients", "false"}})->gradients);
  EXPECT_EQ(ParseDataParallelOptions({{"gradients", "no"}}).status().message(),
            "data-parallel: gradients must be true or false, got 'no'");
  EXPECT_EQ(ParseDataParallelOptions({{"prescaled", "1"}}).status().message(),
            "data-parallel: prescaled must be true or false, got '1'");
}

// The whole optimized pipeline on gpt2-tiny (narrowed) with --dp 2.
StatusOr<TrainProgram> TinyProgram(int64_t world, int64_t accum) {
  ASSIGN_OR_RETURN(models::GptConfig config, models::FindGptConfig("gpt2-tiny"));
  config = models::ApplyOverrides(config, {.width = 32});
  ASSIGN_OR_RETURN(frontend::TracedModule traced, models::TraceGpt2Forward(config, 2, 16));
  TrainStepOptions options;
  options.world_size = world;
  options.grad_accum = accum;
  options.optimize = true;
  options.precision.policy = PrecisionPolicy::kBF16;
  return BuildTrainProgram(std::move(traced.module), std::move(traced.params), traced.inputs,
                           options);
}

// Each all-reduce's gradient is made by a backward kernel; between that
// kernel and the all-reduce only data-parallel work may run (the 1/N
// scaling, other all-reduces), or the communication would start later than
// the backward allows.
TEST(DataParallelTest, Gpt2TinyAllReducesFollowTheirGradients) {
  StatusOr<TrainProgram> program = TinyProgram(2, 1);
  ASSERT_TRUE(program.ok()) << program.status().message();
  EXPECT_EQ(program->world_size, 2);
  const ir::Computation& step = *program->entries[0].module->entry();
  std::vector<const Instruction*> ars = AllReduces(step);
  // The loss and one gradient per parameter.
  ASSERT_EQ(ars.size(), program->params.size() + 1);
  EXPECT_EQ(ars[0]->name(), "dp.loss.mean");
  auto is_dp = [](const Instruction* i) { return i->metadata().starts_with("data_parallel."); };
  std::vector<int64_t> positions;
  int64_t last_backward = 0;
  for (const Instruction* ar : ars) {
    // The backward kernel behind the all-reduce's operand.
    const Instruction* producer = ar->operand(0);
    while (is_dp(producer) || !analysis::IsKernel(*producer)) {
      if (producer->operand_count() == 0) break;
      producer = producer->operand(0);
    }
    const int64_t from = Position(step, producer), to = Position(step, ar);
    ASSERT_LT(from, to) << ar->name();
    for (int64_t i = from + 1; i < to; ++i) {
      const Instruction* between = step.instructions()[i].get();
      EXPECT_TRUE(!analysis::IsKernel(*between) || is_dp(between))
          << ar->name() << " waits for " << between->name() << " after its gradient's "
          << producer->name();
    }
    positions.push_back(to);
    last_backward = std::max(last_backward, from);
  }
  // Interleaved with the backward, not gathered at its end: all but the last
  // gradients (wpe, then wte) are on their way before the backward's last kernel.
  const int64_t early = std::count_if(positions.begin(), positions.end(),
                                      [&](int64_t p) { return p < last_backward; });
  EXPECT_GE(early, static_cast<int64_t>(ars.size()) - 2);

  // Note [in-place all-reduce]: every gradient is reduced in its own buffer.
  StatusOr<analysis::BufferAssignment> ba = analysis::AssignBuffers(
      *program->entries[0].module, analysis::DonationOptions(program->entries[0].signature));
  ASSERT_TRUE(ba.ok()) << ba.status().message();
  for (const Instruction* ar : ars) {
    EXPECT_EQ(*ba->GetSlice(ar), *ba->GetSlice(ar->operand(0))) << ar->name();
  }
}

TEST(DataParallelTest, GradAccumulationCommunicatesInApplyOnly) {
  StatusOr<TrainProgram> program = TinyProgram(2, 2);
  ASSERT_TRUE(program.ok()) << program.status().message();
  const TrainEntry* accumulate = program->Find(program::EntryRole::kAccumulate);
  const TrainEntry* apply = program->Find(program::EntryRole::kApply);
  ASSERT_NE(accumulate, nullptr);
  ASSERT_NE(apply, nullptr);
  std::vector<const Instruction*> acc_ars = AllReduces(*accumulate->module->entry());
  ASSERT_EQ(acc_ars.size(), 1u);  // the loss, a scalar
  EXPECT_EQ(acc_ars[0]->name(), "dp.loss.mean");
  EXPECT_EQ(AllReduces(*apply->module->entry()).size(), program->params.size());
}

}  // namespace
}  // namespace gptc::passes
