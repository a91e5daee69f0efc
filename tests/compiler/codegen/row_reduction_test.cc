// Row reductions that keep their rows: in shared memory in block mode (Note
// [row cache] in row_reduction_plan.h: which parameters, the launch's
// dynamic bytes), in registers in warp mode (Note [unrolled warp rows]), their
// plans (row_reduction_plan.h), and the kernels on the emulated device
// against the evaluator.
#include <gtest/gtest.h>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/row_reduction_plan.h"
#include "tests/compiler/codegen/codegen_test_util.h"
#include "tests/compiler/codegen/emu_kernel_runner.h"

namespace gptc::codegen {
namespace {

constexpr std::string_view kRowModule = R"(module row_test

%softmax {
  %x = bf16[4,5000] parameter(0)
  %w = f32[4,5000] parameter(1)
  %bias = f32[5000] parameter(2)
  %xf = f32[4,5000] convert(%x)
  %bb = f32[4,5000] broadcast(%bias), dimensions={1}
  %z = f32[4,5000] add(%xf, %bb)
  %m = f32[4] reduce(%z), dimensions={1}, kind=max
  %mb = f32[4,5000] broadcast(%m), dimensions={0}
  %d = f32[4,5000] sub(%z, %mb)
  %e = f32[4,5000] exp(%d)
  %s = f32[4] reduce(%e), dimensions={1}, kind=sum
  %sb = f32[4,5000] broadcast(%s), dimensions={0}
  %p = f32[4,5000] div(%e, %sb)
  %pw = f32[4,5000] mul(%p, %w)
  %t = f32[4] reduce(%pw), dimensions={1}, kind=sum
  %ls = f32[4] log(%s)
  %lse = f32[4] add(%ls, %m)
  %y = bf16[4,5000] convert(%p)
  ROOT %r = (bf16[4,5000], f32[4], f32[4]) tuple(%y, %lse, %t)
}

%wide {
  %a = f32[2,30001] parameter(0)
  %b = bf16[2,30001] parameter(1)
  %bf = f32[2,30001] convert(%b)
  %z = f32[2,30001] add(%a, %bf)
  %m = f32[2] reduce(%z), dimensions={1}, kind=max
  %mb = f32[2,30001] broadcast(%m), dimensions={0}
  %d = f32[2,30001] sub(%z, %mb)
  %e = f32[2,30001] exp(%d)
  %s = f32[2] reduce(%e), dimensions={1}, kind=sum
  %sb = f32[2,30001] broadcast(%s), dimensions={0}
  ROOT %p = f32[2,30001] div(%e, %sb)
}

%one_pass {
  %x = f32[3,6000] parameter(0)
  ROOT %s = f32[3] reduce(%x), dimensions={1}, kind=sum
}

%warp_rows {
  %x = f32[16,768] parameter(0)
  %m = f32[16] reduce(%x), dimensions={1}, kind=max
  %mb = f32[16,768] broadcast(%m), dimensions={0}
  ROOT %d = f32[16,768] sub(%x, %mb)
}

%dups {
  %x = bf16[8,64] parameter(0)
  %y = bf16[8,64] parameter(1)
  %a = f32[8,64] convert(%x)
  %b = f32[8,64] convert(%x)
  %c = f32[8,64] convert(%y)
  %ma = f32[8] reduce(%a), dimensions={1}, kind=max
  %mb = f32[8] reduce(%b), dimensions={1}, kind=max
  %mc = f32[8] reduce(%c), dimensions={1}, kind=max
  %ba = f32[8,64] broadcast(%ma), dimensions={0}
  %bb = f32[8,64] broadcast(%mb), dimensions={0}
  %da = f32[8,64] sub(%a, %ba)
  %db = f32[8,64] sub(%b, %bb)
  %ea = f32[8,64] exp(%da)
  %eb = f32[8,64] exp(%db)
  %sa = f32[8] reduce(%ea), dimensions={1}, kind=sum
  %sb = f32[8] reduce(%eb), dimensions={1}, kind=sum
  %sbb = f32[8,64] broadcast(%sb), dimensions={0}
  %p = f32[8,64] div(%ea, %sbb)
  %m = f32[8] add(%mc, %sa)
  ROOT %t = (f32[8,64], f32[8], f32[8]) tuple(%p, %m, %mb)
}

%col_rows {
  %x = f32[8457,64] parameter(0)
  %g = bf16[64] parameter(1)
  %b = f32[64] parameter(2)
  %s = f32[8457] reduce(%x), dimensions={1}, kind=sum
  %sb = f32[8457,64] broadcast(%s), dimensions={0}
  %d = f32[8457,64] sub(%x, %sb)
  %gf = f32[64] convert(%g)
  %gb = f32[8457,64] broadcast(%gf), dimensions={1}
  %bb = f32[8457,64] broadcast(%b), dimensions={1}
  %m = f32[8457,64] mul(%d, %gb)
  ROOT %y = f32[8457,64] add(%m, %bb)
}

%col_odd {
  %x = f32[24,33] parameter(0)
  %g = f32[33] parameter(1)
  %gb = f32[24,33] broadcast(%g), dimensions={1}
  %m = f32[24,33] mul(%x, %gb)
  %s = f32[24] reduce(%m), dimensions={1}, kind=max
  %sb = f32[24,33] broadcast(%s), dimensions={0}
  ROOT %y = f32[24,33] sub(%m, %sb)
}

%late_rows {
  %x = f32[16,768] parameter(0)
  %y = bf16[16,768] parameter(1)
  %z = f32[16,768] parameter(2)
  %yf = f32[16,768] convert(%y)
  %xy = f32[16,768] mul(%x, %yf)
  %s = f32[16] reduce(%xy), dimensions={1}, kind=sum
  %sb = f32[16,768] broadcast(%s), dimensions={0}
  %d = f32[16,768] mul(%x, %sb)
  ROOT %o = f32[16,768] add(%d, %z)
}

ENTRY %main {
  %x = bf16[4,5000] parameter(0)
  %w = f32[4,5000] parameter(1)
  %bias = f32[5000] parameter(2)
  %a = f32[2,30001] parameter(3)
  %b = bf16[2,30001] parameter(4)
  %o = f32[3,6000] parameter(5)
  %v = f32[16,768] parameter(6)
  %dx = bf16[8,64] parameter(7)
  %dy = bf16[8,64] parameter(8)
  %cx = f32[8457,64] parameter(9)
  %cg = bf16[64] parameter(10)
  %cb = f32[64] parameter(11)
  %ox = f32[24,33] parameter(12)
  %og = f32[33] parameter(13)
  %lx = f32[16,768] parameter(14)
  %ly = bf16[16,768] parameter(15)
  %lz = f32[16,768] parameter(16)
  %sm = (bf16[4,5000], f32[4], f32[4]) fusion(%x, %w, %bias), kind=reduction, calls=%softmax
  %wd = f32[2,30001] fusion(%a, %b), kind=reduction, calls=%wide
  %op = f32[3] fusion(%o), kind=reduction, calls=%one_pass
  %wr = f32[16,768] fusion(%v), kind=reduction, calls=%warp_rows
  %du = (f32[8,64], f32[8], f32[8]) fusion(%dx, %dy), kind=reduction, calls=%dups
  %cr = f32[8457,64] fusion(%cx, %cg, %cb), kind=reduction, calls=%col_rows
  %co = f32[24,33] fusion(%ox, %og), kind=reduction, calls=%col_odd
  %lr = f32[16,768] fusion(%lx, %ly, %lz), kind=reduction, calls=%late_rows
  ROOT %t = ((bf16[4,5000], f32[4], f32[4]), f32[2,30001], f32[3], f32[16,768], (f32[8,64], f32[8], f32[8]), f32[8457,64], f32[24,33], f32[16,768]) tuple(%sm, %wd, %op, %wr, %du, %cr, %co, %lr)
}
)";

// The plan of a block row: s needs m and t needs s (three passes); x and w
// are rows of whole 16-byte vectors, kept in shared memory; bias is not a row.
TEST(RowReductionPlanTest, BlockRowsBatchDependentReducesAndCacheTheirRows) {
  auto module = Parse(kRowModule);
  ASSERT_NE(module, nullptr);
  StatusOr<RowReductionPlan> plan =
      PlanRowReduction(*module->entry()->FindInstruction("sm"), /*mixed=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->batches.size(), 3u);
  EXPECT_EQ(Names(plan->batches[0]), std::vector<std::string>{"m"});
  EXPECT_EQ(Names(plan->batches[2]), std::vector<std::string>{"t"});
  EXPECT_EQ(plan->n, 5000);
  EXPECT_EQ(plan->rows, 4);
  // y is shaped like the input; lse and t like a row (after the 3 operands).
  EXPECT_EQ(plan->elem_slots, std::vector<int64_t>{3});
  EXPECT_EQ(plan->row_slots, (std::vector<int64_t>{4, 5}));
  // n > 4096: a block of 512 threads (16 warps) a row.
  EXPECT_EQ(plan->threads_per_row, 512);
  EXPECT_EQ(plan->block, 512);
  EXPECT_EQ(plan->grid, 4);
  EXPECT_EQ(plan->shared_floats, 16);
  EXPECT_FALSE(plan->wide);
  EXPECT_EQ(Names(plan->row_params), (std::vector<std::string>{"x", "w"}));
  const ir::Computation& fused = *module->FindComputation("softmax");
  EXPECT_EQ(plan->cached.at(fused.FindInstruction("x")), 0);
  EXPECT_EQ(plan->cached.at(fused.FindInstruction("w")), 5000 * 2);
  EXPECT_EQ(plan->cache_bytes, 5000 * 2 + 5000 * 4);
  EXPECT_EQ(plan->cached_by_vector.size(), 2u);
  EXPECT_TRUE(plan->cached_by_element.empty());
  EXPECT_EQ(plan->unrolled_columns, 0);
}

// The plan of warp rows: mb and sb are ma and sa again (Note [duplicate
// reduces]); ma and mc are independent, sa needs ma; two row-shaped
// parameters of 2 elements a lane are unrolled.
TEST(RowReductionPlanTest, WarpRowsDropDuplicateReducesAndUnroll) {
  auto module = Parse(kRowModule);
  ASSERT_NE(module, nullptr);
  StatusOr<RowReductionPlan> plan =
      PlanRowReduction(*module->entry()->FindInstruction("du"), /*mixed=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(Names(plan->reduces), (std::vector<std::string>{"ma", "mc", "sa"}));
  ASSERT_EQ(plan->batches.size(), 2u);
  EXPECT_EQ(Names(plan->batches[0]), (std::vector<std::string>{"ma", "mc"}));
  const ir::Computation& fused = *module->FindComputation("dups");
  EXPECT_EQ(plan->bindings.at(fused.FindInstruction("mb")), fused.FindInstruction("ma"));
  EXPECT_EQ(plan->bindings.at(fused.FindInstruction("sb")), fused.FindInstruction("sa"));
  EXPECT_EQ(plan->threads_per_row, 32);
  EXPECT_EQ(plan->rows_per_block, 8);
  EXPECT_EQ(plan->block, 256);
  EXPECT_EQ(plan->grid, 1);
  EXPECT_EQ(plan->shared_floats, 0);
  EXPECT_TRUE(plan->cached.empty());
  EXPECT_EQ(plan->unrolled_columns, 2);
  EXPECT_EQ(plan->elem_slots, std::vector<int64_t>{2});
  EXPECT_EQ(plan->row_slots, (std::vector<int64_t>{3, 4}));
}

// Note [row vectors]: 16 bytes of the widest row element, halved until it
// divides the row and a lane's unrolled columns.
TEST(RowReductionPlanTest, RowVectorWidths) {
  auto module = Parse(kRowModule);
  ASSERT_NE(module, nullptr);
  auto width = [&](const char* fusion) -> int64_t {
    StatusOr<RowReductionPlan> plan =
        PlanRowReduction(*module->entry()->FindInstruction(fusion), /*mixed=*/false);
    EXPECT_TRUE(plan.ok()) << plan.status().message();
    return plan.ok() ? plan->width : -1;
  };
  EXPECT_EQ(width("sm"), 4);  // f32 w: 4 a vector; 5000 = 1250 x 4
  EXPECT_EQ(width("wd"), 1);  // rows of 30001
  EXPECT_EQ(width("wr"), 4);  // f32 only: 4 of the 24 unrolled columns a lane
  EXPECT_EQ(width("du"), 2);  // 2 unrolled columns a lane
}

// Note [column cache]: warp rows keep the parameters of one row's elements
// (g, b) in shared memory, after each other, and 1,058 groups of 8 rows
// share 1,056 blocks; col_odd's 24 rows are 3 groups and 3 blocks.
TEST(RowReductionPlanTest, ColumnParametersAreCachedAndTheGridCapped) {
  auto module = Parse(kRowModule);
  ASSERT_NE(module, nullptr);
  StatusOr<RowReductionPlan> plan =
      PlanRowReduction(*module->entry()->FindInstruction("cr"), /*mixed=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const ir::Computation& fused = *module->FindComputation("col_rows");
  EXPECT_EQ(plan->column_cached.at(fused.FindInstruction("g")), 0);
  EXPECT_EQ(plan->column_cached.at(fused.FindInstruction("b")), 64 * 2);
  EXPECT_EQ(plan->cache_bytes, 64 * 2 + 64 * 4);
  EXPECT_TRUE(plan->cached.empty());
  EXPECT_EQ(plan->rows_per_block, 8);
  EXPECT_EQ(plan->row_groups, 1058);
  EXPECT_EQ(plan->grid, 1056);

  StatusOr<RowReductionPlan> odd =
      PlanRowReduction(*module->entry()->FindInstruction("co"), /*mixed=*/false);
  ASSERT_TRUE(odd.ok()) << odd.status().message();
  // 33 f32 are 132 bytes, padded to 144; 3 groups, 3 blocks.
  EXPECT_EQ(odd->cache_bytes, 144);
  EXPECT_EQ(odd->grid, 3);
  EXPECT_EQ(odd->width, 1);
  EXPECT_EQ(odd->unrolled_columns, 0);
}

// Note [unrolled warp rows]: x and y are read by the row's pass (48 elements
// a lane); z, only added at the stores, does not count.
TEST(RowReductionPlanTest, ParametersOnlyTheOutputsReadDoNotStopUnrolling) {
  auto module = Parse(kRowModule);
  ASSERT_NE(module, nullptr);
  StatusOr<RowReductionPlan> plan =
      PlanRowReduction(*module->entry()->FindInstruction("lr"), /*mixed=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->row_params.size(), 3u);
  EXPECT_EQ(plan->unrolled_columns, 24);
  EXPECT_TRUE(plan->column_cached.empty());
}

TEST(RowReductionEmitterTest, MultiPassBlockRowsAreKeptInSharedMemory) {
  auto module = Parse(kRowModule);
  ASSERT_NE(module, nullptr);
  CompiledKernels kernels = CompileAll(*module);
  ASSERT_EQ(kernels.kernels.size(), 8u);
  EXPECT_TRUE(kernels.skipped.empty());

  // x (bf16) and w (f32) are row-shaped and read in three passes plus the
  // output loop; the [5000] bias is not a row.
  const CompiledKernel& sm = kernels.kernels[0];
  EXPECT_EQ(sm.spec.block.x, 512);
  EXPECT_EQ(sm.spec.dynamic_shared_bytes, 5000 * 2 + 5000 * 4);
  EXPECT_NE(sm.ptx.find(".extern .shared"), std::string::npos);

  // Rows of whole 16-byte vectors are copied a vector a thread, and the
  // passes read them from shared memory 4 elements at a time (Note [row
  // vectors]): w as a v4.f32, x's bf16 as two 32-bit words; no scalar reads.
  EXPECT_NE(sm.ptx.find("ld.global.v4"), std::string::npos);
  EXPECT_NE(sm.ptx.find("ld.shared.v4.f32"), std::string::npos);
  EXPECT_NE(sm.ptx.find("ld.shared.v2.u32"), std::string::npos);
  EXPECT_EQ(sm.ptx.find("ld.shared.b16"), std::string::npos);
  EXPECT_EQ(sm.ptx.find("ld.shared.f32"), std::string::npos);
  EXPECT_NE(sm.ptx.find("bar.sync"), std::string::npos);

  // a's 120,004 bytes exceed the cache (two blocks must fit a
  // multiprocessor); b's 60,002 are kept, copied an element at a time (its
  // rows are not whole vectors).
  EXPECT_EQ(kernels.kernels[1].spec.dynamic_shared_bytes, 60016);
  EXPECT_EQ(kernels.kernels[1].ptx.find("ld.global.v4"), std::string::npos);
  // One pass reads each element once: nothing to keep.
  EXPECT_EQ(kernels.kernels[2].spec.dynamic_shared_bytes, 0);
  // Warp rows (768, one row-shaped parameter: 24 a lane) stay in registers
  // (Note [unrolled warp rows]): straight-line code, no loop.
  EXPECT_EQ(kernels.kernels[3].spec.dynamic_shared_bytes, 0);
  EXPECT_EQ(kernels.kernels[3].ptx.find(".extern .shared"), std::string::npos);
  EXPECT_EQ(kernels.kernels[3].ptx.find("bra"), std::string::npos);

  // Note [column cache]: g and b copied by 16-byte vectors, read back from
  // shared memory (g's two bf16 of a lane as one 32-bit word); the launch
  // is capped.
  const CompiledKernel& cr = kernels.kernels[5];
  EXPECT_EQ(cr.spec.dynamic_shared_bytes, 64 * 2 + 64 * 4);
  EXPECT_EQ(cr.spec.grid.x, 1056);
  EXPECT_NE(cr.ptx.find("st.shared.v4"), std::string::npos);
  EXPECT_NE(cr.ptx.find("ld.shared.v2.f32"), std::string::npos);
  EXPECT_NE(cr.ptx.find("ld.shared.b32"), std::string::npos);
  // g's row of 132 bytes is copied an element (a 32-bit word) at a time.
  EXPECT_EQ(kernels.kernels[6].spec.dynamic_shared_bytes, 144);
  EXPECT_NE(kernels.kernels[6].ptx.find("st.shared.u32"), std::string::npos);
  EXPECT_EQ(kernels.kernels[6].ptx.find("st.shared.v4"), std::string::npos);
  // z is loaded after the shuffles, beside the stores: no loop either.
  const std::string& lr = kernels.kernels[7].ptx;
  EXPECT_EQ(lr.find("bra"), std::string::npos);
  EXPECT_GT(lr.find("ld.global.v4.f32", lr.rfind("shfl.sync")), lr.rfind("shfl.sync"));
}

// Note [duplicate reduces]: mb and sb compute what ma and sa do (through
// another convert of the same x); mc reads y and stays. Three reduces of a
// warp row: five butterfly shuffles each.
TEST(RowReductionEmitterTest, DuplicateReducesAreEmittedOnce) {
  auto module = Parse(kRowModule);
  ASSERT_NE(module, nullptr);
  CompiledKernels kernels = CompileAll(*module);
  ASSERT_EQ(kernels.kernels.size(), 8u);
  const std::string& ptx = kernels.kernels[4].ptx;
  int64_t shuffles = 0;
  for (size_t at = ptx.find("shfl.sync"); at != std::string::npos;
       at = ptx.find("shfl.sync", at + 1))
    ++shuffles;
  EXPECT_EQ(shuffles, 3 * 5);
}

// On the emulated device (shared-memory races and barriers checked) against
// the evaluator.
TEST(RowReductionEmitterTest, CachedRowsMatchTheEvaluator) {
  auto module = Parse(kRowModule);
  ASSERT_NE(module, nullptr);
  EmuKernelRunner runner(*module);
  for (const char* name : {"sm", "wd", "op", "wr", "du", "cr", "co", "lr"}) {
    runner.ExpectMatchesEvaluator(name);
  }
}

}  // namespace
}  // namespace gptc::codegen
