// Row reductions that do less than a pass over the row: a one-hot sum read
// where its element is (Note [one-hot reduces] in row_reduction_plan.h) and
// the compares of an iota with a constant left to the chunks past their
// bound (Note [bounded columns]), as the softmax cross-entropy has them: the
// plans, and the kernels on the emulated device against the evaluator, with
// picked columns inside, past the bound and outside the row.
#include <gtest/gtest.h>

#include "compiler/codegen/row_reduction_plan.h"
#include "tests/compiler/codegen/codegen_test_util.h"
#include "tests/compiler/codegen/emu_kernel_runner.h"

namespace gptc::codegen {
namespace {

constexpr std::string_view kPicksModule = R"(module picks_test

%block_picks {
  %x = bf16[4,2000] parameter(0)
  %t = s32[4] parameter(1)
  %xf = f32[4,2000] convert(%x)
  %i = s32[4,2000] iota(), iota_dimension=1
  %k = s32[] constant(1990)
  %kb = s32[4,2000] broadcast(%k), dimensions={}
  %live = pred[4,2000] compare(%i, %kb), direction=LT
  %k2 = s32[] constant(1995)
  %k2b = s32[4,2000] broadcast(%k2), dimensions={}
  %live2 = pred[4,2000] compare(%k2b, %i), direction=GE
  %ninf = f32[] constant(-inf)
  %nb = f32[4,2000] broadcast(%ninf), dimensions={}
  %xl = f32[4,2000] select(%live2, %xf, %nb)
  %xm = f32[4,2000] select(%live, %xl, %nb)
  %m = f32[4] reduce(%xm), dimensions={1}, kind=max
  %mb = f32[4,2000] broadcast(%m), dimensions={0}
  %d = f32[4,2000] sub(%xm, %mb)
  %e = f32[4,2000] exp(%d)
  %s = f32[4] reduce(%e), dimensions={1}, kind=sum
  %tb = s32[4,2000] broadcast(%t), dimensions={0}
  %hit = pred[4,2000] compare(%tb, %i), direction=EQ
  %z = f32[] constant(0)
  %zb = f32[4,2000] broadcast(%z), dimensions={}
  %pick = f32[4,2000] select(%hit, %xm, %zb)
  %p = f32[4] reduce(%pick), dimensions={1}, kind=sum
  %miss = f32[4,2000] select(%hit, %zb, %xf)
  %q = f32[4] reduce(%miss), dimensions={1}, kind=sum
  %sb = f32[4,2000] broadcast(%s), dimensions={0}
  %y = f32[4,2000] div(%e, %sb)
  ROOT %out = (f32[4,2000], f32[4], f32[4], f32[4]) tuple(%y, %p, %q, %m)
}

%warp_picks {
  %x = f32[16,64] parameter(0)
  %t = s32[16] parameter(1)
  %i = s32[16,64] iota(), iota_dimension=1
  %tb = s32[16,64] broadcast(%t), dimensions={0}
  %hit = pred[16,64] compare(%i, %tb), direction=EQ
  %z = f32[] constant(0)
  %zb = f32[16,64] broadcast(%z), dimensions={}
  %pick = f32[16,64] select(%hit, %x, %zb)
  %p = f32[16] reduce(%pick), dimensions={1}, kind=sum
  %m = f32[16] reduce(%x), dimensions={1}, kind=max
  %pb = f32[16,64] broadcast(%p), dimensions={0}
  %y = f32[16,64] sub(%x, %pb)
  ROOT %out = (f32[16,64], f32[16], f32[16]) tuple(%y, %p, %m)
}

ENTRY %main {
  %bx = bf16[4,2000] parameter(0)
  %bt = s32[4] parameter(1)
  %wx = f32[16,64] parameter(2)
  %wt = s32[16] parameter(3)
  %bp = (f32[4,2000], f32[4], f32[4], f32[4]) fusion(%bx, %bt), kind=reduction, calls=%block_picks
  %wp = (f32[16,64], f32[16], f32[16]) fusion(%wx, %wt), kind=reduction, calls=%warp_picks
  ROOT %r = ((f32[4,2000], f32[4], f32[4], f32[4]), (f32[16,64], f32[16], f32[16])) tuple(%bp, %wp)
}
)";

// p sums one element a row (the compare's operands in either order); q sums
// all but one, and stays a pass. live and live2 bound the columns at 1990
// and 1996; the one-hot compare is no bound.
TEST(RowReductionPicksTest, PlanPicksOneHotSumsAndBoundsTheColumns) {
  auto module = Parse(kPicksModule);
  ASSERT_NE(module, nullptr);
  StatusOr<RowReductionPlan> plan =
      PlanRowReduction(*module->entry()->FindInstruction("bp"), /*mixed=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const ir::Computation& fused = *module->FindComputation("block_picks");
  ASSERT_EQ(plan->one_hot.size(), 1u);
  const auto& pick = plan->one_hot.at(fused.FindInstruction("p"));
  EXPECT_EQ(pick.value, fused.FindInstruction("xm"));
  EXPECT_EQ(pick.column, fused.FindInstruction("t"));
  EXPECT_FALSE(plan->one_hot.contains(fused.FindInstruction("q")));
  EXPECT_EQ(Names(plan->bounded), (std::vector<std::string>{"live", "live2"}));
  EXPECT_EQ(plan->column_limit, 1990);
  EXPECT_EQ(plan->threads_per_row, 256);
  EXPECT_EQ(plan->width, 4);
  // The batches: m; then s, which needs m, with p and q, whose partials the
  // eight warps combine in shared memory.
  ASSERT_EQ(plan->batches.size(), 2u);
  EXPECT_EQ(plan->shared_floats, 3 * 8);

  StatusOr<RowReductionPlan> warp =
      PlanRowReduction(*module->entry()->FindInstruction("wp"), /*mixed=*/false);
  ASSERT_TRUE(warp.ok()) << warp.status().message();
  EXPECT_EQ(warp->one_hot.size(), 1u);
  EXPECT_TRUE(warp->bounded.empty());
  EXPECT_EQ(warp->column_limit, 64);
  EXPECT_EQ(warp->unrolled_columns, 2);
}

// Columns inside the row, past the bound (-inf there), and outside it on
// either side (0); the outputs as the evaluator computes them.
TEST(RowReductionPicksTest, KernelsMatchTheEvaluator) {
  auto module = Parse(kPicksModule);
  ASSERT_NE(module, nullptr);
  EmuKernelRunner runner(*module);
  std::mt19937_64 rng(7);
  const ir::Instruction& bp = *module->entry()->FindInstruction("bp");
  eval::Literal bt{.shape = bp.operand(1)->shape(), .values = {5, -1, 1993, 2000}};
  runner.ExpectMatchesEvaluatorOn("bp", {eval::Literal::Random(bp.operand(0)->shape(), rng), bt});

  const ir::Instruction& wp = *module->entry()->FindInstruction("wp");
  eval::Literal wt{.shape = wp.operand(1)->shape()};
  for (int64_t row = 0; row < 16; ++row) wt.values.push_back(static_cast<double>(row * 5 - 8));
  runner.ExpectMatchesEvaluatorOn("wp", {eval::Literal::Random(wp.operand(0)->shape(), rng), wt});
}

}  // namespace
}  // namespace gptc::codegen
