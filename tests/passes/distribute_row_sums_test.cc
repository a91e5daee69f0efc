#include "passes/distribute_row_sums.h"

#include <gtest/gtest.h>

#include <string_view>

#include "compiler/ir/printer.h"
#include "tests/testing/pass_harness.h"

namespace gptc::passes {
namespace {

using ::gptc::testing::ParseOrDie;
using ::gptc::testing::RunPassAndCompare;

// Note [distributed row sums]: the same sums in another order (random inputs
// in [-1, 1), rows of 16).
std::unique_ptr<ir::Module> Rewritten(std::string_view text, bool changed = true) {
  auto module = ParseOrDie(text);
  EXPECT_NE(module, nullptr);
  if (module == nullptr) return nullptr;
  DistributeRowSums pass;
  std::unique_ptr<ir::Module> after;
  EXPECT_EQ(RunPassAndCompare(pass, *module, after, 3, changed ? 1e-4 : 0.0), changed);
  if (!changed) EXPECT_EQ(ir::PrintModule(*after), ir::PrintModule(*module));
  return after;
}

// Autodiff's layer-norm backward, reduced to its two row sums: %s2 reads
// %c, computed from %s1, through a broadcast.
constexpr std::string_view kLayerNormBackward = R"(module m
ENTRY %main {
  %g = f32[2,3,16] parameter(0)
  %xc = f32[2,3,16] parameter(1)
  %rstd = f32[2,3] parameter(2)
  %gxc = f32[2,3,16] mul(%g, %xc)
  %s1 = f32[2,3] reduce(%gxc), dimensions={2}, kind=sum, meta="grad.ln"
  %c = f32[2,3] mul(%s1, %rstd)
  %rb = f32[2,3,16] broadcast(%rstd), dimensions={0,1}
  %cb = f32[2,3,16] broadcast(%c), dimensions={0,1}
  %m = f32[2,3,16] mul(%g, %rb)
  %n = f32[2,3,16] mul(%cb, %xc)
  %a = f32[2,3,16] add(%m, %n)
  %a2 = f32[2,3,16] add(%a, %n)
  %neg = f32[2,3,16] neg(%a2)
  %s2 = f32[2,3] reduce(%neg), dimensions={2}, kind=sum, meta="grad.ln"
  ROOT %out = (f32[2,3], f32[2,3], f32[2,3,16]) tuple(%s1, %s2, %a2)
}
)";

TEST(DistributeRowSumsTest, TheSecondSumNoLongerReadsTheFirst) {
  auto m = Rewritten(kLayerNormBackward);
  ASSERT_NE(m, nullptr);
  const ir::Instruction* root = m->entry()->root();
  const ir::Instruction* s2 = root->operand(1);
  EXPECT_NE(s2->name(), "s2");
  EXPECT_EQ(s2->metadata(), "grad.ln");
  // It reads %s1 only through %c; its own sums are over %g and %xc.
  int sums = 0;
  std::vector<const ir::Instruction*> work{s2};
  while (!work.empty()) {
    const ir::Instruction* x = work.back();
    work.pop_back();
    if (x->opcode() == ir::Opcode::kReduce) {
      ++sums;
      const std::string& summand = x->operand(0)->name();
      EXPECT_TRUE(summand == "g" || summand == "xc" || (x->name() == "s1" && summand == "gxc"))
          << summand;
      continue;
    }
    for (const ir::Instruction* o : x->operands()) work.push_back(o);
  }
  EXPECT_EQ(sums, 3);  // %s1 (through %c), Σg and Σxc
}

// The layer norm's own form: %xc = x − mean(x), whose row sum is zero, so
// the split keeps Σg alone.
TEST(DistributeRowSumsTest, ASumOfTheCenteredInputIsDropped) {
  auto m = Rewritten(R"(module m
ENTRY %main {
  %g = f32[2,3,16] parameter(0)
  %x = f32[2,3,16] parameter(1)
  %rstd = f32[2,3] parameter(2)
  %sx = f32[2,3] reduce(%x), dimensions={2}, kind=sum
  %sixteen = f32[] constant(16)
  %n = f32[2,3] broadcast(%sixteen), dimensions={}
  %mean = f32[2,3] div(%sx, %n)
  %mb = f32[2,3,16] broadcast(%mean), dimensions={0,1}
  %xc = f32[2,3,16] sub(%x, %mb)
  %gxc = f32[2,3,16] mul(%g, %xc)
  %s1 = f32[2,3] reduce(%gxc), dimensions={2}, kind=sum
  %cb = f32[2,3,16] broadcast(%s1), dimensions={0,1}
  %rb = f32[2,3,16] broadcast(%rstd), dimensions={0,1}
  %m = f32[2,3,16] mul(%g, %rb)
  %k = f32[2,3,16] mul(%cb, %xc)
  %a = f32[2,3,16] add(%m, %k)
  %s2 = f32[2,3] reduce(%a), dimensions={2}, kind=sum
  ROOT %out = (f32[2,3], f32[2,3]) tuple(%s1, %s2)
}
)");
  ASSERT_NE(m, nullptr);
  const ir::Instruction* s2 = m->entry()->root()->operand(1);
  ASSERT_EQ(s2->opcode(), ir::Opcode::kMul);  // Σg · rstd
  EXPECT_EQ(s2->operand(0)->opcode(), ir::Opcode::kReduce);
  EXPECT_EQ(s2->operand(0)->operand(0)->name(), "g");
  EXPECT_EQ(s2->operand(1)->name(), "rstd");
}

TEST(DistributeRowSumsTest, ASumOfFactorsFromParametersIsLeftAlone) {
  // rstd is an input, not a sum: the second pass costs nothing here.
  Rewritten(R"(module m
ENTRY %main {
  %g = f32[2,3,16] parameter(0)
  %rstd = f32[2,3] parameter(1)
  %rb = f32[2,3,16] broadcast(%rstd), dimensions={0,1}
  %m = f32[2,3,16] mul(%g, %rb)
  %s = f32[2,3] reduce(%m), dimensions={2}, kind=sum
  ROOT %out = (f32[2,3]) tuple(%s)
}
)",
            /*changed=*/false);
}

TEST(DistributeRowSumsTest, ABroadcastAlongOtherDimsIsNotARowFactor) {
  // %cb is constant along dim 1, but the sum is over dim 2.
  Rewritten(R"(module m
ENTRY %main {
  %g = f32[2,3,16] parameter(0)
  %s1 = f32[2,16] reduce(%g), dimensions={1}, kind=sum
  %cb = f32[2,3,16] broadcast(%s1), dimensions={0,2}
  %m = f32[2,3,16] mul(%g, %cb)
  %s = f32[2,3] reduce(%m), dimensions={2}, kind=sum
  ROOT %out = (f32[2,3]) tuple(%s)
}
)",
            /*changed=*/false);
}

TEST(DistributeRowSumsTest, RunningItAgainChangesNothing) {
  auto m = Rewritten(kLayerNormBackward);
  ASSERT_NE(m, nullptr);
  DistributeRowSums again;
  StatusOr<bool> changed = again.Run(*m);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_FALSE(*changed);
}

}  // namespace
}  // namespace gptc::passes
