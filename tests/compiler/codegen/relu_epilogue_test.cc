// A ReLU after a gemm's bias, end to end below the runtime: the fusion rule
// takes it into the gemm (Note [gemm activations]), the record says
// activation=relu, the verifier accepts it, the plan's table maps it to
// CUBLASLT_EPILOGUE_RELU_BIAS (Note [gemm epilogue table]), and the fallback
// kernel the runtime runs where cuBLASLt refuses it computes the fused
// computation on the emulated device. ReLU joined gptc as three rows (its
// activation, its two cuBLASLt epilogues, its matcher); this test is what
// shows that the rest followed.
#include <gtest/gtest.h>

#include "compiler/codegen/gemm_fallback.h"
#include "compiler/ir/printer.h"
#include "compiler/program/plan.h"
#include "passes/fusion.h"
#include "tests/compiler/codegen/emu_kernel_runner.h"
#include "tests/testing/pass_harness.h"

namespace gptc::codegen {
namespace {

using ::gptc::testing::OnlyGemm;
using ::gptc::testing::ParseOrDie;
using ::gptc::testing::RunPassAndCompare;

// x W + b, then max(., 0); `extra` adds more uses to the entry.
std::string ReluModule(const std::string& extra, const std::string& root) {
  return R"(module relu
ENTRY %main {
  %x = f32[32,64] parameter(0)
  %w = f32[64,128] parameter(1)
  %b = f32[128] parameter(2)
  %d = f32[32,128] dot(%x, %w), lhs_contracting={1}, rhs_contracting={0}
  %bb = f32[32,128] broadcast(%b), dimensions={1}
  %y = f32[32,128] add(%d, %bb)
  %z = f32[] constant(0)
  %zb = f32[32,128] broadcast(%z), dimensions={}
  %r = f32[32,128] max(%zb, %y)
)" + extra +
         "  ROOT " + root + "\n}\n";
}

TEST(ReluEpilogueTest, FusedRecordedPlannedAndRunByItsFallback) {
  auto module = ParseOrDie(ReluModule("", "%out = f32[32,128] copy(%r)"));
  ASSERT_NE(module, nullptr);
  passes::Fusion fusion;
  std::unique_ptr<ir::Module> after;
  ASSERT_TRUE(RunPassAndCompare(fusion, *module, after));
  const ir::Instruction* gemm = OnlyGemm(*after);
  ASSERT_NE(gemm, nullptr) << ir::PrintModule(*after);
  ASSERT_TRUE(gemm->attrs().gemm_epilogue.has_value());
  EXPECT_EQ(ir::GemmEpilogueToString(*gemm->attrs().gemm_epilogue),
            "{d=0, bias=2, activation=relu}");
  // The text form reads back (the verifier ran in RunPassAndCompare).
  EXPECT_NE(ParseOrDie(ir::PrintModule(*after)), nullptr);
  EXPECT_EQ(program::FindGemmEpilogue(ir::GemmActivation::kRelu, program::EpilogueBias::kRead,
                                      program::EpilogueAux::kNone),
            program::GemmEpilogue::kReluBias);
  EXPECT_EQ(program::GemmEpilogueName(program::GemmEpilogue::kReluBias),
            "CUBLASLT_EPILOGUE_RELU_BIAS");

  // Note [epilogue fallback]: the bias and the ReLU as a loop kernel over
  // the dot's f32 result, on the emulator against the evaluator.
  StatusOr<std::optional<GemmFallbackFusion>> fallback = EpilogueFallback(*gemm);
  ASSERT_TRUE(fallback.ok()) << fallback.status().message();
  ASSERT_TRUE(fallback->has_value());
  const GemmFallbackFusion& f = **fallback;
  EXPECT_EQ(f.gemm_operand, 3);  // x, w, b, then the dot's result
  EmuKernelRunner runner(*f.module);
  ASSERT_EQ(runner.Specs(f.fusion->name()).size(), 1u);
  runner.ExpectMatchesEvaluator(f.fusion->name());
}

// The backward reads the pre-activation, and cuBLASLt's ReLU keeps no copy
// of it that gptc can read (RELU_AUX stores a bit mask): the ReLU stays out
// of the gemm, which keeps its bias.
TEST(ReluEpilogueTest, APreActivationUsedElsewhereKeepsTheReluOut) {
  auto module = ParseOrDie(ReluModule("  %s = f32[32,128] sub(%r, %y)\n",
                                      "%out = (f32[32,128], f32[32,128]) tuple(%r, %s)"));
  ASSERT_NE(module, nullptr);
  passes::Fusion fusion;
  std::unique_ptr<ir::Module> after;
  ASSERT_TRUE(RunPassAndCompare(fusion, *module, after));
  const ir::Instruction* gemm = OnlyGemm(*after);
  ASSERT_NE(gemm, nullptr) << ir::PrintModule(*after);
  EXPECT_EQ(ir::GemmEpilogueToString(*gemm->attrs().gemm_epilogue), "{d=0, bias=2}");
}

}  // namespace
}  // namespace gptc::codegen
