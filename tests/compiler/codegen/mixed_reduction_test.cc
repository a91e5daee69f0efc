// Reduction fusions mixing row and column reductions (Note [mixed row and
// column reductions]): the layer-norm backward compiles to NAME_rows (dx)
// then NAME (dgain, dbias), both with the whole fusion's ABI.
#include <gtest/gtest.h>

#include "compiler/codegen/codegen.h"
#include "tests/compiler/codegen/codegen_test_util.h"

namespace gptc::codegen {
namespace {

// The shape of gpt2-tiny's %fused.grad.h.0.ln_1.broadcast.4 (after the
// schedule pass), with its rank-2 constants as broadcast scalars.
constexpr std::string_view kLayerNormBackward = R"(module ln_backward

%ln_bwd {
  %dy = f32[2,16,64] parameter(0)
  %w = f32[64] parameter(1)
  %xhat = f32[2,16,64] parameter(2)
  %rstd = f32[2,16] parameter(3)
  %xc = f32[2,16,64] parameter(4)
  %var = f32[2,16] parameter(5)
  %dres = f32[2,16,64] parameter(6)
  %dbias = f32[64] reduce(%dy), dimensions={0,1}, kind=sum
  %wb = f32[2,16,64] broadcast(%w), dimensions={2}
  %dxhat = f32[2,16,64] mul(%dy, %wb)
  %dyxhat = f32[2,16,64] mul(%dy, %xhat)
  %dgain = f32[64] reduce(%dyxhat), dimensions={0,1}, kind=sum
  %rb = f32[2,16,64] broadcast(%rstd), dimensions={0,1}
  %t1 = f32[2,16,64] mul(%dxhat, %rb)
  %t2 = f32[2,16,64] mul(%dxhat, %xc)
  %s2 = f32[2,16] reduce(%t2), dimensions={2}, kind=sum
  %half = f32[] constant(-0.5)
  %halfb = f32[2,16] broadcast(%half), dimensions={}
  %u1 = f32[2,16] mul(%s2, %halfb)
  %u2 = f32[2,16] mul(%u1, %rstd)
  %u3 = f32[2,16] div(%u2, %var)
  %n = f32[] constant(64)
  %nb = f32[2,16] broadcast(%n), dimensions={}
  %u4 = f32[2,16] div(%u3, %nb)
  %u4b = f32[2,16,64] broadcast(%u4), dimensions={0,1}
  %t3 = f32[2,16,64] mul(%u4b, %xc)
  %t4 = f32[2,16,64] add(%t1, %t3)
  %t5 = f32[2,16,64] add(%t4, %t3)
  %t6 = f32[2,16,64] neg(%t5)
  %t7 = f32[2,16,64] add(%dres, %t5)
  %s1 = f32[2,16] reduce(%t6), dimensions={2}, kind=sum
  %m = f32[2,16] div(%s1, %nb)
  %mb = f32[2,16,64] broadcast(%m), dimensions={0,1}
  %dx = f32[2,16,64] add(%t7, %mb)
  %dx16 = bf16[2,16,64] convert(%dx)
  ROOT %t = (f32[64], f32[64], f32[2,16,64], bf16[2,16,64]) tuple(%dbias, %dgain, %dx, %dx16)
}

ENTRY %main {
  %dy = f32[2,16,64] parameter(0)
  %w = f32[64] parameter(1)
  %xhat = f32[2,16,64] parameter(2)
  %rstd = f32[2,16] parameter(3)
  %xc = f32[2,16,64] parameter(4)
  %var = f32[2,16] parameter(5)
  %dres = f32[2,16,64] parameter(6)
  ROOT %lnb = (f32[64], f32[64], f32[2,16,64], bf16[2,16,64]) fusion(%dy, %w, %xhat, %rstd, %xc, %var, %dres), kind=reduction, calls=%ln_bwd
}
)";

TEST(MixedReductionTest, LayerNormBackwardIsRowsThenColumns) {
  auto module = Parse(kLayerNormBackward);
  ASSERT_NE(module, nullptr);
  const ir::Instruction* lnb = module->entry()->root();
  StatusOr<EmitterKind> kind = ChooseEmitter(*lnb);
  ASSERT_TRUE(kind.ok()) << kind.status().message();
  EXPECT_EQ(*kind, EmitterKind::kMixedReductionColumns);
  StatusOr<std::vector<bool>> column = MixedReductionColumnPart(*lnb->called_computation());
  ASSERT_TRUE(column.ok()) << column.status().message();
  EXPECT_EQ(*column, (std::vector<bool>{true, true, false, false}));

  CompiledKernels kernels = CompileAll(*module);  // ptxas for sm_90a, limits, no spills
  EXPECT_TRUE(kernels.skipped.empty());
  ASSERT_EQ(kernels.kernels.size(), 2u);
  const KernelSpec& rows = kernels.kernels[0].spec;
  const KernelSpec& columns = kernels.kernels[1].spec;
  EXPECT_EQ(rows.name, "lnb_rows");  // Note [multi-kernel instructions]: launched first
  EXPECT_EQ(columns.name, "lnb");
  EXPECT_EQ(rows.fusion, "lnb");
  EXPECT_EQ(columns.fusion, "lnb");
  // The same ABI (Note [kernel ABI]): 7 operands, then 4 results.
  ASSERT_EQ(rows.params.size(), 11u);
  ASSERT_EQ(columns.params.size(), 11u);
  for (size_t i = 0; i < rows.params.size(); ++i) {
    EXPECT_EQ(rows.params[i].role, columns.params[i].role);
    EXPECT_EQ(rows.params[i].index, columns.params[i].index);
    EXPECT_EQ(rows.params[i].shape, columns.params[i].shape);
  }
  // 32 rows of 64, a warp each (Note [row reduction]); 2 tiles of 32 columns
  // x 32 rows (Note [column reduction]).
  EXPECT_EQ(rows.grid.x, 4);
  EXPECT_EQ(rows.block.x, 256);
  EXPECT_EQ(columns.grid.x, 2);
  EXPECT_EQ(columns.block.x, 1024);
  for (const CompiledKernel& k : kernels.kernels) {
    EXPECT_EQ(k.ptx.find("atom."), std::string::npos) << k.spec.name;  // deterministic
  }
  // Each kernel stores only its own results: rows to params 9, 10 (f32 and
  // bf16 dx); columns to params 7, 8. The row kernel has no shared memory.
  EXPECT_EQ(rows.static_shared_bytes, 0);
  // Each lane's two columns (Note [unrolled warp rows]) as one vector
  // (Note [row vectors]): the f32 dx as a v2.f32, the bf16 dx as a b32.
  EXPECT_NE(kernels.kernels[0].ptx.find("st.global.v2.f32"), std::string::npos);
  EXPECT_NE(kernels.kernels[0].ptx.find("st.global.b32"), std::string::npos);
  EXPECT_EQ(kernels.kernels[1].ptx.find("st.global.b16"), std::string::npos);
  EXPECT_EQ(kernels.kernels[1].ptx.find("st.global.b32"), std::string::npos);
}

TEST(MixedReductionTest, ColumnOutputOfARowReductionIsSkippedNamingIt) {
  // %c sums rows' sums over columns: its kernel would need the row statistics.
  auto module = Parse(R"(module bad

%fused {
  %x = f32[8,16] parameter(0)
  %r = f32[8] reduce(%x), dimensions={1}, kind=sum
  %rb = f32[8,16] broadcast(%r), dimensions={0}
  %y = f32[8,16] mul(%x, %rb)
  %c = f32[16] reduce(%y), dimensions={0}, kind=sum
  ROOT %t = (f32[8], f32[16]) tuple(%r, %c)
}

ENTRY %main {
  %x = f32[8,16] parameter(0)
  ROOT %f = (f32[8], f32[16]) fusion(%x), kind=reduction, calls=%fused
}
)");
  ASSERT_NE(module, nullptr);
  auto result = CompileFusions(*module, {});
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_TRUE(result->kernels.empty());
  ASSERT_EQ(result->skipped.size(), 1u);
  EXPECT_EQ(result->skipped[0].reason,
            "reduction fusion mixes row and column reductions (or reduces middle dims): "
            "output %c depends on row and column reductions");
}

}  // namespace
}  // namespace gptc::codegen
