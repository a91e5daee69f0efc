// Column and full reductions (Note [column reduction]): layer-norm gain/bias
// gradients, bias gradients, the loss mean and the grad-norm sum of squares.
#include <gtest/gtest.h>

#include "compiler/codegen/codegen.h"
#include "tests/compiler/codegen/codegen_test_util.h"
#include "tests/compiler/codegen/emu_kernel_runner.h"

namespace gptc::codegen {
namespace {

constexpr std::string_view kColumnModule = R"(module column_test

%ln_grads {
  %dy = f32[2,16,64] parameter(0)
  %xhat = f32[2,16,64] parameter(1)
  %db = f32[64] reduce(%dy), dimensions={0,1}, kind=sum
  %m = f32[2,16,64] mul(%dy, %xhat)
  %dg = f32[64] reduce(%m), dimensions={0,1}, kind=sum
  ROOT %t = (f32[64], f32[64]) tuple(%db, %dg)
}

%bias_grad {
  %dy = bf16[4096,768] parameter(0)
  ROOT %db = f32[768] reduce(%dy), dimensions={0}, kind=sum
}

%partial_tile {
  %x = f32[100,40] parameter(0)
  %r = f32[40] reduce(%x), dimensions={0}, kind=max
  ROOT %y = bf16[40] convert(%r)
}

%loss_mean {
  %l = f32[2,16] parameter(0)
  %s = f32[] reduce(%l), dimensions={0,1}, kind=sum
  %n = f32[] constant(32)
  ROOT %mean = f32[] div(%s, %n)
}

%grad_norm {
  %g0 = f32[50304,64] parameter(0)
  %g1 = f32[64] parameter(1)
  %g2 = f32[64,192] parameter(2)
  %q0 = f32[50304,64] mul(%g0, %g0)
  %s0 = f32[] reduce(%q0), dimensions={0,1}, kind=sum
  %q1 = f32[64] mul(%g1, %g1)
  %s1 = f32[] reduce(%q1), dimensions={0}, kind=sum
  %a1 = f32[] add(%s0, %s1)
  %q2 = f32[64,192] mul(%g2, %g2)
  %s2 = f32[] reduce(%q2), dimensions={0,1}, kind=sum
  %a2 = f32[] add(%a1, %s2)
  %norm = f32[] sqrt(%a2)
  %one = f32[] constant(1)
  %eps = f32[] constant(1e-06)
  %ne = f32[] add(%norm, %eps)
  %ratio = f32[] div(%one, %ne)
  %scale = f32[] min(%one, %ratio)
  ROOT %t = (f32[], f32[]) tuple(%norm, %scale)
}

ENTRY %main {
  %dy = f32[2,16,64] parameter(0)
  %xhat = f32[2,16,64] parameter(1)
  %big = bf16[4096,768] parameter(2)
  %x = f32[100,40] parameter(3)
  %l = f32[2,16] parameter(4)
  %g0 = f32[50304,64] parameter(5)
  %g1 = f32[64] parameter(6)
  %g2 = f32[64,192] parameter(7)
  %lng = (f32[64], f32[64]) fusion(%dy, %xhat), kind=reduction, calls=%ln_grads
  %bg = f32[768] fusion(%big), kind=reduction, calls=%bias_grad
  %pt = bf16[40] fusion(%x), kind=reduction, calls=%partial_tile
  %lm = f32[] fusion(%l), kind=reduction, calls=%loss_mean
  %gn = (f32[], f32[]) fusion(%g0, %g1, %g2), kind=reduction, calls=%grad_norm
  ROOT %t = ((f32[64], f32[64]), f32[768], bf16[40], f32[], (f32[], f32[])) tuple(%lng, %bg, %pt, %lm, %gn)
}
)";

TEST(ColumnReductionEmitterTest, ColumnAndFullReductionsAssemble) {
  auto module = Parse(kColumnModule);
  ASSERT_NE(module, nullptr);
  CompiledKernels kernels = CompileAll(*module);
  ASSERT_EQ(kernels.kernels.size(), 7u);
  EXPECT_TRUE(kernels.skipped.empty());

  // Gain and bias gradients: one batch, 2 tiles of 32 columns x 32 rows.
  const KernelSpec& lng = kernels.kernels[0].spec;
  EXPECT_EQ(lng.grid.x, 2);
  EXPECT_EQ(lng.block.x, 32 * 32);
  // Scratch, then the totals (Note [column totals in shared memory]).
  EXPECT_EQ(lng.static_shared_bytes, 2 * 1024 * 4 + 2 * 32 * 4);
  EXPECT_EQ(lng.params.size(), 4u);
  EXPECT_NE(kernels.kernels[0].ptx.find("bar.sync"), std::string::npos);
  EXPECT_EQ(kernels.kernels[0].ptx.find("atom."), std::string::npos);  // deterministic

  // 768 columns (24 tiles) of 4096 rows: split (Note [split column
  // reductions]) into 16 chunks of 256 rows, 8 a block, then 24 blocks
  // summing 16 partials a column.
  const KernelSpec& bg_partials = kernels.kernels[1].spec;
  EXPECT_EQ(bg_partials.name, "bg_partials");
  EXPECT_EQ(bg_partials.grid.x, 24 * 16);
  EXPECT_EQ(bg_partials.block.x, 256);
  EXPECT_EQ(bg_partials.static_shared_bytes, 256 * 4 + 32 * 4);
  EXPECT_EQ(bg_partials.params.back().shape.byte_size(), 16 * 768 * 4);
  const KernelSpec& bg = kernels.kernels[2].spec;
  EXPECT_EQ(bg.grid.x, 24);
  EXPECT_EQ(bg.block.x, 32 * 16);
  EXPECT_EQ(bg.static_shared_bytes, 512 * 4 + 32 * 4);

  const KernelSpec& pt = kernels.kernels[3].spec;  // 40 columns: a partial second tile
  EXPECT_EQ(pt.grid.x, 2);

  const KernelSpec& lm = kernels.kernels[4].spec;  // full reduction: one block
  EXPECT_EQ(lm.grid.x, 1);
  EXPECT_EQ(lm.block.x, 32);  // 32 rows of one column

  // Three inputs of different sizes, 3.2M elements in the largest: split by
  // members (Note [member partials]) into 786 + 1 + 3 blocks of partials,
  // each with a sum for each warp, then one block with a warp for each.
  const KernelSpec& partials = kernels.kernels[5].spec;
  EXPECT_EQ(partials.name, "gn_partials");
  EXPECT_EQ(partials.grid.x, 786 + 1 + 3);
  EXPECT_EQ(partials.block.x, 256);
  EXPECT_EQ(partials.static_shared_bytes, 8 * 4);
  EXPECT_EQ(partials.params.size(), 6u);  // 3 gradients, 2 outputs, the partials
  EXPECT_EQ(partials.params[5].shape.byte_size(), 790 * 4);
  EXPECT_EQ(kernels.kernels[5].ptx.find("atom."), std::string::npos);  // deterministic
  const KernelSpec& gn = kernels.kernels[6].spec;
  EXPECT_EQ(gn.name, "gn");
  EXPECT_EQ(gn.grid.x, 1);
  EXPECT_EQ(gn.block.x, 3 * 32);
  EXPECT_EQ(gn.static_shared_bytes, 3 * 4);  // the totals
  EXPECT_EQ(gn.params.size(), 6u);
}

// Each of them on the emulated device (memory and race checks on) against
// the evaluator.
TEST(ColumnReductionEmitterTest, ColumnAndFullReductionsMatchTheEvaluator) {
  auto module = Parse(kColumnModule);
  ASSERT_NE(module, nullptr);
  EmuKernelRunner runner(*module);
  for (const char* name : {"lng", "bg", "pt", "lm", "gn"}) runner.ExpectMatchesEvaluator(name);
}

TEST(ColumnReductionEmitterTest, MismatchedKeptDimsFailNamingTheReduce) {
  auto module = Parse(R"(module bad

%fused {
  %x = f32[8,16] parameter(0)
  %y = f32[8,32] parameter(1)
  %a = f32[16] reduce(%x), dimensions={0}, kind=sum
  %b = f32[32] reduce(%y), dimensions={0}, kind=sum
  ROOT %t = (f32[16], f32[32]) tuple(%a, %b)
}

ENTRY %main {
  %x = f32[8,16] parameter(0)
  %y = f32[8,32] parameter(1)
  ROOT %f = (f32[16], f32[32]) fusion(%x, %y), kind=reduction, calls=%fused
}
)");
  ASSERT_NE(module, nullptr);
  auto result = CompileFusions(*module, {});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(),
            "kernel f: %f: %fused/%b keeps dims {32} but an earlier reduce keeps {16}");
}

}  // namespace
}  // namespace gptc::codegen
