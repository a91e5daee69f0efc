// Tensor-core kernels written with MLIR's NVVM operations (nvvm.ldmatrix,
// nvvm.mma.sync), lowered as the emitters' kernels are (lowering.h:
// LowerMlirText), run on the emulated device (Note [emulated warp matrix
// operations] in runtime/emu/warp_matrix.h) against a host matmul, and
// assembled by ptxas for sm_90a: the ground the flash attention kernels
// stand on.
//
// MLIR 19's nvvm.mma.sync verifier wants vector<2xf16> fragments for a bf16
// m16n8k16, which it then translates into an ill-typed call of
// llvm.nvvm.mma.m16n8k16.row.col.bf16 (whose fragments are i32): the bf16
// kernels call that intrinsic through llvm.call_intrinsic, the f16 ones use
// nvvm.mma.sync.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/lowering.h"
#include "compiler/support/float_bits.h"
#include "runtime/emu/grid_runner.h"
#include "runtime/emu/kernel_library.h"
#include "tests/compiler/codegen/emu_kernel_runner.h"

namespace gptc::codegen {
namespace {

enum class Type { kBf16, kF16 };

// C (M x N, f32) = A (M x K) * B (K x N), both row-major 16-bit, by one block
// of M / 16 warps: A and B go to shared memory; warp w computes rows 16w ..
// 16w + 15, one n-tile of 8 columns (B by ldmatrix.x2.trans) or, with
// `pairs`, two (B by ldmatrix.x4.trans), for k in steps of 16 (A by
// ldmatrix.x4).
struct GemmKernel {
  std::string name;
  int m = 16, n = 8, k = 16;
  Type type = Type::kBf16;
  bool pairs = false;
  int threads() const { return 2 * m; }
};

void ReplaceAll(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) {
    s.replace(at, from.size(), to);
  }
}

// One mma of fragments A = %a0..%a3, B = %b<B0>, %b<B1>, C = %x<C>..%x<C+3>
// into %d<D>.
std::string Mma(Type type, int b0, int c, int d) {
  std::string text;
  if (type == Type::kBf16) {
    text = R"(
          %d@D = llvm.call_intrinsic "llvm.nvvm.mma.m16n8k16.row.col.bf16"(%a0, %a1, %a2, %a3, %b@B0, %b@B1, %x@C0, %x@C1, %x@C2, %x@C3) : (i32, i32, i32, i32, i32, i32, f32, f32, f32, f32) -> !llvm.struct<(f32, f32, f32, f32)>)";
  } else {
    text = R"(
          %ha0_@D = llvm.bitcast %a0 : i32 to vector<2xf16>
          %ha1_@D = llvm.bitcast %a1 : i32 to vector<2xf16>
          %ha2_@D = llvm.bitcast %a2 : i32 to vector<2xf16>
          %ha3_@D = llvm.bitcast %a3 : i32 to vector<2xf16>
          %hb0_@D = llvm.bitcast %b@B0 : i32 to vector<2xf16>
          %hb1_@D = llvm.bitcast %b@B1 : i32 to vector<2xf16>
          %d@D = nvvm.mma.sync A[%ha0_@D, %ha1_@D, %ha2_@D, %ha3_@D] B[%hb0_@D, %hb1_@D] C[%x@C0, %x@C1, %x@C2, %x@C3]
            {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>,
             shape = #nvvm.shape<m = 16, n = 8, k = 16>}
            : (vector<2xf16>, vector<2xf16>, f32) -> !llvm.struct<(f32, f32, f32, f32)>)";
  }
  text += R"(
          %e@D0 = llvm.extractvalue %d@D[0] : !llvm.struct<(f32, f32, f32, f32)>
          %e@D1 = llvm.extractvalue %d@D[1] : !llvm.struct<(f32, f32, f32, f32)>
          %e@D2 = llvm.extractvalue %d@D[2] : !llvm.struct<(f32, f32, f32, f32)>
          %e@D3 = llvm.extractvalue %d@D[3] : !llvm.struct<(f32, f32, f32, f32)>)";
  for (int i = 0; i < 4; ++i) ReplaceAll(text, "@C" + std::to_string(i), std::to_string(c + i));
  for (int i = 0; i < 4; ++i) ReplaceAll(text, "@D" + std::to_string(i), std::to_string(4 * d + i));
  ReplaceAll(text, "@B0", std::to_string(b0));
  ReplaceAll(text, "@B1", std::to_string(b0 + 1));
  ReplaceAll(text, "@D", std::to_string(d));
  return text;
}

// Stores accumulators %acc#<4t>..<4t+3> of n-tile t (columns n0 + 8t ..).
std::string Store(int tile) {
  std::string text = R"(
        %col@T = arith.addi %ccol, %c@OFF : i32
        %i0_@T = arith.addi %crow0, %col@T : i32
        %i2_@T = arith.addi %crow8, %col@T : i32
        %p0_@T = llvm.getelementptr %c[%i0_@T] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
        %p1_@T = llvm.getelementptr %p0_@T[1] : (!llvm.ptr<1>) -> !llvm.ptr<1>, f32
        %p2_@T = llvm.getelementptr %c[%i2_@T] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
        %p3_@T = llvm.getelementptr %p2_@T[1] : (!llvm.ptr<1>) -> !llvm.ptr<1>, f32
        llvm.store %acc#@E0, %p0_@T : f32, !llvm.ptr<1>
        llvm.store %acc#@E1, %p1_@T : f32, !llvm.ptr<1>
        llvm.store %acc#@E2, %p2_@T : f32, !llvm.ptr<1>
        llvm.store %acc#@E3, %p3_@T : f32, !llvm.ptr<1>)";
  for (int i = 0; i < 4; ++i)
    ReplaceAll(text, "@E" + std::to_string(i), std::to_string(4 * tile + i));
  ReplaceAll(text, "@OFF", std::to_string(8 * tile));
  ReplaceAll(text, "@T", std::to_string(tile));
  return text;
}

std::string GemmMlir(const GemmKernel& g) {
  const int tiles = g.pairs ? 2 : 1;
  std::string text = R"(
module attributes {gpu.container_module} {
  gpu.module @kernels {
    llvm.mlir.global internal @a_tile() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<@MK x i16>
    llvm.mlir.global internal @b_tile() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<@KN x i16>
    gpu.func @@NAME(%a: !llvm.ptr<1>, %b: !llvm.ptr<1>, %c: !llvm.ptr<1>) kernel
        attributes {nvvm.maxntid = array<i32: @THREADS, 1, 1>} {
      %tid = nvvm.read.ptx.sreg.tid.x : i32
      %c0 = arith.constant 0 : i32
      %c2 = arith.constant 2 : i32
      %c4 = arith.constant 4 : i32
      %c8 = arith.constant 8 : i32
      %c16 = arith.constant 16 : i32
      %c32 = arith.constant 32 : i32
      %cn = arith.constant @N : i32
      %ck = arith.constant @K : i32
      %cmk = arith.constant @MK : i32
      %ckn = arith.constant @KN : i32
      %cthreads = arith.constant @THREADS : i32
      %cnstep = arith.constant @NSTEP : i32
      %zero = arith.constant 0.0 : f32
      %as = llvm.mlir.addressof @a_tile : !llvm.ptr<3>
      %bs = llvm.mlir.addressof @b_tile : !llvm.ptr<3>
      scf.for %i = %tid to %cmk step %cthreads : i32 {
        %src = llvm.getelementptr %a[%i] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i16
        %v = llvm.load %src : !llvm.ptr<1> -> i16
        %dst = llvm.getelementptr %as[%i] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i16
        llvm.store %v, %dst : i16, !llvm.ptr<3>
      }
      scf.for %i = %tid to %ckn step %cthreads : i32 {
        %src = llvm.getelementptr %b[%i] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i16
        %v = llvm.load %src : !llvm.ptr<1> -> i16
        %dst = llvm.getelementptr %bs[%i] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i16
        llvm.store %v, %dst : i16, !llvm.ptr<3>
      }
      nvvm.barrier0
      %warp = arith.divui %tid, %c32 : i32
      %lane = arith.remui %tid, %c32 : i32
      %l16 = arith.remui %lane, %c16 : i32
      %half = arith.divui %lane, %c16 : i32
      // ldmatrix rows: A row 16w + lane % 16 at column k0 + 8 (lane / 16);
      // B row k0 + lane % 16 at column n0 (+ 8 (lane / 16) for x4).
      %w16 = arith.muli %warp, %c16 : i32
      %arow = arith.addi %w16, %l16 : i32
      %arow_k = arith.muli %arow, %ck : i32
      %acol = arith.muli %half, %c8 : i32
      %bcol = arith.muli %half, %c@BCOL : i32
      // Accumulator rows 16w + lane / 4 and + 8, columns n0 + 2 (lane % 4).
      %q = arith.divui %lane, %c4 : i32
      %r = arith.remui %lane, %c4 : i32
      %row0 = arith.addi %w16, %q : i32
      %row8 = arith.addi %row0, %c8 : i32
      %crow0 = arith.muli %row0, %cn : i32
      %crow8 = arith.muli %row8, %cn : i32
      %r2 = arith.muli %r, %c2 : i32
      scf.for %n0 = %c0 to %cn step %cnstep : i32 {
        %acc:@ACCS = scf.for %k0 = %c0 to %ck step %c16 iter_args(@ITER) -> (@F32S) : i32 {
          %ak = arith.addi %k0, %acol : i32
          %ai = arith.addi %arow_k, %ak : i32
          %ap = llvm.getelementptr %as[%ai] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i16
          %af = nvvm.ldmatrix %ap {num = 4 : i32, layout = #nvvm.mma_layout<row>} : (!llvm.ptr<3>) -> !llvm.struct<(i32, i32, i32, i32)>
          %a0 = llvm.extractvalue %af[0] : !llvm.struct<(i32, i32, i32, i32)>
          %a1 = llvm.extractvalue %af[1] : !llvm.struct<(i32, i32, i32, i32)>
          %a2 = llvm.extractvalue %af[2] : !llvm.struct<(i32, i32, i32, i32)>
          %a3 = llvm.extractvalue %af[3] : !llvm.struct<(i32, i32, i32, i32)>
          %bk = arith.addi %k0, %l16 : i32
          %bk_n = arith.muli %bk, %cn : i32
          %bn = arith.addi %n0, %bcol : i32
          %bi = arith.addi %bk_n, %bn : i32
          %bp = llvm.getelementptr %bs[%bi] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i16
          %bf = nvvm.ldmatrix %bp {num = @BNUM : i32, layout = #nvvm.mma_layout<col>} : (!llvm.ptr<3>) -> @BTYPE
@BREGS
@MMAS
          scf.yield @YIELD : @F32S
        }
        %ccol = arith.addi %n0, %r2 : i32
@STORES
      }
      gpu.return
    }
  }
}
)";
  std::string iter, f32s, yield, bregs, mmas, stores;
  for (int i = 0; i < 4 * tiles; ++i) {
    iter += (i ? ", " : "") + std::string("%x") + std::to_string(i) + " = %zero";
    f32s += (i ? ", " : "") + std::string("f32");
    yield += (i ? ", " : "") + std::string("%e") + std::to_string(i);
  }
  const int bnum = 2 * tiles;
  const std::string btype =
      bnum == 2 ? "!llvm.struct<(i32, i32)>" : "!llvm.struct<(i32, i32, i32, i32)>";
  for (int i = 0; i < bnum; ++i) {
    bregs += "          %b" + std::to_string(i) + " = llvm.extractvalue %bf[" + std::to_string(i) +
             "] : " + btype + "\n";
  }
  for (int t = 0; t < tiles; ++t) {
    mmas += Mma(g.type, 2 * t, 4 * t, t);
    stores += Store(t);
  }
  ReplaceAll(text, "@NAME", g.name);
  ReplaceAll(text, "@MK", std::to_string(g.m * g.k));
  ReplaceAll(text, "@KN", std::to_string(g.k * g.n));
  ReplaceAll(text, "@THREADS", std::to_string(g.threads()));
  ReplaceAll(text, "@NSTEP", std::to_string(8 * tiles));
  ReplaceAll(text, "@N", std::to_string(g.n));
  ReplaceAll(text, "@K", std::to_string(g.k));
  ReplaceAll(text, "@BCOL", g.pairs ? "8" : "0");
  ReplaceAll(text, "@BNUM", std::to_string(bnum));
  ReplaceAll(text, "@BTYPE", btype);
  ReplaceAll(text, "@BREGS", bregs);
  ReplaceAll(text, "@MMAS", mmas);
  ReplaceAll(text, "@STORES", stores);
  ReplaceAll(text, "@ACCS", std::to_string(4 * tiles));
  ReplaceAll(text, "@ITER", iter);
  ReplaceAll(text, "@F32S", f32s);
  ReplaceAll(text, "@YIELD", yield);
  return text;
}

uint16_t ToBits(Type type, float x) {
  return type == Type::kBf16 ? F32ToBF16Bits(x) : F32ToF16Bits(x);
}
float FromBits(Type type, uint16_t bits) {
  return type == Type::kBf16 ? BF16BitsToF32(bits) : F16BitsToF32(bits);
}

uint64_t Ptr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// Runs `g` on random A, B with every check on; compares C with a host matmul.
void RunAndCompare(const GemmKernel& g) {
  StatusOr<EmuTextKernel> lowered = LowerForEmulator(GemmMlir(g), g.name);
  ASSERT_TRUE(lowered.ok()) << lowered.status().message();
  const HostKernel& host = *lowered->kernel.host;
  EXPECT_TRUE(host.uses_sync);
  EXPECT_GE(host.mmas, 1);  // O3 may unroll the loops: sites, not executions
  EXPECT_GE(host.ldmatrices, 2);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<uint16_t> a(g.m * g.k), b(g.k * g.n);
  for (uint16_t& x : a) x = ToBits(g.type, dist(rng));
  for (uint16_t& x : b) x = ToBits(g.type, dist(rng));
  std::vector<float> c(g.m * g.n, -1.0f);
  rt::emu::GridRunner runner(2);
  Status run = runner.Run(rt::emu::Launch{.kernel = g.name,
                                          .function = lowered->library->Symbol(host.symbol),
                                          .args = {Ptr(a.data()), Ptr(b.data()), Ptr(c.data())},
                                          .grid = {1, 1, 1},
                                          .block = {static_cast<uint32_t>(g.threads()), 1, 1},
                                          .static_shared = static_cast<uint32_t>(host.shared_bytes),
                                          .uses_sync = host.uses_sync,
                                          .checks = true});
  ASSERT_TRUE(run.ok()) << run.message();
  for (int i = 0; i < g.m; ++i) {
    for (int j = 0; j < g.n; ++j) {
      double sum = 0, magnitude = 0;
      for (int k = 0; k < g.k; ++k) {
        const double p = static_cast<double>(FromBits(g.type, a[i * g.k + k])) *
                         FromBits(g.type, b[k * g.n + j]);
        sum += p;
        magnitude += std::abs(p);
      }
      // Note [emulated warp matrix operations]: a few f32 ulps of the terms.
      ASSERT_NEAR(c[i * g.n + j], sum, 4 * magnitude * 0x1p-24 + 1e-30) << i << "," << j;
    }
  }
}

TEST(WarpMatrixTest, Bf16TileProductRunsOnTheEmulator) {
  RunAndCompare({.name = "mma_bf16_16x8x16"});
}

TEST(WarpMatrixTest, F16TileProductRunsOnTheEmulator) {
  RunAndCompare({.name = "mma_f16_16x8x16", .type = Type::kF16});
}

// Four warps, each 16 rows by 64 columns in pairs of n-tiles, K in 4 steps:
// the accumulators carry C from one mma to the next.
TEST(WarpMatrixTest, WarpTiledBf16GemmRunsOnTheEmulator) {
  RunAndCompare({.name = "mma_bf16_64x64x64", .m = 64, .n = 64, .k = 64, .pairs = true});
}

TEST(WarpMatrixTest, WarpTiledF16GemmRunsOnTheEmulator) {
  RunAndCompare(
      {.name = "mma_f16_64x32x32", .m = 64, .n = 32, .k = 32, .type = Type::kF16, .pairs = true});
}

// The same kernels through the NVPTX backend and ptxas, for the GPU.
TEST(WarpMatrixTest, KernelsAssembleForSm90a) {
  std::optional<std::string> ptxas = FindPtxas();
  if (!ptxas) GTEST_SKIP() << "no ptxas";
  for (const GemmKernel& g :
       {GemmKernel{.name = "mma_bf16_16x8x16"},
        GemmKernel{.name = "mma_f16_16x8x16", .type = Type::kF16},
        GemmKernel{.name = "mma_bf16_64x64x64", .m = 64, .n = 64, .k = 64, .pairs = true}}) {
    StatusOr<LoweredKernel> lowered = LowerMlirText(GemmMlir(g), g.name, CodegenOptions{});
    ASSERT_TRUE(lowered.ok()) << lowered.status().message();
    const std::string& ptx = lowered->ptx;
    EXPECT_NE(ptx.find(g.type == Type::kBf16 ? "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
                                             : "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
              std::string::npos)
        << ptx;
    EXPECT_NE(ptx.find("ldmatrix.sync.aligned.m8n8.x4.shared.b16"), std::string::npos) << ptx;
    EXPECT_NE(ptx.find(g.pairs ? "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
                               : "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16"),
              std::string::npos)
        << ptx;
    StatusOr<PtxasInfo> info = RunPtxas(*ptxas, ptx, g.name, "sm_90a");
    ASSERT_TRUE(info.ok()) << info.status().message();
    EXPECT_GT(info->registers, 0);
    EXPECT_EQ(info->spill_stores, 0);
    std::printf("kernel %s: %ld registers, %ld bytes smem\n", g.name.c_str(),
                static_cast<long>(info->registers), static_cast<long>(info->shared_bytes));
  }
}

TEST(WarpMatrixTest, UnparsableMlirNamesTheKernel) {
  StatusOr<LoweredKernel> lowered = LowerMlirText("module {", "k", CodegenOptions{});
  ASSERT_FALSE(lowered.ok());
  EXPECT_EQ(lowered.status().message().rfind("kernel k: cannot parse its MLIR: ", 0), 0)
      << lowered.status().message();
}

}  // namespace
}  // namespace gptc::codegen
