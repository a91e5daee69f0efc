// Dot layouts -> cuBLASLt descriptors (compiler/artifact/gemm_plan.h).
#include "compiler/artifact/gemm_plan.h"

#include <gtest/gtest.h>

#include "compiler/ir/computation.h"
#include "compiler/ir/module.h"
#include "compiler/ir/parser.h"

namespace gptc::artifact {
namespace {

// The plan of the entry root of `text` (a gemm fusion or a dot).
StatusOr<GemmPlan> PlanRoot(const std::string& text) {
  StatusOr<std::unique_ptr<ir::Module>> m = ir::ParseAndVerifyModule(text);
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
  EXPECT_EQ(p->transa, "CUBLAS_OP_N");
  EXPECT_EQ(p->transb, "CUBLAS_OP_N");
  EXPECT_EQ(p->a_operand, 1);
  EXPECT_EQ(p->b_operand, 0);
  EXPECT_EQ(p->a, (MatrixLayout{"CUDA_R_16BF", 192, 64, 192, 1, 0}));
  EXPECT_EQ(p->b, (MatrixLayout{"CUDA_R_16BF", 64, 32, 64, 1, 0}));
  EXPECT_EQ(p->d, (MatrixLayout{"CUDA_R_32F", 192, 32, 192, 1, 0}));
  EXPECT_EQ(p->epilogue, "CUBLASLT_EPILOGUE_DEFAULT");
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
  EXPECT_EQ(p->transa, "CUBLAS_OP_T");
  EXPECT_EQ(p->transb, "CUBLAS_OP_N");
  EXPECT_EQ(p->a, (MatrixLayout{"CUDA_R_16BF", 64, 100, 64, 1, 0}));
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
  EXPECT_EQ(p->transa, "CUBLAS_OP_N");
  EXPECT_EQ(p->transb, "CUBLAS_OP_T");
  EXPECT_EQ(p->k, 32);
  EXPECT_EQ(p->b, (MatrixLayout{"CUDA_R_16BF", 64, 32, 64, 1, 0}));
  EXPECT_EQ(p->d, (MatrixLayout{"CUDA_R_16BF", 192, 64, 192, 1, 0}));
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
  EXPECT_EQ(p->transa, "CUBLAS_OP_T");
  EXPECT_EQ(p->a, (MatrixLayout{"CUDA_R_16BF", 32, 16, 32, 8, 512}));
  EXPECT_EQ(p->d, (MatrixLayout{"CUDA_R_32F", 16, 16, 16, 8, 256}));
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
  ROOT %f = bf16[32,256] fusion(%x, %w, %bias), kind=gemm, calls=%fused.fc
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
  ROOT %f = bf16[32,256] fusion(%x, %w, %bias), kind=gemm, calls=%fused.fc
}
)");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->epilogue, "CUBLASLT_EPILOGUE_GELU_BIAS");
  EXPECT_EQ(p->bias_operand, 2);
  EXPECT_EQ(p->bias_dtype, "CUDA_R_16BF");
  EXPECT_EQ(p->d.dtype, "CUDA_R_16BF");

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
  ROOT %f = f32[32,64] fusion(%x, %w, %bias, %res), kind=gemm, calls=%fused.proj
}
)");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->epilogue, "CUBLASLT_EPILOGUE_BIAS");
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
  %f = (f32[64,192], f32[192]) fusion(%x, %dy), kind=gemm, calls=%fused.dw
  ROOT %g = f32[64,192] get-tuple-element(%f), index=0
}
)");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->epilogue, "CUBLASLT_EPILOGUE_BGRADA");
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
  ROOT %f = bf16[192,64] fusion(%x, %dy), kind=gemm, calls=%fused.dwt
}
)");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->a_operand, 0);
  EXPECT_EQ(p->b_operand, 1);
  EXPECT_EQ(p->m, 64);
  EXPECT_EQ(p->n, 192);
  EXPECT_EQ(p->d, (MatrixLayout{"CUDA_R_16BF", 64, 192, 64, 1, 0}));
}

TEST(GemmPlanTest, BiasGradientFromTheWideCopyOfTheOperand) {
  // db sums the f32 gradient; the gemm reads its bf16 copy, made by the same
  // producer fusion: cuBLASLt's BGRADA sums the bf16 copy (noted).
  StatusOr<std::unique_ptr<ir::Module>> m = ir::ParseAndVerifyModule(R"(module m
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
  ROOT %f = (f32[192], f32[64,192]) fusion(%wide, %x, %narrow), kind=gemm, calls=%fused.dw
}
)");
  ASSERT_TRUE(m.ok()) << m.status().message();
  StatusOr<GemmPlan> p = PlanGemm(*(*m)->entry()->root());
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->epilogue, "CUBLASLT_EPILOGUE_BGRADA");
  EXPECT_EQ(p->bias_grad_output, 0);
  EXPECT_EQ(p->d_output, 1);
  EXPECT_EQ(p->a_operand, 2);
  ASSERT_EQ(p->notes.size(), 1u);
}

}  // namespace
}  // namespace gptc::artifact
