#include "passes/bf16_bias_gradients.h"

#include <gtest/gtest.h>

#include <string_view>

#include "compiler/ir/printer.h"
#include "tests/testing/pass_harness.h"

namespace gptc::passes {
namespace {

using ::gptc::testing::ParseOrDie;
using ::gptc::testing::RunPassAndCompare;

// Note [bf16 bias gradients]: the sum reads the widened bf16 copy, so the
// result moves by at most a bf16 rounding of each summand (random inputs in
// [-1, 1), 8 rows: 8 * 2^-9 relative to the largest).
std::unique_ptr<ir::Module> Rewritten(std::string_view text, bool changed = true) {
  auto module = ParseOrDie(text);
  EXPECT_NE(module, nullptr);
  if (module == nullptr) return nullptr;
  Bf16BiasGradients pass;
  std::unique_ptr<ir::Module> after;
  EXPECT_EQ(RunPassAndCompare(pass, *module, after, 3, changed ? 2e-2 : 0.0), changed);
  if (!changed) EXPECT_EQ(ir::PrintModule(*after), ir::PrintModule(*module));
  return after;
}

// A linear layer's backward as autodiff leaves it: the sum before the copy.
constexpr std::string_view kLinearBackward = R"(module m
ENTRY %main {
  %dy = f32[2,4,8] parameter(0)
  %x = bf16[2,4,16] parameter(1)
  %db = f32[8] reduce(%dy), dimensions={0,1}, kind=sum, meta="grad.fc"
  %dy.bf16 = bf16[2,4,8] convert(%dy), meta="grad.fc"
  %dw = bf16[16,8] dot(%x, %dy.bf16), lhs_contracting={0,1}, rhs_contracting={0,1}
  ROOT %out = (f32[8], bf16[16,8]) tuple(%db, %dw)
}
)";

TEST(Bf16BiasGradientsTest, TheSumReadsTheCopyTheDotReads) {
  auto m = Rewritten(kLinearBackward);
  ASSERT_NE(m, nullptr);
  const ir::Instruction* db = m->entry()->FindInstruction("db");
  ASSERT_NE(db, nullptr);
  const ir::Instruction* wide = db->operand(0);
  EXPECT_EQ(wide->opcode(), ir::Opcode::kConvert);
  EXPECT_EQ(wide->name(), "dy.bf16.f32");
  EXPECT_EQ(wide->shape().dtype(), ir::DType::kF32);
  EXPECT_EQ(wide->metadata(), "grad.fc");
  EXPECT_EQ(wide->operand(0)->name(), "dy.bf16");
  // The f32 gradient is read by the copy alone.
  EXPECT_EQ(m->entry()->FindInstruction("dy")->users().size(), 1u);
}

TEST(Bf16BiasGradientsTest, NoDotOfTheCopyOverThoseDimsNoChange) {
  // The dot contracts dim 2 of the copy, the sum dims 0 and 1.
  Rewritten(R"(module m
ENTRY %main {
  %dy = f32[2,4,8] parameter(0)
  %w = bf16[8,16] parameter(1)
  %db = f32[8] reduce(%dy), dimensions={0,1}, kind=sum
  %dy.bf16 = bf16[2,4,8] convert(%dy)
  %dx = bf16[2,4,16] dot(%dy.bf16, %w), lhs_contracting={2}, rhs_contracting={0}
  ROOT %out = (f32[8], bf16[2,4,16]) tuple(%db, %dx)
}
)",
            /*changed=*/false);
  // No bf16 copy at all (an f32 step).
  Rewritten(R"(module m
ENTRY %main {
  %dy = f32[2,4,8] parameter(0)
  %x = f32[2,4,16] parameter(1)
  %db = f32[8] reduce(%dy), dimensions={0,1}, kind=sum
  %dw = f32[16,8] dot(%x, %dy), lhs_contracting={0,1}, rhs_contracting={0,1}
  ROOT %out = (f32[8], f32[16,8]) tuple(%db, %dw)
}
)",
            /*changed=*/false);
  // A max, not a sum.
  Rewritten(R"(module m
ENTRY %main {
  %dy = f32[2,4,8] parameter(0)
  %x = bf16[2,4,16] parameter(1)
  %db = f32[8] reduce(%dy), dimensions={0,1}, kind=max
  %dy.bf16 = bf16[2,4,8] convert(%dy)
  %dw = bf16[16,8] dot(%x, %dy.bf16), lhs_contracting={0,1}, rhs_contracting={0,1}
  ROOT %out = (f32[8], bf16[16,8]) tuple(%db, %dw)
}
)",
            /*changed=*/false);
}

TEST(Bf16BiasGradientsTest, RunningItAgainChangesNothing) {
  auto m = Rewritten(kLinearBackward);
  ASSERT_NE(m, nullptr);
  Bf16BiasGradients again;
  StatusOr<bool> changed = again.Run(*m);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
}

}  // namespace
}  // namespace gptc::passes
