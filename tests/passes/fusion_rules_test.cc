// The fusion pass's steps as passes of their own (passes/fusion.h): each,
// run alone on a bf16 GPT-2 train step, keeps the evaluator's results and
// makes fusions of its kind only; run one after another in fusion's order,
// they make the kinds the fusion pass makes.
#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <set>
#include <string>

#include "compiler/ir/verifier.h"
#include "passes/attention_operands.h"
#include "passes/fusion.h"
#include "passes/registry.h"
#include "tests/testing/pass_harness.h"
#include "tests/testing/small_models.h"

namespace gptc::passes {
namespace {

using ::gptc::testing::RunPassAndCompare;

// One layer of a narrow gpt2-tiny, bf16, with its AdamW update: every
// rule finds its ops (attention, cross-entropy, gemms with epilogues, layer
// norms, the optimizer and the parameter casts).
std::unique_ptr<ir::Module> TrainStep() {
  return ::gptc::testing::TinyGpt2Step(
      {"mixed-precision", "autodiff", "dce", "optimizer", "dce", "simplify", "cse", "dce"});
}

// The fusion instructions of the entry, by kind ("gemm": 3).
std::map<std::string, int64_t> FusionKinds(const ir::Module& module) {
  std::map<std::string, int64_t> kinds;
  for (const auto& inst : module.entry()->instructions()) {
    if (inst->opcode() == ir::Opcode::kFusion) {
      ++kinds[std::string(ir::FusionKindName(inst->attrs().fusion_kind))];
    }
  }
  return kinds;
}

struct RuleCase {
  const char* pass;
  std::set<std::string> kinds;  // the fusion kinds it makes
};
void PrintTo(const RuleCase& rule, std::ostream* os) { *os << rule.pass; }

// In fusion's order.
const RuleCase kRules[] = {
    {"horizontal-fusion", {"optimizer", "reduction", "loop"}},
    {"cross-entropy-fusion", {"cross_entropy"}},
    {"attention-fusion", {"attention"}},
    {"gemm-fusion", {"gemm"}},
    {"reduction-fusion", {"reduction"}},
    {"loop-fusion", {"loop"}},
};

class FusionRulePassTest : public ::testing::TestWithParam<RuleCase> {};

TEST_P(FusionRulePassTest, AloneKeepsResultsAndMakesItsKindsOnly) {
  std::unique_ptr<ir::Module> module = TrainStep();
  ASSERT_NE(module, nullptr);
  StatusOr<std::unique_ptr<pass::Pass>> pass = AllPasses().Create(GetParam().pass);
  ASSERT_TRUE(pass.ok()) << pass.status().message();
  EXPECT_EQ((*pass)->Name(), GetParam().pass);
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(**pass, *module, after, 1, 1e-4));
  const std::map<std::string, int64_t> kinds = FusionKinds(*after);
  int64_t fusions = 0;
  for (const auto& [kind, count] : kinds) {
    EXPECT_TRUE(GetParam().kinds.contains(kind)) << GetParam().pass << " made " << kind;
    fusions += count;
  }
  EXPECT_GT(fusions, 0);
}

INSTANTIATE_TEST_SUITE_P(Rules, FusionRulePassTest, ::testing::ValuesIn(kRules),
                         [](const auto& info) {
                           std::string name = info.param.pass;
                           std::erase(name, '-');
                           return name;
                         });

// The steps one after another make the kinds the fusion pass makes; they
// need not make the same kernels (Note in passes/fusion.h: together, a later
// rule may grow an earlier rule's group).
TEST(FusionRulePassTest, InSequenceMakeTheFusionPassKinds) {
  std::unique_ptr<ir::Module> module = TrainStep();
  ASSERT_NE(module, nullptr);
  std::unique_ptr<ir::Module> fused = module->Clone();
  ASSERT_TRUE(Fusion().Run(*fused).ok());
  AttentionOperands operands;
  ASSERT_TRUE(operands.Run(*module).ok());
  for (const RuleCase& rule : kRules) {
    StatusOr<std::unique_ptr<pass::Pass>> pass = AllPasses().Create(rule.pass);
    ASSERT_TRUE(pass.ok());
    StatusOr<bool> changed = (*pass)->Run(*module);
    ASSERT_TRUE(changed.ok()) << rule.pass << ": " << changed.status().message();
    EXPECT_TRUE(*changed) << rule.pass;
    Status verified = ir::VerifyModule(*module);
    ASSERT_TRUE(verified.ok()) << rule.pass << ": " << verified.message();
  }
  std::set<std::string> sequence_kinds, fusion_kinds;
  for (const auto& [kind, count] : FusionKinds(*module)) sequence_kinds.insert(kind);
  for (const auto& [kind, count] : FusionKinds(*fused)) fusion_kinds.insert(kind);
  EXPECT_EQ(sequence_kinds, fusion_kinds);
}

// A rule pass says which pass failed.
TEST(FusionRulePassTest, NoEntryIsAnErrorNamingThePass) {
  ir::Module empty("empty");
  StatusOr<std::unique_ptr<pass::Pass>> pass = AllPasses().Create("gemm-fusion");
  ASSERT_TRUE(pass.ok());
  EXPECT_EQ((*pass)->Run(empty).status().message(), "gemm-fusion: module empty has no entry");
  EXPECT_EQ(AttentionOperands().Run(empty).status().message(),
            "attention-operands: module empty has no entry");
}

}  // namespace
}  // namespace gptc::passes
