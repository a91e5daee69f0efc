// Gemm epilogue records (compiler/analysis/gemm_epilogue.h): what a gemm
// fusion computes after its dot, described in the fusion's own numbers, and
// the roundings cuBLASLt skips.
#include "compiler/analysis/gemm_epilogue.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "compiler/ir/computation.h"
#include "compiler/ir/module.h"
#include "compiler/ir/parser.h"

namespace gptc::analysis {
namespace {

using ir::GemmActivation;
using ir::GemmEpilogue;

// The entry root of `text` (a fusion, or a get-tuple-element of one).
const ir::Instruction& Root(const ir::Module& m) {
  const ir::Instruction* root = m.entry()->root();
  if (root->opcode() == ir::Opcode::kGetTupleElement) root = root->operand(0);
  return *root;
}

std::unique_ptr<ir::Module> Parse(const std::string& text) {
  // Unverified: a gemm fusion is only valid once it carries its record.
  StatusOr<std::unique_ptr<ir::Module>> m = ir::ParseModule(text);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(m).value() : nullptr;
}

TEST(GemmEpilogueTest, BiasConvertsAndResidualInTheFusionsNumbers) {
  // bf16 dot, widened; + f32 bias (a widened bf16 operand); + residual.
  std::unique_ptr<ir::Module> m = Parse(R"(module m
%fused {
  %r = f32[4,16] parameter(0)
  %x = bf16[4,8] parameter(1)
  %b = bf16[16] parameter(2)
  %w = bf16[8,16] parameter(3)
  %d = bf16[4,16] dot(%x, %w), lhs_contracting={1}, rhs_contracting={0}
  %dw = f32[4,16] convert(%d)
  %bw = f32[16] convert(%b)
  %bb = f32[4,16] broadcast(%bw), dimensions={1}
  %y = f32[4,16] add(%dw, %bb)
  ROOT %z = f32[4,16] add(%y, %r)
}
ENTRY %main {
  %r = f32[4,16] parameter(0)
  %x = bf16[4,8] parameter(1)
  %b = bf16[16] parameter(2)
  %w = bf16[8,16] parameter(3)
  ROOT %f = f32[4,16] fusion(%r, %x, %b, %w), kind=gemm, calls=%fused
}
)");
  ASSERT_NE(m, nullptr);
  StatusOr<GemmEpilogue> e = DescribeGemmEpilogue(Root(*m));
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(*e, (GemmEpilogue{.d = 0, .bias = 2, .residual = 0}));
  EXPECT_EQ(ir::GemmEpilogueToString(*e), "{d=0, bias=2, residual=0}");
  // The dot's bf16 rounding is not cuBLASLt's (it widens in f32); the
  // bias's widening of an operand rounds nothing.
  EXPECT_EQ(SkippedRoundings(Root(*m), *e),
            std::vector<std::string>{"bf16 rounding of %d is skipped (cuBLASLt keeps f32)"});
}

TEST(GemmEpilogueTest, BiasGradientRoundTripAndTransposedResult) {
  // dW^T = (x^T dy)^T and db = sum(dy) rounded to bf16 and back.
  std::unique_ptr<ir::Module> m = Parse(R"(module m
%fused {
  %x = f32[32,64] parameter(0)
  %dy = f32[32,192] parameter(1)
  %dw = f32[64,192] dot(%x, %dy), lhs_contracting={0}, rhs_contracting={0}
  %t = f32[192,64] transpose(%dw), dimensions={1,0}
  %db = f32[192] reduce(%dy), dimensions={0}, kind=sum
  %dbn = bf16[192] convert(%db)
  %dbw = f32[192] convert(%dbn)
  ROOT %o = (f32[192], f32[192,64]) tuple(%dbw, %t)
}
ENTRY %main {
  %x = f32[32,64] parameter(0)
  %dy = f32[32,192] parameter(1)
  %f = (f32[192], f32[192,64]) fusion(%x, %dy), kind=gemm, calls=%fused
  ROOT %g = f32[192] get-tuple-element(%f), index=0
}
)");
  ASSERT_NE(m, nullptr);
  StatusOr<GemmEpilogue> e = DescribeGemmEpilogue(Root(*m));
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(*e, (GemmEpilogue{.d = 1, .bias_grad_out = 0, .bias_grad_of = 1, .transposed = true}));
  EXPECT_EQ(SkippedRoundings(Root(*m), *e),
            std::vector<std::string>{"bf16 rounding of the bias gradient %dbn is skipped"});
}

TEST(GemmEpilogueTest, WhatNoRecordExpressesIsRefusedByName) {
  std::unique_ptr<ir::Module> m = Parse(R"(module m
%fused {
  %x = f32[4,8] parameter(0)
  %w = f32[8,16] parameter(1)
  %d = f32[4,16] dot(%x, %w), lhs_contracting={1}, rhs_contracting={0}
  ROOT %n = f32[4,16] neg(%d)
}
%fused.two {
  %x = f32[4,8] parameter(0)
  %w = f32[8,16] parameter(1)
  %d = f32[4,16] dot(%x, %w), lhs_contracting={1}, rhs_contracting={0}
  %m = f32[16] reduce(%d), dimensions={0}, kind=max
  ROOT %o = (f32[4,16], f32[16]) tuple(%d, %m)
}
ENTRY %main {
  %x = f32[4,8] parameter(0)
  %w = f32[8,16] parameter(1)
  %f = f32[4,16] fusion(%x, %w), kind=gemm, calls=%fused
  %f2 = (f32[4,16], f32[16]) fusion(%x, %w), kind=gemm, calls=%fused.two
  ROOT %t = (f32[4,16], (f32[4,16], f32[16])) tuple(%f, %f2)
}
)");
  ASSERT_NE(m, nullptr);
  const ir::Computation& entry = *m->entry();
  StatusOr<GemmEpilogue> e = DescribeGemmEpilogue(*entry.FindInstruction("f"));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), "%f: %n (neg) is not a cuBLASLt epilogue");
  e = DescribeGemmEpilogue(*entry.FindInstruction("f2"));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), "%f2: output 1 (%m) is not a cuBLASLt epilogue output");
}

}  // namespace
}  // namespace gptc::analysis
