// Dot layouts -> cuBLASLt descriptors (compiler/artifact/gemm_plan.h).
#include "compiler/artifact/gemm_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "compiler/ir/computation.h"
#include "compiler/ir/module.h"
#include "compiler/ir/parser.h"
#include "compiler/ir/verifier.h"

namespace gptc::artifact {
namespace {

using program::GemmDType;
using program::GemmEpilogue;
using program::GemmLayout;
using program::GemmOp;

// `text` parsed and verified; its gemm fusions carry their records as the
// fusion pass writes them (Note [gemm epilogue records]).
StatusOr<std::unique_ptr<ir::Module>> ParseVerified(const std::string& text) {
  ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> m, ir::ParseModule(text));
  RETURN_IF_ERROR(ir::VerifyModule(*m));
  return m;
}

// The plan of the entry root of `text` (a gemm fusion or a dot).
StatusOr<GemmPlan> PlanRoot(const std::string& text) {
  StatusOr<std::unique_ptr<ir::Module>> m = ParseVerified(text);
  if (!m.ok()) return m.status();
  const ir::Instruction* root = (*m)->entry()->root();
  if (root->opcode() == ir::Opcode::kGetTupleElement) root = root->operand(0);
  return PlanGemm(*root);
}

TEST(GemmPlanTest, PlainDotSwapsOperandsForColumnMajor) {
  // D[32,192] = X[32,64] . W[64,192]: cuBLASLt computes D^T = W^T X^T.
  StatusOr<GemmPlan> p = PlanRoot(R"(module m
ENTRY %main {
  %x = bf16[32,64] parameter(0)
  %w = bf16[64,192] parameter(1)
  ROOT %d = f32[32,192] dot(%x, %w), lhs_contracting={1}, rhs_contracting={0}
}
)");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->m, 192);
  EXPECT_EQ(p->n, 32);
  EXPECT_EQ(p->k, 64);
  EXPECT_EQ(p->transa, GemmOp::kN);
  EXPECT_EQ(p->transb, GemmOp::kN);
  EXPECT_EQ(p->a_operand, 1);
  EXPECT_EQ(p->b_operand, 0);
  EXPECT_EQ(p->a, (GemmLayout{GemmDType::kBF16, 192, 64, 192, 1, 0}));
  EXPECT_EQ(p->b, (GemmLayout{GemmDType::kBF16, 64, 32, 64, 1, 0}));
  EXPECT_EQ(p->d, (GemmLayout{GemmDType::kF32, 192, 32, 192, 1, 0}));
  EXPECT_EQ(p->epilogue, GemmEpilogue::kDefault);
  EXPECT_EQ(p->beta, 0.0);
}

TEST(GemmPlanTest, TransposedOperandsFromDimensionNumbers) {
  // lm_head: logits[B*T, V] = x[B*T, C] . wte[V, C]^T  -> transa = T.
  StatusOr<GemmPlan> p = PlanRoot(R"(module m
ENTRY %main {
  %x = bf16[2,16,64] parameter(0)
  %w = bf16[100,64] parameter(1)
  ROOT %d = f32[2,16,100] dot(%x, %w), lhs_contracting={2}, rhs_contracting={1}
}
)");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->transa, GemmOp::kT);
  EXPECT_EQ(p->transb, GemmOp::kN);
  EXPECT_EQ(p->a, (GemmLayout{GemmDType::kBF16, 64, 100, 64, 1, 0}));
  EXPECT_EQ(p->m, 100);
  EXPECT_EQ(p->n, 32);
  // Weight gradient: dW[C, N] = x[B*T, C]^T . dy[B*T, N] -> transb = T.
  p = PlanRoot(R"(module m
ENTRY %main {
  %x = bf16[2,16,64] parameter(0)
  %dy = bf16[2,16,192] parameter(1)
  ROOT %d = bf16[64,192] dot(%x, %dy), lhs_contracting={0,1}, rhs_contracting={0,1}
}
)");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->transa, GemmOp::kN);
  EXPECT_EQ(p->transb, GemmOp::kT);
  EXPECT_EQ(p->k, 32);
  EXPECT_EQ(p->b, (GemmLayout{GemmDType::kBF16, 64, 32, 64, 1, 0}));
  EXPECT_EQ(p->d, (GemmLayout{GemmDType::kBF16, 192, 64, 192, 1, 0}));
}

TEST(GemmPlanTest, BatchedDotIsStridedBatched) {
  StatusOr<GemmPlan> p = PlanRoot(R"(module m
ENTRY %main {
  %q = bf16[8,16,32] parameter(0)
  %k = bf16[8,16,32] parameter(1)
  ROOT %s = f32[8,16,16] dot(%q, %k), lhs_batch={0}, rhs_batch={0}, lhs_contracting={2}, rhs_contracting={2}
}
)");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->batch_count, 8);
  EXPECT_EQ(p->transa, GemmOp::kT);
  EXPECT_EQ(p->a, (GemmLayout{GemmDType::kBF16, 32, 16, 32, 8, 512}));
  EXPECT_EQ(p->d, (GemmLayout{GemmDType::kF32, 16, 16, 16, 8, 256}));
}

TEST(GemmPlanTest, LayoutsThatNeedACopyAreRefused) {
  StatusOr<GemmPlan> p = PlanRoot(R"(module m
ENTRY %main {
  %q = bf16[16,8,32] parameter(0)
  %k = bf16[16,8,32] parameter(1)
  ROOT %s = f32[8,16,16] dot(%q, %k), lhs_batch={1}, rhs_batch={1}, lhs_contracting={2}, rhs_contracting={2}
}
)");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "%s: lhs batch dims {1} are not the leading dims (needs a copy)");
}

TEST(GemmPlanTest, BiasGeluAndResidualEpilogues) {
  StatusOr<GemmPlan> p = PlanRoot(R"(module m
%fused.fc {
  %p0 = bf16[32,64] parameter(0)
  %p1 = bf16[64,256] parameter(1)
  %p2 = f32[256] parameter(2)
  %dot = f32[32,256] dot(%p0, %p1), lhs_contracting={1}, rhs_contracting={0}
  %b = f32[32,256] broadcast(%p2), dimensions={1}
  %x = f32[32,256] add(%dot, %b)
  %c1 = f32[] constant(0.044715)
  %c1b = f32[32,256] broadcast(%c1), dimensions={}
  %c2 = f32[] constant(0.7978845608)
  %c2b = f32[32,256] broadcast(%c2), dimensions={}
  %c3 = f32[] constant(1)
  %c3b = f32[32,256] broadcast(%c3), dimensions={}
  %c4 = f32[] constant(0.5)
  %c4b = f32[32,256] broadcast(%c4), dimensions={}
  %x2 = f32[32,256] mul(%x, %x)
  %x3 = f32[32,256] mul(%x2, %x)
  %t0 = f32[32,256] mul(%x3, %c1b)
  %t1 = f32[32,256] add(%x, %t0)
  %t2 = f32[32,256] mul(%t1, %c2b)
  %t3 = f32[32,256] tanh(%t2)
  %t4 = f32[32,256] add(%t3, %c3b)
  %t5 = f32[32,256] mul(%x, %c4b)
  %g = f32[32,256] mul(%t5, %t4)
  ROOT %gb = bf16[32,256] convert(%g)
}

ENTRY %main {
  %x = bf16[32,64] parameter(0)
  %w = bf16[64,256] parameter(1)
  %bias = f32[256] parameter(2)
  ROOT %f = bf16[32,256] fusion(%x, %w, %bias), kind=gemm, epilogue={d=0, bias=2, activation=gelu}, calls=%fused.fc
}
)");
  // Note [bias of D's type]: cuBLASLt's bias has D's type, so an f32 bias
  // before a bf16 result is refused (fusion keeps it out of the gemm)...
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "%f: a f32 bias with a bf16 result (cuBLASLt's bias has the result's type)");
  // ...and a bf16 bias, widened inside the epilogue, is planned.
  p = PlanRoot(R"(module m
%fused.fc {
  %p0 = bf16[32,64] parameter(0)
  %p1 = bf16[64,256] parameter(1)
  %p2 = bf16[256] parameter(2)
  %p2f = f32[256] convert(%p2)
  %dot = f32[32,256] dot(%p0, %p1), lhs_contracting={1}, rhs_contracting={0}
  %b = f32[32,256] broadcast(%p2f), dimensions={1}
  %x = f32[32,256] add(%dot, %b)
  %c1 = f32[] constant(0.044715)
  %c1b = f32[32,256] broadcast(%c1), dimensions={}
  %c2 = f32[] constant(0.7978845608)
  %c2b = f32[32,256] broadcast(%c2), dimensions={}
  %c3 = f32[] constant(1)
  %c3b = f32[32,256] broadcast(%c3), dimensions={}
  %c4 = f32[] constant(0.5)
  %c4b = f32[32,256] broadcast(%c4), dimensions={}
  %x2 = f32[32,256] mul(%x, %x)
  %x3 = f32[32,256] mul(%x2, %x)
  %t0 = f32[32,256] mul(%x3, %c1b)
  %t1 = f32[32,256] add(%x, %t0)
  %t2 = f32[32,256] mul(%t1, %c2b)
  %t3 = f32[32,256] tanh(%t2)
  %t4 = f32[32,256] add(%t3, %c3b)
  %t5 = f32[32,256] mul(%x, %c4b)
  %g = f32[32,256] mul(%t5, %t4)
  ROOT %gb = bf16[32,256] convert(%g)
}

ENTRY %main {
  %x = bf16[32,64] parameter(0)
  %w = bf16[64,256] parameter(1)
  %bias = bf16[256] parameter(2)
  ROOT %f = bf16[32,256] fusion(%x, %w, %bias), kind=gemm, epilogue={d=0, bias=2, activation=gelu}, calls=%fused.fc
}
)");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->epilogue, GemmEpilogue::kGeluBias);
  EXPECT_EQ(p->bias_operand, 2);
  EXPECT_EQ(p->bias_dtype, GemmDType::kBF16);
  EXPECT_EQ(p->d.dtype, GemmDType::kBF16);

  // Residual add through C (beta = 1) after a bias.
  p = PlanRoot(R"(module m
%fused.proj {
  %p0 = bf16[32,64] parameter(0)
  %p1 = bf16[64,64] parameter(1)
  %p2 = f32[64] parameter(2)
  %p3 = f32[32,64] parameter(3)
  %dot = f32[32,64] dot(%p0, %p1), lhs_contracting={1}, rhs_contracting={0}
  %b = f32[32,64] broadcast(%p2), dimensions={1}
  %x = f32[32,64] add(%dot, %b)
  ROOT %r = f32[32,64] add(%p3, %x)
}

ENTRY %main {
  %x = bf16[32,64] parameter(0)
  %w = bf16[64,64] parameter(1)
  %bias = f32[64] parameter(2)
  %res = f32[32,64] parameter(3)
  ROOT %f = f32[32,64] fusion(%x, %w, %bias, %res), kind=gemm, epilogue={d=0, bias=2, residual=3}, calls=%fused.proj
}
)");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->epilogue, GemmEpilogue::kBias);
  EXPECT_EQ(p->c_operand, 3);
  EXPECT_EQ(p->beta, 1.0);
}

TEST(GemmPlanTest, BiasGradientAndTransposedResult) {
  // dW[64,192] = x^T dy with db = column sum of dy: dy is cuBLASLt's A -> BGRADA.
  StatusOr<GemmPlan> p = PlanRoot(R"(module m
%fused.dw {
  %p0 = bf16[32,64] parameter(0)
  %p1 = bf16[32,192] parameter(1)
  %dot = f32[64,192] dot(%p0, %p1), lhs_contracting={0}, rhs_contracting={0}
  %db = f32[192] reduce(%p1), dimensions={0}, kind=sum
  ROOT %t = (f32[64,192], f32[192]) tuple(%dot, %db)
}

ENTRY %main {
  %x = bf16[32,64] parameter(0)
  %dy = bf16[32,192] parameter(1)
  %f = (f32[64,192], f32[192]) fusion(%x, %dy), kind=gemm, epilogue={d=0, bias_grad_out=1, bias_grad_of=1}, calls=%fused.dw
  ROOT %g = f32[64,192] get-tuple-element(%f), index=0
}
)");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->epilogue, GemmEpilogue::kBGradA);
  EXPECT_EQ(p->bias_grad_output, 1);
  EXPECT_EQ(p->a_operand, 1);

  // A transposed result swaps the roles: D^T[192,64] = dy^T x.
  p = PlanRoot(R"(module m
%fused.dwt {
  %p0 = bf16[32,64] parameter(0)
  %p1 = bf16[32,192] parameter(1)
  %dot = bf16[64,192] dot(%p0, %p1), lhs_contracting={0}, rhs_contracting={0}
  ROOT %t = bf16[192,64] transpose(%dot), dimensions={1,0}
}

ENTRY %main {
  %x = bf16[32,64] parameter(0)
  %dy = bf16[32,192] parameter(1)
  ROOT %f = bf16[192,64] fusion(%x, %dy), kind=gemm, epilogue={d=0, transposed=true}, calls=%fused.dwt
}
)");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->a_operand, 0);
  EXPECT_EQ(p->b_operand, 1);
  EXPECT_EQ(p->m, 64);
  EXPECT_EQ(p->n, 192);
  EXPECT_EQ(p->d, (GemmLayout{GemmDType::kBF16, 64, 192, 64, 1, 0}));
}

TEST(GemmPlanTest, BiasGradientFromTheWideCopyOfTheOperand) {
  // db sums the f32 gradient; the gemm reads its bf16 copy, made by the same
  // producer fusion: cuBLASLt's BGRADA sums the bf16 copy (noted).
  StatusOr<std::unique_ptr<ir::Module>> m = ParseVerified(R"(module m
%fused.producer {
  %q0 = f32[32,192] parameter(0)
  %n = f32[32,192] neg(%q0)
  %nb = bf16[32,192] convert(%n)
  ROOT %o = (f32[32,192], bf16[32,192]) tuple(%n, %nb)
}

%fused.dw {
  %p0 = f32[32,192] parameter(0)
  %p1 = bf16[32,64] parameter(1)
  %p2 = bf16[32,192] parameter(2)
  %db = f32[192] reduce(%p0), dimensions={0}, kind=sum
  %dot = f32[64,192] dot(%p1, %p2), lhs_contracting={0}, rhs_contracting={0}
  ROOT %t = (f32[192], f32[64,192]) tuple(%db, %dot)
}

ENTRY %main {
  %g = f32[32,192] parameter(0)
  %x = bf16[32,64] parameter(1)
  %pf = (f32[32,192], bf16[32,192]) fusion(%g), kind=loop, calls=%fused.producer
  %wide = f32[32,192] get-tuple-element(%pf), index=0
  %narrow = bf16[32,192] get-tuple-element(%pf), index=1
  ROOT %f = (f32[192], f32[64,192]) fusion(%wide, %x, %narrow), kind=gemm, epilogue={d=1, bias_grad_out=0, bias_grad_of=2}, calls=%fused.dw
}
)");
  ASSERT_TRUE(m.ok()) << m.status().message();
  StatusOr<GemmPlan> p = PlanGemm(*(*m)->entry()->root());
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->epilogue, GemmEpilogue::kBGradA);
  EXPECT_EQ(p->bias_grad_output, 0);
  EXPECT_EQ(p->d_output, 1);
  EXPECT_EQ(p->a_operand, 2);
  ASSERT_EQ(p->notes.size(), 1u);
}

// `text` with every "$NAME" replaced by vars["NAME"].
std::string Fill(std::string text, const std::map<std::string, std::string>& vars) {
  for (const auto& [name, value] : vars) {
    const std::string key = "$" + name;
    for (size_t at; (at = text.find(key)) != std::string::npos;) {
      text.replace(at, key.size(), value);
    }
  }
  return text;
}

// The frontend's GELU of %xf ending in %g, with shape $S (f32[...]).
constexpr const char* kGeluBody = R"(
  %c0 = f32[] constant(0.044715)
  %c1 = f32[] constant(0.7978846)
  %c2 = f32[] constant(1)
  %c3 = f32[] constant(0.5)
  %b0 = $S broadcast(%c0), dimensions={}
  %b1 = $S broadcast(%c1), dimensions={}
  %b2 = $S broadcast(%c2), dimensions={}
  %b3 = $S broadcast(%c3), dimensions={}
  %m = $S mul(%xf, %xf)
  %m1 = $S mul(%m, %xf)
  %m2 = $S mul(%b0, %m1)
  %a = $S add(%xf, %m2)
  %m3 = $S mul(%b1, %a)
  %t = $S tanh(%m3)
  %a1 = $S add(%b2, %t)
  %m4 = $S mul(%b3, %xf)
)";

// Autodiff's GELU backward: %dy * GELU'(%xf), recomputing the GELU's
// intermediates from %xf as remat does, ending in %s3.
constexpr const char* kGeluGradBody = R"(
  %g5 = $S mul(%dy, %a1)
  %g4 = $S mul(%g5, %b3)
  %g51 = $S mul(%dy, %m4)
  %tt = $S mul(%t, %t)
  %t3 = $S sub(%b2, %tt)
  %t4 = $S mul(%g51, %t3)
  %g3 = $S mul(%t4, %b1)
  %s0 = $S add(%g4, %g3)
  %g2 = $S mul(%g3, %b0)
  %g11 = $S mul(%g2, %m)
  %s1 = $S add(%s0, %g11)
  %g1 = $S mul(%g2, %xf)
  %g0 = $S mul(%g1, %xf)
  %s2 = $S add(%s1, %g0)
  %s3 = $S add(%s2, %g0)
)";

// Note [GELU epilogues]: c_fc as the bf16 train step has it: a bf16 bias
// widened in the epilogue, the bf16 pre-activation stored (aux) and the
// GELU of its widened copy. $W: the width.
std::string FcWithAux(int n) {
  constexpr const char* kText = R"(module m
%fused.fc {
  %p0 = bf16[16,64] parameter(0)
  %p1 = bf16[64,$W] parameter(1)
  %p2 = bf16[$W] parameter(2)
  %dot = $S dot(%p0, %p1), lhs_contracting={1}, rhs_contracting={0}
  %p2f = f32[$W] convert(%p2)
  %bb = $S broadcast(%p2f), dimensions={1}
  %pre = $S add(%dot, %bb)
  %aux = bf16[16,$W] convert(%pre)
  %xf = $S convert(%aux)$GELU
  %g = $S mul(%m4, %a1)
  %gb = bf16[16,$W] convert(%g)
  ROOT %o = (bf16[16,$W], bf16[16,$W]) tuple(%aux, %gb)
}

ENTRY %main {
  %x = bf16[16,64] parameter(0)
  %w = bf16[64,$W] parameter(1)
  %b = bf16[$W] parameter(2)
  %f = (bf16[16,$W], bf16[16,$W]) fusion(%x, %w, %b), kind=gemm, epilogue={d=1, bias=2, activation=gelu, aux_out=0}, calls=%fused.fc
  ROOT %g = bf16[16,$W] get-tuple-element(%f), index=1
}
)";
  return Fill(Fill(kText, {{"GELU", kGeluBody}}), {{"S", "f32[16,$W]"}, {"W", std::to_string(n)}});
}

TEST(GemmPlanTest, GeluAuxBiasWritesTheBf16PreActivation) {
  StatusOr<GemmPlan> p = PlanRoot(FcWithAux(256));
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->epilogue, GemmEpilogue::kGeluAuxBias);
  EXPECT_EQ(p->bias_operand, 2);
  EXPECT_EQ(p->bias_dtype, GemmDType::kBF16);
  EXPECT_EQ(p->aux_output, 0);
  EXPECT_EQ(p->d_output, 1);
  EXPECT_EQ(p->aux_ld, 256);  // D's m: aux is laid out as D
  EXPECT_EQ(p->d, (GemmLayout{GemmDType::kBF16, 256, 16, 256, 1, 0}));
  // cuBLASLt applies the GELU to the f32 sum, the IR to its bf16 copy.
  ASSERT_EQ(p->notes.size(), 1u);
  EXPECT_EQ(p->notes[0],
            "bf16 rounding of %aux before the GELU is skipped (cuBLASLt applies it to the f32 "
            "value)");
}

TEST(GemmPlanTest, GeluAuxNeedsALeadingDimensionDivisibleBy8) {
  // cublasLt.h, EPILOGUE_AUX_LD: "divisible by 8".
  StatusOr<GemmPlan> p = PlanRoot(FcWithAux(36));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(
      p.status().message(),
      "%f: GELU aux leading dimension 36 is not a multiple of 8 (cuBLASLt's EPILOGUE_AUX_LD)");
}

// The gradient of c_proj's input times GELU'(aux): dX = dY W^T in bf16, then
// the GELU backward reading the pre-activation (operand 2, of `aux_dtype`).
std::string DgeluFusion(const std::string& aux_dtype = "bf16") {
  constexpr const char* kText = R"(module m
%fused.dx {
  %p0 = bf16[2,8,32] parameter(0)
  %p1 = bf16[128,32] parameter(1)
  %p2 = $AUX[2,8,128] parameter(2)
  %dot = bf16[2,8,128] dot(%p0, %p1), lhs_contracting={2}, rhs_contracting={1}
  %dy = $S convert(%dot)
  %xf = $S convert(%p2)$GELU$GRAD
  ROOT %out = bf16[2,8,128] convert(%s3)
}

ENTRY %main {
  %dy = bf16[2,8,32] parameter(0)
  %w = bf16[128,32] parameter(1)
  %aux = $AUX[2,8,128] parameter(2)
  ROOT %f = bf16[2,8,128] fusion(%dy, %w, %aux), kind=gemm, epilogue={d=0, activation=gelu_grad, aux_in=2}, calls=%fused.dx
}
)";
  return Fill(Fill(kText, {{"GELU", kGeluBody}, {"GRAD", kGeluGradBody}}),
              {{"S", "f32[2,8,128]"}, {"AUX", aux_dtype}});
}

TEST(GemmPlanTest, DgeluReadsTheAuxOperand) {
  StatusOr<GemmPlan> p = PlanRoot(DgeluFusion());
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->epilogue, GemmEpilogue::kDGelu);
  EXPECT_EQ(p->aux_operand, 2);
  EXPECT_EQ(p->aux_output, -1);
  EXPECT_EQ(p->aux_ld, 128);
  EXPECT_EQ(p->bias_operand, -1);
  EXPECT_EQ(p->m, 128);
  EXPECT_EQ(p->n, 16);
  EXPECT_EQ(p->k, 32);
  EXPECT_EQ(p->d, (GemmLayout{GemmDType::kBF16, 128, 16, 128, 1, 0}));
  ASSERT_EQ(p->notes.size(), 1u);
  EXPECT_EQ(p->notes[0], "bf16 rounding of %dot is skipped (cuBLASLt keeps f32)");
}

TEST(GemmPlanTest, DgeluAuxOfAnotherTypeIsRefused) {
  // cuBLASLt's aux has D's type.
  StatusOr<GemmPlan> p = PlanRoot(DgeluFusion("f16"));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "%f: GELU aux %p2 is f16[2,8,128], the result bf16[2,8,128] (cuBLASLt's aux is laid "
            "out as D)");
}

TEST(GemmPlanTest, BiasGradientOfABf16BiasCopySkipsTheRoundTrip) {
  // db = f32(bf16(sum(f32(dy)))): the gradient of the bf16 copy of an f32
  // bias (Note [bf16 GELU epilogue]); cuBLASLt's BGRADA writes the f32 sum.
  StatusOr<GemmPlan> p = PlanRoot(R"(module m
%fused.dw {
  %p0 = bf16[32,192] parameter(0)
  %p1 = bf16[32,64] parameter(1)
  %w = f32[32,192] convert(%p0)
  %s = f32[192] reduce(%w), dimensions={0}, kind=sum
  %n = bf16[192] convert(%s)
  %db = f32[192] convert(%n)
  %dot = bf16[64,192] dot(%p1, %p0), lhs_contracting={0}, rhs_contracting={0}
  %dw = f32[64,192] convert(%dot)
  ROOT %t = (f32[192], f32[64,192]) tuple(%db, %dw)
}

ENTRY %main {
  %dy = bf16[32,192] parameter(0)
  %x = bf16[32,64] parameter(1)
  %f = (f32[192], f32[64,192]) fusion(%dy, %x), kind=gemm, epilogue={d=1, bias_grad_out=0, bias_grad_of=0}, calls=%fused.dw
  ROOT %g = f32[192] get-tuple-element(%f), index=0
}
)");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->epilogue, GemmEpilogue::kBGradA);
  EXPECT_EQ(p->bias_grad_output, 0);
  EXPECT_EQ(p->bias_dtype, GemmDType::kF32);
  EXPECT_EQ(p->a_operand, 0);
  EXPECT_NE(std::find(p->notes.begin(), p->notes.end(),
                      "bf16 rounding of the bias gradient %n is skipped"),
            p->notes.end());
}

}  // namespace
}  // namespace gptc::artifact
