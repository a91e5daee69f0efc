// Standalone gather and scatter-add kernels (Note [gather kernels]).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/eval/evaluator.h"
#include "tests/compiler/codegen/codegen_test_util.h"
#include "tests/compiler/codegen/emu_kernel_runner.h"

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

  // Scatter-add: copy the operand, then the adds in index order (Note
  // [multi-kernel instructions], Note [deterministic scatter-add]).
  const CompiledKernel& init = kernels.kernels[3];
  const CompiledKernel& add = kernels.kernels[4];
  EXPECT_EQ(init.spec.name, "dwte_init");
  EXPECT_EQ(add.spec.name, "dwte");
  EXPECT_EQ(init.spec.fusion, "dwte");
  EXPECT_EQ(add.spec.fusion, "dwte");
  EXPECT_EQ(init.spec.params.size(), 4u);
  EXPECT_EQ(add.spec.params.size(), 4u);
  EXPECT_NE(init.ptx.find("ld.global.v4.f32"), std::string::npos);
  EXPECT_EQ(add.ptx.find("atom."), std::string::npos) << add.ptx;  // no atomics
  // 256 indices: a thread's run of four is one 16-byte load.
  EXPECT_NE(add.ptx.find("ld.global.v4.u32"), std::string::npos) << add.ptx;
  EXPECT_EQ(add.spec.params[1].min_alignment, 16);
  EXPECT_EQ(add.spec.block.x, 256);
  EXPECT_EQ(add.spec.grid.x, 50304 / 32);  // 32 rows of 768 columns a block
  EXPECT_GT(add.spec.dynamic_shared_bytes, 32 * 768 * 4);
}

// Note [deterministic scatter-add] on the emulated device against the
// evaluator: repeated rows (one index in every fourth position), s32 and u16
// indices, leading dims (P = 2), a last row block and a last column block
// that are partial (V = 70 rows, Q = 800 columns); 150 indices loaded an
// element at a time, 1,200 (two rounds, the second partial) a vector of a
// thread's run; and the same bits twice.
TEST(GatherEmitterTest, ScatterAddMatchesTheEvaluatorAndRepeatsItsBits) {
  for (const char* index_dtype : {"s32", "u16"}) {
    for (int n : {50, 400}) {
      SCOPED_TRACE(fmt::format("{} x {}", index_dtype, 3 * n));
      auto module = Parse(fmt::format(R"(module scatter
ENTRY %main {{
  %x = f32[2,70,800] parameter(0)
  %i = {0}[3,{1}] parameter(1)
  %u = f32[2,3,{1},800] parameter(2)
  ROOT %s = f32[2,70,800] scatter-add(%x, %i, %u), axis=1
}}
)",
                                      index_dtype, n));
      ASSERT_NE(module, nullptr);
      std::mt19937_64 rng(3);
      std::vector<eval::Literal> args = {
          eval::Literal::Random(module->entry()->parameters()[0]->shape(), rng),
          eval::Literal::Zeros(module->entry()->parameters()[1]->shape()),
          eval::Literal::Random(module->entry()->parameters()[2]->shape(), rng)};
      for (size_t n = 0; n < args[1].values.size(); ++n) {
        args[1].values[n] = n % 4 == 0 ? 69 : static_cast<double>((n * 37) % 70);
      }
      StatusOr<eval::Literal> want = eval::Evaluate(*module, args);
      ASSERT_TRUE(want.ok()) << want.status().message();
      EmuKernelRunner runner(*module);
      std::vector<eval::Literal> got = runner.Run("s", args);
      ASSERT_EQ(got.size(), 1u);
      int failures = 0;
      for (size_t e = 0; e < got[0].values.size(); ++e) {
        if (std::abs(got[0].values[e] - want->values[e]) > 1e-5 * (1 + std::abs(want->values[e])) &&
            ++failures <= 5) {
          ADD_FAILURE() << "element " << e << ": emulator " << got[0].values[e] << ", evaluator "
                        << want->values[e];
        }
      }
      EXPECT_EQ(failures, 0);
      std::vector<eval::Literal> again = runner.Run("s", args);
      ASSERT_EQ(again.size(), 1u);
      EXPECT_EQ(again[0].values, got[0].values);
    }
  }
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
            "kernel s: %s: scatter-add of bf16[10,4] is not supported (f32 only)");
}

}  // namespace
}  // namespace gptc::codegen
