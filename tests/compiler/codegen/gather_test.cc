// Standalone gather and scatter-add kernels (Note [gather kernels]).
#include <gtest/gtest.h>

#include "compiler/codegen/codegen.h"
#include "tests/compiler/codegen/codegen_test_util.h"

namespace gptc::codegen {
namespace {

constexpr std::string_view kEmbeddingModule = R"(module embedding

%zeros {
  %z = f32[] constant(0)
  ROOT %b = f32[50304,768] broadcast(%z), dimensions={}
}

ENTRY %main {
  %wte = f32[50304,768] parameter(0)
  %tokens = s32[4,64] parameter(1)
  %dy = f32[4,64,768] parameter(2)
  %small = bf16[10,3] parameter(3)
  %ids = u16[5] parameter(4)
  %emb = f32[4,64,768] gather(%wte, %tokens), axis=0
  %pick = bf16[10,5] gather(%small, %ids), axis=1
  %zero = f32[50304,768] fusion(), kind=loop, calls=%zeros
  %dwte = f32[50304,768] scatter-add(%zero, %tokens, %dy), axis=0
  ROOT %t = (f32[4,64,768], bf16[10,5], f32[50304,768]) tuple(%emb, %pick, %dwte)
}
)";

TEST(GatherEmitterTest, EmbeddingLookupAndGradientAssemble) {
  auto module = Parse(kEmbeddingModule);
  ASSERT_NE(module, nullptr);
  CompiledKernels kernels = CompileAll(*module);
  EXPECT_TRUE(kernels.skipped.empty());
  ASSERT_EQ(kernels.kernels.size(), 5u);  // emb, pick, zero, dwte_init, dwte

  const CompiledKernel& emb = kernels.kernels[0];
  EXPECT_EQ(emb.spec.fusion, "emb");
  ASSERT_EQ(emb.spec.params.size(), 3u);  // table, indices, result
  EXPECT_EQ(emb.spec.params[1].shape.ToString(), "s32[4,64]");
  EXPECT_EQ(emb.spec.params[2].role, KernelParam::Role::kResult);
  EXPECT_EQ(emb.spec.params[0].min_alignment, 16);
  EXPECT_NE(emb.ptx.find("ld.global.v4.f32"), std::string::npos) << emb.ptx;  // rows as vectors
  EXPECT_EQ(emb.spec.block.x, 256);

  const CompiledKernel& pick = kernels.kernels[1];  // gather along the last axis, u16 ids
  EXPECT_EQ(pick.spec.params[2].shape.ToString(), "bf16[10,5]");

  // Scatter-add: copy the operand, then atomics (Note [multi-kernel instructions]).
  const CompiledKernel& init = kernels.kernels[3];
  const CompiledKernel& add = kernels.kernels[4];
  EXPECT_EQ(init.spec.name, "dwte_init");
  EXPECT_EQ(add.spec.name, "dwte");
  EXPECT_EQ(init.spec.fusion, "dwte");
  EXPECT_EQ(add.spec.fusion, "dwte");
  EXPECT_EQ(init.spec.params.size(), 4u);
  EXPECT_EQ(add.spec.params.size(), 4u);
  EXPECT_NE(init.ptx.find("ld.global.v4.f32"), std::string::npos);
  EXPECT_NE(add.ptx.find("atom.global.add.f32"), std::string::npos) << add.ptx;
}

TEST(GatherEmitterTest, BF16ScatterAddFailsNamingTheInstruction) {
  auto module = Parse(R"(module bad

ENTRY %main {
  %x = bf16[10,4] parameter(0)
  %i = s32[3] parameter(1)
  %u = bf16[3,4] parameter(2)
  ROOT %s = bf16[10,4] scatter-add(%x, %i, %u), axis=0
}
)");
  ASSERT_NE(module, nullptr);
  auto result = CompileFusions(*module, {});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(),
            "kernel s: %s: scatter-add of bf16[10,4] is not supported (f32 atomics only)");
}

}  // namespace
}  // namespace gptc::codegen
