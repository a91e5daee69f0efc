// The gemm rule's epilogue records (passes/gemm_fusion.h, Note [gemm
// epilogue records] in compiler/analysis/gemm_epilogue.h): what the rule
// writes as it takes each op, numbered in the fusion's operands and outputs.
#include "passes/gemm_fusion.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/analysis/gemm_epilogue.h"
#include "compiler/ir/printer.h"
#include "passes/fusion.h"
#include "passes/remat.h"
#include "tests/testing/pass_harness.h"
#include "tests/testing/small_models.h"

namespace gptc::passes {
namespace {

using ::gptc::testing::OnlyGemm;
using ::gptc::testing::ParseOrDie;
using ::gptc::testing::RunPassAndCompare;

// The records of the entry's gemm fusions, by fusion name.
std::map<std::string, std::string> Records(const ir::Module& m) {
  std::map<std::string, std::string> records;
  for (const auto& inst : m.entry()->instructions()) {
    if (inst->opcode() != ir::Opcode::kFusion ||
        inst->attrs().fusion_kind != ir::FusionKind::kGemm) {
      continue;
    }
    const std::optional<ir::GemmEpilogue>& e = inst->attrs().gemm_epilogue;
    records[inst->name()] = e ? ir::GemmEpilogueToString(*e) : "none";
  }
  return records;
}

// Every gemm chain of GPT-2's bf16 train step: the bias (qkv), bias and GELU
// writing the bf16 pre-activation as aux (c_fc), bias and residual (the
// projections), the bf16 logits, the GELU backward reading the aux, the bias
// gradients beside the weight gradients (of the bf16 copy the dot reads
// where the sum reads the f32 gradient: the projections'), the transposed
// lm_head gradient.
TEST(GemmFusionTest, GptChainsRecordEachEpilogueTheRuleTook) {
  std::unique_ptr<ir::Module> module = ::gptc::testing::TinyGpt2Step(
      {"mixed-precision", "autodiff", "dce", "simplify", "cse", "dce"});
  ASSERT_NE(module, nullptr);
  Remat remat({.policy = RematPolicy::kNone});
  ASSERT_TRUE(remat.Run(*module).ok());
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 1, 1e-5));
  const std::map<std::string, std::string> want = {
      {"h.0.attn.c_attn.dot.fusion", "{d=0, bias=2}"},
      {"h.0.attn.c_proj.dot.fusion", "{d=0, bias=2, residual=3}"},
      {"h.0.mlp.c_fc.dot.fusion", "{d=1, bias=2, activation=gelu, aux_out=0}"},
      {"h.0.mlp.c_proj.dot.fusion", "{d=0, bias=2, residual=3}"},
      {"lm_head.dot.bf16.fusion", "{d=0}"},
      {"grad.lm_head.dot.bf16.fusion", "{d=0}"},
      {"grad.lm_head.dot.bf16.1.fusion", "{d=0, transposed=true}"},
      {"grad.h.0.mlp.c_proj.dot.1.fusion", "{d=0, activation=gelu_grad, aux_in=2}"},
      {"grad.h.0.mlp.c_proj.dot.3.fusion", "{d=1, bias_grad_out=0, bias_grad_of=2}"},
      {"grad.h.0.mlp.c_fc.dot.1.fusion", "{d=0}"},
      {"grad.h.0.mlp.c_fc.dot.3.fusion", "{d=1, bias_grad_out=0, bias_grad_of=0}"},
      {"grad.h.0.attn.c_proj.dot.1.fusion", "{d=0}"},
      {"grad.h.0.attn.c_proj.dot.3.fusion", "{d=1, bias_grad_out=0, bias_grad_of=2}"},
      {"grad.h.0.attn.c_attn.dot.1.fusion", "{d=0}"},
      {"grad.h.0.attn.c_attn.dot.3.fusion", "{d=1, bias_grad_out=0, bias_grad_of=0}"},
  };
  EXPECT_EQ(Records(*after), want) << ir::PrintModule(*after);
  // The sum reads the f32 gradient, the dot its bf16 copy: noted in the plan.
  for (const auto& inst : after->entry()->instructions()) {
    if (inst->name() != "grad.h.0.attn.c_proj.dot.3.fusion") continue;
    const std::vector<std::string> notes =
        analysis::SkippedRoundings(*inst, inst->attrs().gemm_epilogue.value());
    EXPECT_NE(std::find(notes.begin(), notes.end(),
                        "bias gradient summed from %grad.h.0.attn.c_proj.dot.out (the bf16 copy "
                        "of %grad.h.0.add.2.out)"),
              notes.end())
        << ::testing::PrintToString(notes);
  }
}

TEST(GemmFusionTest, BiasConvertsAndResidualInTheFusionsNumbers) {
  // bf16 dot, widened; + f32 bias; + residual.
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %r = f32[4,16] parameter(0)
  %x = bf16[4,8] parameter(1)
  %b = f32[16] parameter(2)
  %w = bf16[8,16] parameter(3)
  %d = bf16[4,16] dot(%x, %w), lhs_contracting={1}, rhs_contracting={0}
  %dw = f32[4,16] convert(%d)
  %bb = f32[4,16] broadcast(%b), dimensions={1}
  %y = f32[4,16] add(%dw, %bb)
  ROOT %z = f32[4,16] add(%y, %r)
}
)");
  GemmFusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after));
  const ir::Instruction* gemm = OnlyGemm(*after);
  ASSERT_NE(gemm, nullptr);
  ASSERT_TRUE(gemm->attrs().gemm_epilogue.has_value());
  const ir::GemmEpilogue& e = *gemm->attrs().gemm_epilogue;
  // Operands in the order the fusion reads them: x, w, b, r.
  EXPECT_EQ(ir::GemmEpilogueToString(e), "{d=0, bias=2, residual=3}") << ir::PrintModule(*after);
  EXPECT_EQ(gemm->operand(e.bias)->name(), "b");
  EXPECT_EQ(gemm->operand(e.residual)->name(), "r");
  // The dot's bf16 rounding is not cuBLASLt's (it widens in f32).
  EXPECT_EQ(analysis::SkippedRoundings(*gemm, e),
            std::vector<std::string>{"bf16 rounding of %d is skipped (cuBLASLt keeps f32)"});
  EXPECT_FALSE(fusion.Run(*after).value());
}

TEST(GemmFusionTest, BiasGradientRoundTripAndTransposedResult) {
  // dW^T = (x^T dy)^T and db = sum(dy) rounded to bf16 and back.
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[32,64] parameter(0)
  %dy = f32[32,192] parameter(1)
  %dw = f32[64,192] dot(%x, %dy), lhs_contracting={0}, rhs_contracting={0}
  %t = f32[192,64] transpose(%dw), dimensions={1,0}
  %db = f32[192] reduce(%dy), dimensions={0}, kind=sum
  %dbn = bf16[192] convert(%db)
  %dbw = f32[192] convert(%dbn)
  ROOT %o = (f32[192], f32[192,64]) tuple(%dbw, %t)
}
)");
  GemmFusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after));
  const ir::Instruction* gemm = OnlyGemm(*after);
  ASSERT_NE(gemm, nullptr);
  const ir::GemmEpilogue& e = gemm->attrs().gemm_epilogue.value();
  EXPECT_EQ(e,
            (ir::GemmEpilogue{.d = 0, .bias_grad_out = 1, .bias_grad_of = 1, .transposed = true}))
      << ir::PrintModule(*after);
  EXPECT_EQ(analysis::SkippedRoundings(*gemm, e),
            std::vector<std::string>{"bf16 rounding of the bias gradient %dbn is skipped"});
}

TEST(GemmFusionTest, AReluAfterTheBiasIsOneRowOfEachTable) {
  // Note [adding a gemm epilogue]: the ReLU joined as its row of the
  // activations (the rule) and its rows of the epilogue table; the record
  // follows from the rule alone.
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[32,64] parameter(0)
  %w = f32[64,128] parameter(1)
  %b = f32[128] parameter(2)
  %d = f32[32,128] dot(%x, %w), lhs_contracting={1}, rhs_contracting={0}
  %bb = f32[32,128] broadcast(%b), dimensions={1}
  %y = f32[32,128] add(%d, %bb)
  %z = f32[] constant(0)
  %zb = f32[32,128] broadcast(%z), dimensions={}
  ROOT %r = f32[32,128] max(%y, %zb)
}
)");
  GemmFusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after));
  const ir::Instruction* gemm = OnlyGemm(*after);
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->attrs().gemm_epilogue,
            (ir::GemmEpilogue{.d = 0, .bias = 2, .activation = ir::GemmActivation::kRelu}));
}

TEST(GemmFusionTest, AResidualStoredInAnotherTypeStaysOutside) {
  // Note [bias of D's type]: C has D's type, so the gemm writes the f32 sum
  // and the bf16 store is a kernel's: the fusion rule asks the same limits
  // the plan does.
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[4,8] parameter(0)
  %w = f32[8,16] parameter(1)
  %r = f32[4,16] parameter(2)
  %d = f32[4,16] dot(%x, %w), lhs_contracting={1}, rhs_contracting={0}
  %y = f32[4,16] add(%d, %r)
  ROOT %yb = bf16[4,16] convert(%y)
}
)");
  GemmFusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after));
  const ir::Instruction* gemm = OnlyGemm(*after);
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->attrs().gemm_epilogue, (ir::GemmEpilogue{.d = 0})) << ir::PrintModule(*after);
  EXPECT_EQ(gemm->shape().ToString(), "f32[4,16]");
}

TEST(GemmFusionTest, ABiasOrResidualComputedFromConstantsStaysOutside) {
  // Constants are recomputed in every kernel, so neither is an operand
  // cuBLASLt could read: the adds stay outside the gemm.
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[4,8] parameter(0)
  %w = f32[8,16] parameter(1)
  %d = f32[4,16] dot(%x, %w), lhs_contracting={1}, rhs_contracting={0}
  %c = f32[] constant(2)
  %cv = f32[16] broadcast(%c), dimensions={}
  %cb = f32[4,16] broadcast(%cv), dimensions={1}
  %y = f32[4,16] add(%d, %cb)
  %cr = f32[4,16] broadcast(%c), dimensions={}
  ROOT %z = f32[4,16] add(%y, %cr)
}
)");
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after));
  const ir::Instruction* gemm = OnlyGemm(*after);
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->attrs().gemm_epilogue, (ir::GemmEpilogue{.d = 0})) << ir::PrintModule(*after);
}

TEST(GemmFusionTest, AWrongGeluDerivativeStaysOutsideTheGemm) {
  // dy * (0.5 (1 + tanh(k (x + 0.044715 x^3)))): GELU' without its second
  // term, which cuBLASLt's DGELU would add.
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %a = bf16[8,32] parameter(0)
  %w = bf16[32,16] parameter(1)
  %aux = bf16[8,16] parameter(2)
  %d = bf16[8,16] dot(%a, %w), lhs_contracting={1}, rhs_contracting={0}
  %dy = f32[8,16] convert(%d)
  %x = f32[8,16] convert(%aux)
  %c0 = f32[] constant(0.044715)
  %c1 = f32[] constant(0.7978846)
  %c2 = f32[] constant(1)
  %c3 = f32[] constant(0.5)
  %b0 = f32[8,16] broadcast(%c0), dimensions={}
  %b1 = f32[8,16] broadcast(%c1), dimensions={}
  %b2 = f32[8,16] broadcast(%c2), dimensions={}
  %b3 = f32[8,16] broadcast(%c3), dimensions={}
  %x2 = f32[8,16] mul(%x, %x)
  %x3 = f32[8,16] mul(%x2, %x)
  %m = f32[8,16] mul(%b0, %x3)
  %s = f32[8,16] add(%x, %m)
  %k = f32[8,16] mul(%b1, %s)
  %t = f32[8,16] tanh(%k)
  %u = f32[8,16] add(%b2, %t)
  %h = f32[8,16] mul(%b3, %u)
  %g = f32[8,16] mul(%dy, %h)
  ROOT %out = bf16[8,16] convert(%g)
}
)");
  GemmFusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after));
  const ir::Instruction* gemm = OnlyGemm(*after);
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->attrs().gemm_epilogue->activation, ir::GemmActivation::kNone)
      << ir::PrintModule(*after);
}

}  // namespace
}  // namespace gptc::passes
