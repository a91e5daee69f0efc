// Kernels compiled for the emulated device (compiler/codegen/host_lowering.h)
// from hand-written NVPTX LLVM IR, run by the emulator's grid runner
// (runtime/emu/grid_runner.h): the GPU-specific parts (special registers,
// shared memory, barriers, shuffles, NVVM math, bf16 truncation) become their
// emulation; what the emulator does not know is refused by name; and
// defects written by hand — a missing barrier, an mma not every lane of the
// warp reaches — are reported as what they are.
#include "compiler/codegen/host_lowering.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <regex>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/program/emu_abi.h"
#include "compiler/support/float_bits.h"
#include "runtime/emu/grid_runner.h"
#include "runtime/emu/kernel_library.h"

namespace gptc::codegen {
namespace {

// A block sum of 128 floats through shared memory, as a reduction emitter
// writes it: store, barrier, then halve the stride with a barrier per step.
constexpr char kBlockSum[] = R"(
target triple = "nvptx64-nvidia-cuda"
@smem = internal addrspace(3) global [128 x float] undef, align 4
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare void @llvm.nvvm.barrier0()
define void @block_sum(ptr addrspace(1) %in, ptr addrspace(1) %out) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %b = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %base = mul i32 %b, 128
  %i = add i32 %base, %t
  %i64 = zext i32 %i to i64
  %p = getelementptr float, ptr addrspace(1) %in, i64 %i64
  %v = load float, ptr addrspace(1) %p
  %t64 = zext i32 %t to i64
  %s = getelementptr [128 x float], ptr addrspace(3) @smem, i64 0, i64 %t64
  store float %v, ptr addrspace(3) %s
  call void @llvm.nvvm.barrier0()
  br label %loop
loop:
  %stride = phi i32 [64, %entry], [%next, %cont]
  %active = icmp ult i32 %t, %stride
  br i1 %active, label %add, label %cont
add:
  %o = add i32 %t, %stride
  %o64 = zext i32 %o to i64
  %so = getelementptr [128 x float], ptr addrspace(3) @smem, i64 0, i64 %o64
  %x = load float, ptr addrspace(3) %so
  %y = load float, ptr addrspace(3) %s
  %z = fadd float %x, %y
  store float %z, ptr addrspace(3) %s
  br label %cont
cont:
  call void @llvm.nvvm.barrier0() ; the step's barrier
  %next = lshr i32 %stride, 1
  %done = icmp eq i32 %next, 0
  br i1 %done, label %exit, label %loop
exit:
  %first = icmp eq i32 %t, 0
  br i1 %first, label %write, label %end
write:
  %r = load float, ptr addrspace(3) @smem
  %bo = zext i32 %b to i64
  %q = getelementptr float, ptr addrspace(1) %out, i64 %bo
  store float %r, ptr addrspace(1) %q
  br label %end
end:
  ret void
}
)";

// Compiles `ir` (kernel `name`) for the host and loads it as a library.
struct HostLibrary {
  std::unique_ptr<rt::emu::KernelLibrary> library;
  HostKernel kernel;
};

StatusOr<HostLibrary> Build(const std::string& ir, const std::string& name) {
  HostLibrary out;
  ASSIGN_OR_RETURN(out.kernel, CompileLlvmTextForHost(ir, name, "gptc_test_" + name));
  ASSIGN_OR_RETURN(std::string bytes, LinkHostLibrary({out.kernel.object}));
  ASSIGN_OR_RETURN(out.library, rt::emu::KernelLibrary::Open(bytes, "the test library"));
  out.library->SetChecks(true);  // instrumented accesses call the emulator's checks
  return out;
}

rt::emu::Launch LaunchOf(const HostLibrary& lib, std::vector<uint64_t> args, uint32_t grid,
                         uint32_t block, bool checks) {
  return rt::emu::Launch{.kernel = lib.kernel.symbol,
                         .function = lib.library->Symbol(lib.kernel.symbol),
                         .args = std::move(args),
                         .grid = {grid, 1, 1},
                         .block = {block, 1, 1},
                         .static_shared = static_cast<uint32_t>(lib.kernel.shared_bytes),
                         .uses_sync = lib.kernel.uses_sync,
                         .checks = checks};
}

uint64_t Ptr(const void* p) { return reinterpret_cast<uint64_t>(p); }

TEST(HostLoweringTest, ABlockReductionRunsOnTheEmulator) {
  StatusOr<HostLibrary> lib = Build(kBlockSum, "block_sum");
  ASSERT_TRUE(lib.ok()) << lib.status().message();
  EXPECT_TRUE(lib->kernel.uses_sync);
  EXPECT_EQ(lib->kernel.barriers, 2);
  EXPECT_EQ(lib->kernel.shared_bytes, 128 * 4);
  EXPECT_GE(lib->kernel.accesses, 7);  // global load and store, five shared accesses
  std::vector<float> in(128 * 3), out(3, 0);
  std::iota(in.begin(), in.end(), 0.0f);
  rt::emu::GridRunner runner(2);
  Status run = runner.Run(LaunchOf(*lib, {Ptr(in.data()), Ptr(out.data())}, 3, 128, true));
  ASSERT_TRUE(run.ok()) << run.message();
  for (int b = 0; b < 3; ++b) {
    EXPECT_EQ(out[b], std::accumulate(in.begin() + 128 * b, in.begin() + 128 * (b + 1), 0.0f));
  }
}

// kBlockSum over 3 blocks of ones with the counters on.
rt::emu::LaunchCounters CountBlockSum() {
  rt::emu::LaunchCounters counters;
  StatusOr<HostLibrary> lib = Build(kBlockSum, "block_sum");
  EXPECT_TRUE(lib.ok()) << lib.status().message();
  if (!lib.ok()) return counters;
  // Sector-aligned, as a device allocation is.
  alignas(256) static float in[128 * 3];
  std::fill(std::begin(in), std::end(in), 1.0f);
  std::vector<float> out(3, 0);
  rt::emu::GridRunner runner(2);
  rt::emu::Launch launch = LaunchOf(*lib, {Ptr(in), Ptr(out.data())}, 3, 128, false);
  launch.counters = &counters;
  Status run = runner.Run(launch);
  EXPECT_TRUE(run.ok()) << run.message();
  EXPECT_EQ(out[2], 128.0f);
  return counters;
}

// Note [emulated memory counters]: each instrumented access passes its site,
// so the emulator pairs the lanes of a warp. The block sum's global load is
// coalesced (4 warps a block, 4 sectors each), its shared accesses touch
// consecutive words (one wavefront each), and thread 0 alone stores.
TEST(HostLoweringTest, TheBlockSumsAccessesAreCounted) {
  const rt::emu::LaunchCounters counters = CountBlockSum();
  EXPECT_EQ(counters.global_load_requests, 3u * 4);
  EXPECT_EQ(counters.global_load_sectors, 3u * 4 * 4);
  EXPECT_EQ(counters.global_store_requests, 3u);
  EXPECT_EQ(counters.global_store_sectors, 3u);
  EXPECT_GT(counters.shared_load_requests, 0u);
  EXPECT_EQ(counters.shared_load_wavefronts, counters.shared_load_requests);
  EXPECT_EQ(counters.shared_store_wavefronts, counters.shared_store_requests);
}

// Note [emulated instruction counters]: the block sum's instructions by
// class, counted by hand from kBlockSum per warp of the 4 a block, 3 blocks.
// The loop runs 7 times (strides 64 to 1) in every warp; its `add` block
// runs where any lane of the warp is below the stride: warp 0 at all 7
// strides, warp 1 at stride 64 only, 8 times a block; `write` in warp 0.
//   entry (4 a block): 8 integer (two special registers, mul, add, two zext,
//     two variable-index geps), a global load, a shared store, a barrier, a
//     branch;
//   loop (28): an icmp and a branch (the phi counts nothing);
//   add (8): add, zext and gep, two shared loads, an fadd, a shared store, a
//     branch;
//   cont (28): a barrier, lshr, icmp, a branch;
//   exit (4): icmp, a branch; write (1): a shared load, zext, gep, a global
//   store, a branch; end (4): ret.
TEST(HostLoweringTest, TheBlockSumsInstructionsAreCountedExactly) {
  const rt::emu::LaunchCounters counters = CountBlockSum();
  namespace abi = program::emu;
  const auto& n = counters.instructions;
  EXPECT_EQ(n[abi::kIntegerClass], 3u * (8 * 4 + 28 + 3 * 8 + 2 * 28 + 4 + 2));
  EXPECT_EQ(n[abi::kGlobalMemoryClass], 3u * (4 + 1));
  EXPECT_EQ(n[abi::kSharedMemoryClass], 3u * (4 + 3 * 8 + 1));
  EXPECT_EQ(n[abi::kFloatClass], 3u * 8);
  EXPECT_EQ(n[abi::kControlClass], 3u * (4 + 28 + 8 + 28 + 4 + 1 + 4));
  EXPECT_EQ(n[abi::kBarrierClass], 3u * (4 + 28));
  EXPECT_EQ(n[abi::kMmaClass], 0u);
  EXPECT_EQ(n[abi::kShuffleClass], 0u);
}

// The seeded defect "a missing barrier": the same kernel without the
// barrier between the reduction's steps.
TEST(HostLoweringTest, AMissingBarrierIsReportedAsARace) {
  const std::string without =
      std::regex_replace(kBlockSum, std::regex(".*; the step's barrier\n"), "");
  ASSERT_NE(without, kBlockSum);
  StatusOr<HostLibrary> lib = Build(without, "block_sum");
  ASSERT_TRUE(lib.ok()) << lib.status().message();
  EXPECT_EQ(lib->kernel.barriers, 1);
  std::vector<float> in(128, 1.0f), out(1, 0);
  rt::emu::GridRunner runner(1);
  Status run = runner.Run(LaunchOf(*lib, {Ptr(in.data()), Ptr(out.data())}, 1, 128, true));
  ASSERT_FALSE(run.ok());
  // One line: the kernel, the thread, the shared offset and the defect.
  EXPECT_EQ(run.message().find('\n'), std::string::npos);
  EXPECT_TRUE(std::regex_search(run.message(),
                                std::regex("kernel gptc_test_block_sum: block \\(0,0,0\\) thread "
                                           "\\(\\d+,0,0\\): .* at shared offset \\d+ races with")))
      << run.message();
}

// Shuffles, NVVM math with .ftz and directed rounding, and bf16 stores.
constexpr char kWarpMath[] = R"(
target triple = "nvptx64-nvidia-cuda"
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare float @llvm.nvvm.shfl.sync.bfly.f32(i32, float, i32, i32)
declare float @llvm.nvvm.ex2.approx.ftz.f(float)
declare float @llvm.nvvm.fma.rm.f(float, float, float)
declare float @llvm.nvvm.round.f(float)
define void @warp_math(ptr addrspace(1) %out, ptr addrspace(1) %bf) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %v = uitofp i32 %t to float
  %s1 = call float @llvm.nvvm.shfl.sync.bfly.f32(i32 -1, float %v, i32 16, i32 31)
  %a1 = fadd float %v, %s1
  %s2 = call float @llvm.nvvm.shfl.sync.bfly.f32(i32 -1, float %a1, i32 8, i32 31)
  %a2 = fadd float %a1, %s2
  %s3 = call float @llvm.nvvm.shfl.sync.bfly.f32(i32 -1, float %a2, i32 4, i32 31)
  %a3 = fadd float %a2, %s3
  %s4 = call float @llvm.nvvm.shfl.sync.bfly.f32(i32 -1, float %a3, i32 2, i32 31)
  %a4 = fadd float %a3, %s4
  %s5 = call float @llvm.nvvm.shfl.sync.bfly.f32(i32 -1, float %a4, i32 1, i32 31)
  %sum = fadd float %a4, %s5
  %e = call float @llvm.nvvm.ex2.approx.ftz.f(float 3.0)
  %f = call float @llvm.nvvm.fma.rm.f(float %sum, float %e, float 0.5)
  %h = call float @llvm.nvvm.round.f(float 2.5)
  %g = fadd float %f, %h
  %t64 = zext i32 %t to i64
  %p = getelementptr float, ptr addrspace(1) %out, i64 %t64
  store float %g, ptr addrspace(1) %p
  %third = fdiv float %v, 3.0
  %b16 = fptrunc float %third to bfloat
  %q = getelementptr bfloat, ptr addrspace(1) %bf, i64 %t64
  store bfloat %b16, ptr addrspace(1) %q
  ret void
}
)";

TEST(HostLoweringTest, ShufflesMathAndBf16RunAsOnTheGpu) {
  StatusOr<HostLibrary> lib = Build(kWarpMath, "warp_math");
  ASSERT_TRUE(lib.ok()) << lib.status().message();
  EXPECT_EQ(lib->kernel.shuffles, 5);
  std::vector<float> out(32, 0);
  std::vector<uint16_t> bf(32, 0);
  rt::emu::GridRunner runner(1);
  Status run = runner.Run(LaunchOf(*lib, {Ptr(out.data()), Ptr(bf.data())}, 1, 32, true));
  ASSERT_TRUE(run.ok()) << run.message();
  // sum 0..31 = 496; 496 * 8 + 0.5 (exact); cvt.rni rounds 2.5 to even: 2.
  for (int l = 0; l < 32; ++l) {
    EXPECT_EQ(out[l], 496.0f * 8.0f + 0.5f + 2.0f) << l;
    EXPECT_EQ(bf[l], F32ToBF16Bits(static_cast<float>(l) / 3.0f)) << l;
  }
}

// One warp: a 16x16 bf16 tile A to shared memory, then D = A * A[:, 0:8] by
// ldmatrix.x4 (A), ldmatrix.x2.trans (B) and one mma (Note [emulated warp
// matrix operations] in runtime/emu/warp_matrix.h).
constexpr char kTileMma[] = R"(
target triple = "nvptx64-nvidia-cuda"
@tile = internal addrspace(3) global [256 x i16] undef, align 16
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare void @llvm.nvvm.barrier0()
declare { i32, i32, i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16.p3(ptr addrspace(3))
declare { i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x2.trans.b16.p3(ptr addrspace(3))
declare { float, float, float, float } @llvm.nvvm.mma.m16n8k16.row.col.bf16(i32, i32, i32, i32, i32, i32, float, float, float, float)
define void @tile_mma(ptr addrspace(1) %in, ptr addrspace(1) %out) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %t8 = mul i32 %t, 8
  %t8w = zext i32 %t8 to i64
  %src = getelementptr i16, ptr addrspace(1) %in, i64 %t8w
  %v = load <8 x i16>, ptr addrspace(1) %src, align 16
  %dst = getelementptr i16, ptr addrspace(3) @tile, i64 %t8w
  store <8 x i16> %v, ptr addrspace(3) %dst, align 16
  call void @llvm.nvvm.barrier0()
  %r = and i32 %t, 15
  %h = lshr i32 %t, 4
  %r16 = mul i32 %r, 16
  %h8 = mul i32 %h, 8
  %ai = add i32 %r16, %h8
  %aiw = zext i32 %ai to i64
  %ap = getelementptr i16, ptr addrspace(3) @tile, i64 %aiw
  %af = call { i32, i32, i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16.p3(ptr addrspace(3) %ap)
  %biw = zext i32 %r16 to i64
  %bp = getelementptr i16, ptr addrspace(3) @tile, i64 %biw
  %bf = call { i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x2.trans.b16.p3(ptr addrspace(3) %bp)
  %a0 = extractvalue { i32, i32, i32, i32 } %af, 0
  %a1 = extractvalue { i32, i32, i32, i32 } %af, 1
  %a2 = extractvalue { i32, i32, i32, i32 } %af, 2
  %a3 = extractvalue { i32, i32, i32, i32 } %af, 3
  %b0 = extractvalue { i32, i32 } %bf, 0
  %b1 = extractvalue { i32, i32 } %bf, 1
  br label %compute ; the warp goes on together
compute:
  %d = call { float, float, float, float } @llvm.nvvm.mma.m16n8k16.row.col.bf16(i32 %a0, i32 %a1, i32 %a2, i32 %a3, i32 %b0, i32 %b1, float 0.0, float 0.0, float 0.0, float 0.0)
  %d0 = extractvalue { float, float, float, float } %d, 0
  %d1 = extractvalue { float, float, float, float } %d, 1
  %d2 = extractvalue { float, float, float, float } %d, 2
  %d3 = extractvalue { float, float, float, float } %d, 3
  %g = lshr i32 %t, 2
  %q = and i32 %t, 3
  %q2 = mul i32 %q, 2
  %g8 = mul i32 %g, 8
  %o0 = add i32 %g8, %q2
  %o2 = add i32 %o0, 64
  %o0w = zext i32 %o0 to i64
  %o2w = zext i32 %o2 to i64
  %p0 = getelementptr float, ptr addrspace(1) %out, i64 %o0w
  %p1 = getelementptr float, ptr addrspace(1) %p0, i64 1
  %p2 = getelementptr float, ptr addrspace(1) %out, i64 %o2w
  %p3 = getelementptr float, ptr addrspace(1) %p2, i64 1
  store float %d0, ptr addrspace(1) %p0
  store float %d1, ptr addrspace(1) %p1
  store float %d2, ptr addrspace(1) %p2
  store float %d3, ptr addrspace(1) %p3
  br label %exit
exit:
  ret void
}
)";

TEST(HostLoweringTest, MmaAndLdmatrixRunAsWarpCollectives) {
  StatusOr<HostLibrary> lib = Build(kTileMma, "tile_mma");
  ASSERT_TRUE(lib.ok()) << lib.status().message();
  EXPECT_TRUE(lib->kernel.uses_sync);
  EXPECT_EQ(lib->kernel.mmas, 1);
  EXPECT_EQ(lib->kernel.ldmatrices, 2);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> dist(-8, 8);
  std::vector<uint16_t> a(16 * 16);
  for (uint16_t& x : a) x = F32ToBF16Bits(static_cast<float>(dist(rng)));
  std::vector<float> d(16 * 8, -1);
  rt::emu::GridRunner runner(1);
  Status run = runner.Run(LaunchOf(*lib, {Ptr(a.data()), Ptr(d.data())}, 1, 32, true));
  ASSERT_TRUE(run.ok()) << run.message();
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 8; ++j) {
      float sum = 0;  // small integers: exact in any order
      for (int k = 0; k < 16; ++k)
        sum += BF16BitsToF32(a[i * 16 + k]) * BF16BitsToF32(a[k * 16 + j]);
      EXPECT_EQ(d[i * 8 + j], sum) << i << "," << j;
    }
  }
}

// One warp of kWarpMath: five shuffles; 19 float instructions (uitofp, six
// fadds, ex2, fma.rm, round, fptrunc, and the fdiv's eight: Note [IEEE
// division sequences]); the special register, a zext and two geps; two global
// stores; a ret.
TEST(HostLoweringTest, TheWarpMathsInstructionsAreCountedExactly) {
  StatusOr<HostLibrary> lib = Build(kWarpMath, "warp_math");
  ASSERT_TRUE(lib.ok()) << lib.status().message();
  std::vector<float> out(32, 0);
  std::vector<uint16_t> bf(32, 0);
  rt::emu::GridRunner runner(1);
  rt::emu::LaunchCounters counters;
  rt::emu::Launch launch = LaunchOf(*lib, {Ptr(out.data()), Ptr(bf.data())}, 1, 32, false);
  launch.counters = &counters;
  Status run = runner.Run(launch);
  ASSERT_TRUE(run.ok()) << run.message();
  namespace abi = program::emu;
  const auto& n = counters.instructions;
  EXPECT_EQ(n[abi::kShuffleClass], 5u);
  EXPECT_EQ(n[abi::kFloatClass], 19u);
  EXPECT_EQ(n[abi::kIntegerClass], 4u);
  EXPECT_EQ(n[abi::kGlobalMemoryClass], 2u);
  EXPECT_EQ(n[abi::kControlClass], 1u);
  EXPECT_EQ(counters.Instructions(), 31u);
}

// Note [IEEE division sequences]: a correctly rounded f32 division and
// square root are eight instructions each; a division that may use the
// reciprocal (arcp) is one.
constexpr char kDivisions[] = R"(
target triple = "nvptx64-nvidia-cuda"
declare float @llvm.sqrt.f32(float)
define void @divisions(ptr addrspace(1) %out) {
entry:
  %x = load float, ptr addrspace(1) %out
  %ieee = fdiv float %x, 3.0
  %fast = fdiv arcp float %ieee, %x
  %root = call float @llvm.sqrt.f32(float %fast)
  store float %root, ptr addrspace(1) %out
  ret void
}
)";

TEST(HostLoweringTest, CorrectlyRoundedDivisionsCountTheirSequence) {
  StatusOr<HostLibrary> lib = Build(kDivisions, "divisions");
  ASSERT_TRUE(lib.ok()) << lib.status().message();
  float x = 6;
  rt::emu::GridRunner runner(1);
  rt::emu::LaunchCounters counters;
  rt::emu::Launch launch = LaunchOf(*lib, {Ptr(&x)}, 1, 1, false);
  launch.counters = &counters;
  Status run = runner.Run(launch);
  ASSERT_TRUE(run.ok()) << run.message();
  EXPECT_FLOAT_EQ(x, std::sqrt(2.0f / 6.0f));
  namespace abi = program::emu;
  EXPECT_EQ(counters.instructions[abi::kFloatClass], 8u + 1u + 8u);
  EXPECT_EQ(counters.instructions[abi::kGlobalMemoryClass], 2u);
}

// The seeded defect "a divergent mma": lanes 16-31 leave before it.
TEST(HostLoweringTest, AnMmaOnlyPartOfTheWarpReachesIsReported) {
  const std::string divergent =
      std::regex_replace(kTileMma, std::regex("  br label %compute ; the warp goes on together"),
                         "  %low = icmp ult i32 %t, 16\n  br i1 %low, label %compute, label %exit");
  ASSERT_NE(divergent, kTileMma);
  StatusOr<HostLibrary> lib = Build(divergent, "tile_mma");
  ASSERT_TRUE(lib.ok()) << lib.status().message();
  std::vector<uint16_t> a(16 * 16, 0);
  std::vector<float> d(16 * 8);
  rt::emu::GridRunner runner(1);
  Status run = runner.Run(LaunchOf(*lib, {Ptr(a.data()), Ptr(d.data())}, 1, 32, true));
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.message(),
            "kernel gptc_test_tile_mma: block (0,0,0) warp 0: mma #0 "
            "(mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32) is .aligned, but lanes 16-31 "
            "exited without executing it (lanes 0-15 wait at it)");
}

// Shapes and types without an emulation: m16n8k8, and f16 accumulators.
TEST(HostLoweringTest, AnotherMmaShapeOrTypeIsRefusedByName) {
  const std::string k8 = R"(
target triple = "nvptx64-nvidia-cuda"
declare { float, float, float, float } @llvm.nvvm.mma.m16n8k8.row.col.bf16(i32, i32, i32, float, float, float, float)
define void @k(ptr addrspace(1) %out) {
  %d = call { float, float, float, float } @llvm.nvvm.mma.m16n8k8.row.col.bf16(i32 1, i32 2, i32 3, float 0.0, float 0.0, float 0.0, float 0.0)
  %d0 = extractvalue { float, float, float, float } %d, 0
  store float %d0, ptr addrspace(1) %out
  ret void
}
)";
  StatusOr<HostKernel> k = CompileLlvmTextForHost(k8, "k", "gptc_test_k");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().message(),
            "kernel k: host code: intrinsic llvm.nvvm.mma.m16n8k8.row.col.bf16 has no emulation");
  const std::string f16_accumulators = R"(
target triple = "nvptx64-nvidia-cuda"
declare { <2 x half>, <2 x half> } @llvm.nvvm.mma.m16n8k16.row.col.f16.f16(<2 x half>, <2 x half>, <2 x half>, <2 x half>, <2 x half>, <2 x half>, <2 x half>, <2 x half>)
define void @k(ptr addrspace(1) %out) {
  %d = call { <2 x half>, <2 x half> } @llvm.nvvm.mma.m16n8k16.row.col.f16.f16(<2 x half> zeroinitializer, <2 x half> zeroinitializer, <2 x half> zeroinitializer, <2 x half> zeroinitializer, <2 x half> zeroinitializer, <2 x half> zeroinitializer, <2 x half> zeroinitializer, <2 x half> zeroinitializer)
  %d0 = extractvalue { <2 x half>, <2 x half> } %d, 0
  store <2 x half> %d0, ptr addrspace(1) %out
  ret void
}
)";
  k = CompileLlvmTextForHost(f16_accumulators, "k", "gptc_test_k");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().message(),
            "kernel k: host code: intrinsic llvm.nvvm.mma.m16n8k16.row.col.f16.f16 has no "
            "emulation");
}

// A library of ABI 1 (before mma and ldmatrix joined the runtime table)
// would call past the end of today's table: the loader refuses it.
TEST(HostLoweringTest, ALibraryOfAnotherAbiIsRefused) {
  const std::filesystem::path dir = testing::TempDir();
  const std::filesystem::path source = dir / "gptc_abi1.c", library = dir / "gptc_abi1.so";
  std::ofstream(source) << "const unsigned gptc_emu_abi_version = 1;\n"
                           "void* gptc_emu_runtime;\n"
                           "unsigned char gptc_emu_checks;\n";
  const std::string command =
      "cc -shared -fPIC -o " + library.string() + " " + source.string() + " 2>/dev/null";
  if (std::system(command.c_str()) != 0) GTEST_SKIP() << "no C compiler";
  std::ifstream in(library, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto opened = rt::emu::KernelLibrary::Open(bytes, "old.gptx");
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().message(),
            fmt::format("old.gptx: its emulator library was built for ABI 1, not {}",
                        program::emu::kKernelAbiVersion));
  EXPECT_GE(program::emu::kKernelAbiVersion, 2u);
}

TEST(HostLoweringTest, AnIntrinsicWithoutEmulationIsRefusedByName) {
  const std::string ir = R"(
target triple = "nvptx64-nvidia-cuda"
declare i32 @llvm.nvvm.read.ptx.sreg.clock()
define void @k(ptr addrspace(1) %out) {
  %c = call i32 @llvm.nvvm.read.ptx.sreg.clock()
  store i32 %c, ptr addrspace(1) %out
  ret void
}
)";
  StatusOr<HostKernel> k = CompileLlvmTextForHost(ir, "k", "gptc_test_k");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().message(), "kernel k: host code: special register %clock has no emulation");
}

TEST(HostLoweringTest, InlineAsmWithoutEmulationIsRefusedByName) {
  const std::string ir = R"(
target triple = "nvptx64-nvidia-cuda"
define void @k(ptr addrspace(1) %out) {
  %x = call float asm "tanh.approx.f32 $0, $1;", "=f,f"(float 1.0)
  store float %x, ptr addrspace(1) %out
  ret void
}
)";
  StatusOr<HostKernel> k = CompileLlvmTextForHost(ir, "k", "gptc_test_k");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().message(),
            "kernel k: host code: inline asm \"tanh.approx.f32 $0, $1;\" has no emulation");
}

TEST(HostLoweringTest, BadIrNamesTheLine) {
  StatusOr<HostKernel> k = CompileLlvmTextForHost("define void @k( {", "k", "gptc_test_k");
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("kernel k: line 1:"), std::string::npos)
      << k.status().message();
}

}  // namespace
}  // namespace gptc::codegen
