// Kernel generation: each emitter's PTX assembles for sm_90a within sm_90
// limits; unsupported fusions fail naming the instruction or are skipped.
#include "compiler/codegen/codegen.h"

#include <gtest/gtest.h>

#include "compiler/ir/parser.h"
#include "tests/compiler/codegen/codegen_test_util.h"

namespace gptc::codegen {
namespace {

constexpr std::string_view kLoopModule = R"(module loop_test

%fused.0 {
  %a = bf16[4,64] parameter(0)
  %b = f32[64,4] parameter(1)
  %c = f32[64] parameter(2)
  %af = f32[4,64] convert(%a)
  %e = f32[4,64] exp(%af)
  %bt = f32[4,64] transpose(%b), dimensions={1,0}
  %m = f32[4,64] mul(%e, %bt)
  %cb = f32[4,64] broadcast(%c), dimensions={1}
  %s = f32[4,64] add(%m, %cb)
  %zero = f32[] constant(0)
  %zb = f32[4,64] broadcast(%zero), dimensions={}
  %p = pred[4,64] compare(%s, %zb), direction=GT
  %r = f32[4,64] select(%p, %s, %zb)
  %t = f32[4,64] tanh(%r)
  %g = f32[4,64] erf(%t)
  %out = bf16[4,64] convert(%g)
  ROOT %tuple = (bf16[4,64], pred[4,64]) tuple(%out, %p)
}

%fused.1 {
  %x = f32[6,10] parameter(0)
  %y = f32[6,4] parameter(1)
  %sl = f32[3,5] slice(%x), slice={[0:6:2],[2:7]}
  %z = f32[] constant(-1)
  %pd = f32[6,10] pad(%sl, %z), low={1,2}, high={2,3}
  %cat = f32[6,14] concatenate(%pd, %y), dimensions={1}
  %io = s32[6,14] iota(), iota_dimension=1
  %iof = f32[6,14] convert(%io)
  %sum = f32[6,14] add(%cat, %iof)
  ROOT %rs = f32[84] reshape(%sum)
}

%fused.2 {
  %a = f32[1024,768] parameter(0)
  %b = f32[1024,768] parameter(1)
  %ab = f32[1024,768] add(%a, %b)
  ROOT %c = bf16[1024,768] convert(%ab)
}

ENTRY %main {
  %a = bf16[4,64] parameter(0)
  %b = f32[64,4] parameter(1)
  %c = f32[64] parameter(2)
  %x = f32[6,10] parameter(3)
  %y = f32[6,4] parameter(4)
  %big = f32[1024,768] parameter(5)
  %loop.0 = (bf16[4,64], pred[4,64]) fusion(%a, %b, %c), kind=loop, calls=%fused.0
  %loop.1 = f32[84] fusion(%x, %y), kind=loop, calls=%fused.1
  %loop.2 = bf16[1024,768] fusion(%big, %big), kind=loop, calls=%fused.2
  ROOT %t = ((bf16[4,64], pred[4,64]), f32[84], bf16[1024,768]) tuple(%loop.0, %loop.1, %loop.2)
}
)";

TEST(LoopEmitterTest, ElementwiseAndLayoutOpsAssemble) {
  auto module = Parse(kLoopModule);
  ASSERT_NE(module, nullptr);
  CompiledKernels kernels = CompileAll(*module);
  ASSERT_EQ(kernels.kernels.size(), 3u);
  EXPECT_TRUE(kernels.skipped.empty());
  const CompiledKernel& k0 = kernels.kernels[0];
  EXPECT_EQ(k0.spec.name, "loop_0");
  EXPECT_EQ(k0.spec.fusion, "loop.0");
  // Operands, then results (Note [kernel ABI]).
  ASSERT_EQ(k0.spec.params.size(), 5u);
  EXPECT_EQ(k0.spec.params[3].role, KernelParam::Role::kResult);
  EXPECT_EQ(k0.spec.params[4].shape.ToString(), "pred[4,64]");
  // exp / tanh / erf come from libdevice, linked and inlined: no calls remain.
  EXPECT_EQ(k0.ptx.find("call"), std::string::npos) << k0.ptx;
  EXPECT_EQ(k0.ptx.find("__nv_"), std::string::npos);
}

TEST(LoopEmitterTest, SameShapeOperandsUseVectorAccesses) {
  auto module = Parse(kLoopModule);
  ASSERT_NE(module, nullptr);
  CompiledKernels kernels = CompileAll(*module);
  ASSERT_EQ(kernels.kernels.size(), 3u);
  const CompiledKernel& k = kernels.kernels[2];
  // 4 lanes: f32 in 16-byte loads, bf16 out in 8-byte stores; grid-stride.
  EXPECT_NE(k.ptx.find("ld.global.v4.f32"), std::string::npos) << k.ptx;
  EXPECT_NE(k.ptx.find("st.global.v4.b16"), std::string::npos) << k.ptx;
  EXPECT_EQ(k.spec.block.x, 256);
  EXPECT_EQ(k.spec.params[0].min_alignment, 16);
}

TEST(LoopEmitterTest, OtherTargets) {
  auto module = Parse(kLoopModule);
  ASSERT_NE(module, nullptr);
  for (const char* target : {"sm_80", "sm_90"}) {
    CodegenOptions options;
    options.target = target;
    CompiledKernels kernels = CompileAll(*module, options);
    EXPECT_EQ(kernels.kernels.size(), 3u) << target;
  }
  CodegenOptions bad;
  bad.target = "sm_75";
  auto result = CompileFusions(*module, bad);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(), "target sm_75: expected sm_90a, sm_90 or sm_80");
}

TEST(LoopEmitterTest, UnsupportedOpNamesTheInstruction) {
  auto module = Parse(R"(module bad

%fused {
  %a = f32[4,8] parameter(0)
  %b = f32[8,4] parameter(1)
  %d = f32[4,4] dot(%a, %b), lhs_contracting={1}, rhs_contracting={0}
  ROOT %e = f32[4,4] exp(%d)
}

ENTRY %main {
  %a = f32[4,8] parameter(0)
  %b = f32[8,4] parameter(1)
  ROOT %f = f32[4,4] fusion(%a, %b), kind=loop, calls=%fused
}
)");
  ASSERT_NE(module, nullptr);
  auto result = CompileFusions(*module, {});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(),
            "kernel f: %f: %fused/%d: opcode dot is not supported in a loop fusion");
}

constexpr std::string_view kReductionModule = R"(module reduction_test

%layer_norm {
  %x = bf16[8,768] parameter(0)
  %g = f32[768] parameter(1)
  %b = f32[768] parameter(2)
  %xf = f32[8,768] convert(%x)
  %sum = f32[8] reduce(%xf), dimensions={1}, kind=sum
  %n = f32[] constant(768)
  %nb = f32[8] broadcast(%n), dimensions={}
  %mean = f32[8] div(%sum, %nb)
  %mb = f32[8,768] broadcast(%mean), dimensions={0}
  %d = f32[8,768] sub(%xf, %mb)
  %d2 = f32[8,768] mul(%d, %d)
  %ss = f32[8] reduce(%d2), dimensions={1}, kind=sum
  %var = f32[8] div(%ss, %nb)
  %eps = f32[] constant(0.0009765625)
  %eb = f32[8] broadcast(%eps), dimensions={}
  %ve = f32[8] add(%var, %eb)
  %rstd = f32[8] rsqrt(%ve)
  %rb = f32[8,768] broadcast(%rstd), dimensions={0}
  %nrm = f32[8,768] mul(%d, %rb)
  %gb = f32[8,768] broadcast(%g), dimensions={1}
  %bb = f32[8,768] broadcast(%b), dimensions={1}
  %y0 = f32[8,768] mul(%nrm, %gb)
  %y1 = f32[8,768] add(%y0, %bb)
  %y = bf16[8,768] convert(%y1)
  ROOT %t = (bf16[8,768], f32[8], f32[8]) tuple(%y, %mean, %rstd)
}

%softmax {
  %x = f32[4,3,2048] parameter(0)
  %m = f32[4,3] reduce(%x), dimensions={2}, kind=max
  %mb = f32[4,3,2048] broadcast(%m), dimensions={0,1}
  %d = f32[4,3,2048] sub(%x, %mb)
  %e = f32[4,3,2048] exp(%d)
  %s = f32[4,3] reduce(%e), dimensions={2}, kind=sum
  %sb = f32[4,3,2048] broadcast(%s), dimensions={0,1}
  ROOT %p = f32[4,3,2048] div(%e, %sb)
}

%moments {
  %x = bf16[5,100] parameter(0)
  %s1 = f32[5] reduce(%x), dimensions={1}, kind=sum
  %x2 = bf16[5,100] mul(%x, %x)
  %s2 = f32[5] reduce(%x2), dimensions={1}, kind=sum
  ROOT %t = (f32[5], f32[5]) tuple(%s1, %s2)
}

%column {
  %x = f32[16,32] parameter(0)
  ROOT %r = f32[32] reduce(%x), dimensions={0}, kind=sum
}

ENTRY %main {
  %x = bf16[8,768] parameter(0)
  %g = f32[768] parameter(1)
  %b = f32[768] parameter(2)
  %l = f32[4,3,2048] parameter(3)
  %z = bf16[5,100] parameter(4)
  %c = f32[16,32] parameter(5)
  %ln = (bf16[8,768], f32[8], f32[8]) fusion(%x, %g, %b), kind=reduction, calls=%layer_norm
  %sm = f32[4,3,2048] fusion(%l), kind=reduction, calls=%softmax
  %mo = (f32[5], f32[5]) fusion(%z), kind=reduction, calls=%moments
  %col = f32[32] fusion(%c), kind=reduction, calls=%column
  ROOT %t = ((bf16[8,768], f32[8], f32[8]), f32[4,3,2048], (f32[5], f32[5]), f32[32]) tuple(%ln, %sm, %mo, %col)
}
)";

TEST(RowReductionEmitterTest, LayerNormSoftmaxAndMomentsAssemble) {
  auto module = Parse(kReductionModule);
  ASSERT_NE(module, nullptr);
  CompiledKernels kernels = CompileAll(*module);
  ASSERT_EQ(kernels.kernels.size(), 4u);

  const KernelSpec& ln = kernels.kernels[0].spec;  // warp per row, 8 rows per block
  EXPECT_EQ(ln.block.x, 256);
  EXPECT_EQ(ln.grid.x, 1);
  EXPECT_EQ(ln.static_shared_bytes, 0);
  EXPECT_EQ(ln.params.size(), 6u);
  EXPECT_NE(kernels.kernels[0].ptx.find("shfl.sync.bfly"), std::string::npos);

  const KernelSpec& sm = kernels.kernels[1].spec;  // block per row: warps meet in shared memory
  EXPECT_EQ(sm.block.x, 256);
  EXPECT_EQ(sm.grid.x, 12);
  EXPECT_EQ(sm.static_shared_bytes, 8 * 4);
  EXPECT_NE(kernels.kernels[1].ptx.find("bar.sync"), std::string::npos);

  const KernelSpec& mo = kernels.kernels[2].spec;  // 5 rows: one partial block
  EXPECT_EQ(mo.block.x, 32 * 5);
  EXPECT_EQ(mo.grid.x, 1);

  // The column reduction goes to the column emitter (column_reduction_test.cc).
  EXPECT_TRUE(kernels.skipped.empty());
  EXPECT_EQ(kernels.kernels[3].spec.fusion, "col");
}

TEST(RowReductionEmitterTest, MiddleDimReductionIsSkippedWithReason) {
  auto module = Parse(R"(module middle

%fused {
  %x = f32[4,8,16] parameter(0)
  ROOT %r = f32[4,16] reduce(%x), dimensions={1}, kind=sum
}

ENTRY %main {
  %x = f32[4,8,16] parameter(0)
  ROOT %f = f32[4,16] fusion(%x), kind=reduction, calls=%fused
}
)");
  ASSERT_NE(module, nullptr);
  auto result = CompileFusions(*module, {});
  ASSERT_TRUE(result.ok()) << result.status().message();
  ASSERT_EQ(result->skipped.size(), 1u);
  EXPECT_EQ(result->skipped[0].reason,
            "reduction fusion mixes row and column reductions (or reduces middle dims): %r: "
            "reduces middle dims");
  auto direct = CompileFusion(*module->entry()->FindInstruction("f"), "f", {});
  ASSERT_FALSE(direct.ok());
  EXPECT_EQ(direct.status().message(),
            "kernel f (%f): reduction fusion mixes row and column reductions (or reduces middle "
            "dims): %r: reduces middle dims");
}

// Note [split column reductions]: independent full reductions over many rows
// are split (by members, Note [member partials]); small ones or a reduce of
// another's total are not.
TEST(ColumnReductionEmitterTest, SplitsOnlyIndependentFullReductionsOverManyRows) {
  auto module = Parse(R"(module norms

%split {
  %a = f32[1024,1024] parameter(0)
  %b = f32[64] parameter(1)
  %a2 = f32[1024,1024] mul(%a, %a)
  %sa = f32[] reduce(%a2), dimensions={0,1}, kind=sum
  %b2 = f32[64] mul(%b, %b)
  %sb = f32[] reduce(%b2), dimensions={0}, kind=sum
  %s = f32[] add(%sa, %sb)
  ROOT %n = f32[] sqrt(%s)
}

%dependent {
  %a = f32[1024,1024] parameter(0)
  %m = f32[] reduce(%a), dimensions={0,1}, kind=sum
  %mb = f32[1024,1024] broadcast(%m), dimensions={}
  %d = f32[1024,1024] sub(%a, %mb)
  ROOT %v = f32[] reduce(%d), dimensions={0,1}, kind=sum
}

%small {
  %a = f32[64,64] parameter(0)
  ROOT %s = f32[] reduce(%a), dimensions={0,1}, kind=sum
}

ENTRY %main {
  %a = f32[1024,1024] parameter(0)
  %b = f32[64] parameter(1)
  %c = f32[64,64] parameter(2)
  %n = f32[] fusion(%a, %b), kind=reduction, calls=%split
  %v = f32[] fusion(%a), kind=reduction, calls=%dependent
  %s = f32[] fusion(%c), kind=reduction, calls=%small
  ROOT %t = (f32[], f32[], f32[]) tuple(%n, %v, %s)
}
)");
  ASSERT_NE(module, nullptr);
  // 1M elements in 256 blocks of 256 threads (4 vectors of 4 a thread), 64 in one.
  EXPECT_EQ(ColumnReductionChunks(*module->entry()->FindInstruction("n")), 257);
  EXPECT_EQ(ColumnReductionChunks(*module->entry()->FindInstruction("v")), 1);
  EXPECT_EQ(ColumnReductionChunks(*module->entry()->FindInstruction("s")), 1);
  auto result = CompileFusions(*module, {});
  ASSERT_TRUE(result.ok()) << result.status().message();
  std::vector<std::string> names;
  for (const CompiledKernel& k : result->kernels) names.push_back(k.spec.name);
  EXPECT_EQ(names, (std::vector<std::string>{"n_partials", "n", "v", "s"}));
  const KernelSpec& partials = result->kernels[0].spec;
  EXPECT_EQ(partials.grid.x, 257);
  EXPECT_EQ(partials.block.x, 256);
  // A partial of f32 for each block, shared by both kernels.
  ASSERT_EQ(partials.params.size(), 4u);
  EXPECT_EQ(partials.params[3].role, KernelParam::Role::kScratch);
  EXPECT_EQ(partials.params[3].shape.byte_size(), 257 * 4);
  EXPECT_EQ(result->kernels[1].spec.grid.x, 1);
  EXPECT_EQ(result->kernels[1].spec.block.x, 64);  // a warp for each reduce
  EXPECT_EQ(result->kernels[1].spec.params.size(), 4u);
}

TEST(CompileFusionsTest, SkipsKindsWithoutEmitter) {
  auto module = Parse(R"(module gemm

%fused {
  %a = f32[4,8] parameter(0)
  %b = f32[8,4] parameter(1)
  ROOT %d = f32[4,4] dot(%a, %b), lhs_contracting={1}, rhs_contracting={0}
}

ENTRY %main {
  %a = f32[4,8] parameter(0)
  %b = f32[8,4] parameter(1)
  ROOT %f = f32[4,4] fusion(%a, %b), kind=gemm, epilogue={d=0}, calls=%fused
}
)");
  ASSERT_NE(module, nullptr);
  auto result = CompileFusions(*module, {});
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_TRUE(result->kernels.empty());
  ASSERT_EQ(result->skipped.size(), 1u);
  EXPECT_EQ(result->skipped[0].reason, "fusion kind gemm has no emitter yet");
}

// Note [kernel deduplication]: fusions equal up to names and metadata share
// one kernel; a different constant, shape or kind does not.
TEST(CompileFusionsTest, IdenticalFusionsShareOneKernel) {
  auto module = Parse(R"(module dedup

%fused.a {
  %x = f32[4,64] parameter(0)
  %y = f32[4,64] parameter(1)
  %m = f32[4,64] mul(%x, %y), meta="h.0.mlp"
  ROOT %e = f32[4,64] exp(%m)
}

%fused.b {
  %p = f32[4,64] parameter(0)
  %q = f32[4,64] parameter(1)
  %prod = f32[4,64] mul(%p, %q), meta="h.1.mlp"
  ROOT %ex = f32[4,64] exp(%prod)
}

%fused.c {
  %p = f32[4,64] parameter(0)
  %q = f32[4,64] parameter(1)
  %prod = f32[4,64] mul(%q, %p)
  ROOT %ex = f32[4,64] exp(%prod)
}

ENTRY %main {
  %a = f32[4,64] parameter(0)
  %b = f32[4,64] parameter(1)
  %f0 = f32[4,64] fusion(%a, %b), kind=loop, calls=%fused.a
  %f1 = f32[4,64] fusion(%b, %f0), kind=loop, calls=%fused.b
  %f2 = f32[4,64] fusion(%f1, %a), kind=loop, calls=%fused.c
  ROOT %t = (f32[4,64], f32[4,64], f32[4,64]) tuple(%f0, %f1, %f2)
}
)");
  ASSERT_NE(module, nullptr);
  const ir::Computation& entry = *module->entry();
  EXPECT_EQ(KernelKey(*entry.FindInstruction("f0"), EmitterKind::kLoop),
            KernelKey(*entry.FindInstruction("f1"), EmitterKind::kLoop));
  EXPECT_NE(KernelKey(*entry.FindInstruction("f0"), EmitterKind::kLoop),
            KernelKey(*entry.FindInstruction("f2"), EmitterKind::kLoop));  // operands swapped
  for (int64_t threads : {1, 2}) {
    CodegenOptions options;
    options.threads = threads;
    CompiledKernels kernels = CompileAll(*module, options);
    ASSERT_EQ(kernels.kernels.size(), 3u);
    const CompiledKernel &k0 = kernels.kernels[0], &k1 = kernels.kernels[1],
                         &k2 = kernels.kernels[2];
    EXPECT_EQ(k0.code_of, -1);
    EXPECT_FALSE(k0.ptx.empty());
    EXPECT_EQ(k1.code_of, 0);
    EXPECT_EQ(k1.spec.name, "f0");
    EXPECT_EQ(k1.spec.fusion, "f1");
    EXPECT_TRUE(k1.ptx.empty());
    EXPECT_EQ(k2.code_of, -1);
    EXPECT_EQ(k2.spec.name, "f2");
    EXPECT_EQ(k2.spec.fusion, "f2");
  }
  CodegenOptions no_dedup;
  no_dedup.deduplicate = false;
  CompiledKernels all = CompileAll(*module, no_dedup);
  ASSERT_EQ(all.kernels.size(), 3u);
  EXPECT_EQ(all.kernels[1].code_of, -1);
  EXPECT_EQ(all.kernels[1].spec.name, "f1");
}

TEST(PtxasTest, ErrorNamesKernelAndFirstMessage) {
  std::optional<std::string> ptxas = FindPtxas();
  if (!ptxas) GTEST_SKIP() << "ptxas not installed";
  auto result =
      RunPtxas(*ptxas, ".version 8.5\n.target sm_90a\n.address_size 64\nbogus\n", "bad", "sm_90a");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message().rfind("kernel bad: ptxas: ", 0), 0u)
      << result.status().message();
  EXPECT_EQ(result.status().message().find("/tmp/"), std::string::npos)
      << result.status().message();
}

TEST(PtxasTest, ParsesVerboseLog) {
  PtxasInfo info = ParsePtxasLog(
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'other' for 'sm_90a'\n"
      "ptxas info    : Used 99 registers, used 0 barriers, 360 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
      "ptxas info    : Function properties for k\n"
      "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Used 18 registers, used 1 barriers, 128 bytes smem, 368 bytes cmem[0]\n",
      "k");
  EXPECT_EQ(info.registers, 18);
  EXPECT_EQ(info.shared_bytes, 128);
  EXPECT_EQ(info.stack_bytes, 8);
  EXPECT_EQ(info.spill_stores, 4);
  EXPECT_EQ(info.spill_loads, 4);
}

}  // namespace
}  // namespace gptc::codegen
