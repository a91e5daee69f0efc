// cuBLASLt's epilogue limits (Note [cuBLASLt epilogue limits] in
// compiler/analysis/gemm_epilogue.h): one table that the gemm rule and the
// gemm plan both ask. The records and the roundings they note are tested
// with the rule that writes them (tests/passes/gemm_fusion_test.cc).
#include "compiler/analysis/gemm_epilogue.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include "compiler/ir/computation.h"
#include "compiler/ir/module.h"
#include "compiler/ir/parser.h"

namespace gptc::analysis {
namespace {

using ir::DType;
using ir::Shape;

// A bf16 D of [16, 36] and matrices beside it, as parameters to point at.
std::unique_ptr<ir::Module> Matrices() {
  StatusOr<std::unique_ptr<ir::Module>> m = ir::ParseModule(R"(module m
ENTRY %main {
  %aux = bf16[16,36] parameter(0)
  %wide = f32[16,36] parameter(1)
  ROOT %t = (bf16[16,36], f32[16,36]) tuple(%aux, %wide)
}
)");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(m).value() : nullptr;
}

TEST(GemmEpilogueLimitsTest, EachRowNamesItsSourceAndItsBreach) {
  std::unique_ptr<ir::Module> m = Matrices();
  ASSERT_NE(m, nullptr);
  const ir::Instruction* aux = m->entry()->FindInstruction("aux");
  const ir::Instruction* wide = m->entry()->FindInstruction("wide");
  const Shape d(DType::kBF16, {16, 36});
  std::set<std::string_view> sources;
  for (const GemmEpilogueLimit& limit : GemmEpilogueLimits()) {
    EXPECT_TRUE(sources.insert(limit.source).second) << limit.source;
    // A D alone keeps every limit.
    EXPECT_FALSE(limit.check({.d = d, .d_ld = 36}).has_value()) << limit.source;
  }
  EXPECT_EQ(BrokenGemmEpilogueLimit({.d = d, .bias = DType::kF32}),
            "a f32 bias with a bf16 result (cuBLASLt's bias has the result's type)");
  EXPECT_FALSE(BrokenGemmEpilogueLimit({.d = d, .bias = DType::kBF16}).has_value());
  EXPECT_EQ(BrokenGemmEpilogueLimit({.d = d, .residual = DType::kF32}),
            "residual f32 and result bf16 differ in dtype (cuBLASLt needs C = D)");
  EXPECT_EQ(BrokenGemmEpilogueLimit({.d = d, .d_ld = 40, .aux = wide}),
            "GELU aux %wide is f32[16,36], the result bf16[16,36] (cuBLASLt's aux is laid out as "
            "D)");
  EXPECT_EQ(BrokenGemmEpilogueLimit({.d = d, .d_ld = 36, .aux = aux}),
            "GELU aux leading dimension 36 is not a multiple of 8 (cuBLASLt's EPILOGUE_AUX_LD)");
  EXPECT_FALSE(BrokenGemmEpilogueLimit({.d = d, .d_ld = 40, .aux = aux}).has_value());
  EXPECT_EQ(BrokenGemmEpilogueLimit({.d = d, .batch = 2, .bias_grad = true}),
            "batched bias gradient");
}

}  // namespace
}  // namespace gptc::analysis
