// Warpgroup matrix kernels written in MLIR with the inline PTX of
// compiler/codegen/wgmma_asm.h, lowered as the emitters' kernels are
// (lowering.h: LowerMlirText), run on the emulated device (runtime/emu/
// warpgroup.h) against a host matmul, and assembled by ptxas for sm_90a:
// every swizzle mode, both majors of A and B, A from shared memory and from
// registers, chains of k-steps; then the seeded defects of Note [emulated
// wgmma asynchrony], each one line naming the instruction and the thread.
//
// The operands' shared-memory images are laid out on the host by the PTX
// ISA's pictures (tests/testing/wgmma_layouts.h), copied into shared memory
// 16 bytes at a time, and read by descriptors the kernel builds from the
// tiles' addresses.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/lowering.h"
#include "compiler/codegen/wgmma_asm.h"
#include "compiler/support/float_bits.h"
#include "runtime/emu/grid_runner.h"
#include "runtime/emu/kernel_library.h"
#include "runtime/emu/warpgroup_matrix.h"
#include "tests/compiler/codegen/emu_kernel_runner.h"
#include "tests/testing/wgmma_layouts.h"

namespace gptc::codegen {
namespace {

using rt::emu::MatrixDescriptor;

// How an operand (rows x k, 16-bit) lies in its tile: the canonical layout
// of `swizzle` bytes (0: none), K-major or MN-major, k-steps of 16 one after
// the other.
struct OperandLayout {
  uint32_t swizzle = 128;
  bool mn_major = false;
  uint32_t rows = 64, k = 16;

  // Whole rows of atoms: a K-major row of W bytes may hold more K than k.
  uint32_t bytes() const {
    if (swizzle == 0) return rows * k * 2;
    return mn_major ? (2 * rows + swizzle - 1) / swizzle * k * swizzle
                    : (2 * k + swizzle - 1) / swizzle * rows * swizzle;
  }
  // The descriptor of k-step `s`, its start relative to the tile.
  MatrixDescriptor Step(uint32_t s) const {
    const uint32_t w = swizzle;
    if (w == 0) {
      // Core matrices of 8 x 16 bytes: K-major [k / 8][rows / 8], MN-major [rows / 8][k / 8].
      return mn_major ? MatrixDescriptor{.start = 2 * s * 128, .lbo = 128, .sbo = k / 8 * 128}
                      : MatrixDescriptor{
                            .start = 2 * s * rows / 8 * 128, .lbo = rows / 8 * 128, .sbo = 128};
    }
    // K-major: columns of atoms of W / 2 K elements, [column][rows][W]; MN-major:
    // columns of W / 2 rows, [column][k][W].
    return mn_major
               ? MatrixDescriptor{.start = 16 * s * w, .lbo = k * w, .sbo = 8 * w, .swizzle = w}
               : MatrixDescriptor{.start = 32 * s / w * rows * w + 32 * s % w,
                                  .lbo = 16,
                                  .sbo = 8 * w,
                                  .swizzle = w};
  }
  // The tile's image of `m` (rows x k, row-major 16-bit elements).
  std::vector<uint16_t> Image(const std::vector<uint16_t>& m) const {
    std::vector<uint16_t> image(bytes() / 2, 0);
    std::vector<bool> taken(image.size());
    for (uint32_t r = 0; r < rows; ++r) {
      for (uint32_t kk = 0; kk < k; ++kk) {
        const uint32_t at = testing::PictureAddress(Step(kk / 16), mn_major, r, kk % 16);
        if (at >= bytes() || taken[at / 2]) {
          ADD_FAILURE() << "element (" << r << ", " << kk << ") at " << at;
          return image;
        }
        taken[at / 2] = true;
        image[at / 2] = m[r * k + kk];
      }
    }
    return image;
  }
};

// What the kernel gets wrong, if anything (Note [emulated wgmma asynchrony]).
enum class Defect {
  kNone,
  kNoWait,           // no wgmma.wait_group before the register fence
  kNoFence,          // no wgmma.fence before the first wgmma
  kNoProxyFence,     // the tiles' stores not fenced for the async proxy
  kNoBarrier,        // no barrier between the tiles' stores and the wgmma
  kOverwrite,        // a store into B's tile before the wait
  kBadDescriptor,    // B's stride byte offset past the tile
  kNoRegisterFence,  // D stored without the register fence
};

// D (64 x N, f32, per thread: d[t][N / 2]) = A (64 x K) B (K x N) [+ C] by
// one warpgroup: k / 16 chained wgmma.
struct WgmmaKernel {
  std::string name;
  uint32_t n = 64, k = 16;
  bool register_a = false;
  OperandLayout a{.rows = 64}, b{.rows = 64};  // b.rows = n
  bool use_c = false;
  Defect defect = Defect::kNone;
};

void ReplaceAll(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) {
    s.replace(at, from.size(), to);
  }
}

// `a` as an MLIR string literal.
std::string Quoted(const InlineAsm& a) {
  std::string text = a.text;
  ReplaceAll(text, "\\", "\\5C");
  ReplaceAll(text, "\n", "\\0A");
  ReplaceAll(text, "\"", "\\22");
  return fmt::format("\"{}\", \"{}\"", text, a.constraints);
}

std::string Struct(uint32_t count) {
  std::string out = "!llvm.struct<(";
  for (uint32_t i = 0; i < count; ++i) out += i ? ", f32" : "f32";
  return out + ")>";
}

// %name<i> = llvm.extractvalue %from[i] for each of `count` registers.
std::string Extract(const std::string& name, const std::string& from, uint32_t count) {
  std::string out;
  for (uint32_t i = 0; i < count; ++i) {
    out += fmt::format("      %{}{} = llvm.extractvalue %{}[{}] : {}\n", name, i, from, i,
                       Struct(count));
  }
  return out;
}

std::string List(const std::string& name, uint32_t count, const std::string& sep = ", ") {
  std::string out;
  for (uint32_t i = 0; i < count; ++i) out += fmt::format("{}%{}{}", i ? sep : "", name, i);
  return out;
}

// The tile's copy from global memory, 16 bytes a thread a trip.
std::string Copy(const std::string& from, const std::string& to, uint32_t bytes) {
  return fmt::format(R"(
      %{1}_bytes = arith.constant {2} : i32
      scf.for %i = %t16 to %{1}_bytes step %c2048 : i32 {{
        %src = llvm.getelementptr %{0}[%i] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i8
        %v = llvm.load %src {{alignment = 16 : i64}} : !llvm.ptr<1> -> vector<4xi32>
        %dst = llvm.getelementptr %{1}[%i] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
        llvm.store %v, %dst {{alignment = 16 : i64}} : vector<4xi32>, !llvm.ptr<3>
      }})",
                     from, to, bytes);
}

// %<name>_<s> = the descriptor of k-step s of operand `layout` in tile %<tile>.
std::string Descriptors(const std::string& name, const std::string& tile,
                        const OperandLayout& layout, uint32_t steps, Defect defect) {
  std::string out =
      fmt::format("      %{0}_addr = llvm.ptrtoint %{0} : !llvm.ptr<3> to i64\n", tile);
  for (uint32_t s = 0; s < steps; ++s) {
    MatrixDescriptor d = layout.Step(s);
    const uint32_t start = d.start;
    d.start = 0;
    if (defect == Defect::kBadDescriptor && name == "db") d.sbo = 16 * 1024;
    out += fmt::format(R"(      %{0}_o{1} = arith.constant {2} : i64
      %{0}_a{1} = arith.addi %{3}_addr, %{0}_o{1} : i64
      %{0}_s{1} = arith.shrui %{0}_a{1}, %c4_64 : i64
      %{0}_m{1} = arith.andi %{0}_s{1}, %c16383 : i64
      %{0}_k{1} = arith.constant {4} : i64
      %{0}_{1} = arith.ori %{0}_m{1}, %{0}_k{1} : i64
)",
                       name, s, start, tile, static_cast<int64_t>(rt::emu::EncodeDescriptor(d)));
  }
  return out;
}

// The operands' layouts with the kernel's K.
OperandLayout ALayout(const WgmmaKernel& g) {
  OperandLayout a = g.a;
  a.k = g.k;
  return a;
}
OperandLayout BLayout(const WgmmaKernel& g) {
  OperandLayout b = g.b;
  b.k = g.k;
  return b;
}

std::string KernelMlir(const WgmmaKernel& g) {
  const uint32_t r = g.n / 2, steps = g.k / 16;
  const OperandLayout a = ALayout(g), b = BLayout(g);
  const WgmmaForm form{.n = g.n,
                       .register_a = g.register_a,
                       .trans_a = !g.register_a && a.mn_major,
                       .trans_b = b.mn_major};
  std::string body;
  if (!g.register_a) body += Copy("a", "a_tile", a.bytes());
  body += Copy("b", "b_tile", b.bytes()) + "\n";
  if (g.defect != Defect::kNoProxyFence) {
    body +=
        "      llvm.inline_asm has_side_effects " + Quoted(FenceProxyAsyncAsm()) + " : () -> ()\n";
  }
  if (g.defect != Defect::kNoBarrier) body += "      nvvm.barrier0\n";
  if (!g.register_a) body += Descriptors("da", "a_tile", a, steps, g.defect);
  body += Descriptors("db", "b_tile", b, steps, g.defect);
  // C: this thread's registers, or zeros that scale-d = 0 ignores.
  for (uint32_t i = 0; i < r; ++i) {
    if (g.use_c) {
      body += fmt::format(R"(      %ci{0} = arith.constant {0} : i32
      %cj{0} = arith.addi %tr, %ci{0} : i32
      %cp{0} = llvm.getelementptr %c[%cj{0}] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
      %x0_{0} = llvm.load %cp{0} : !llvm.ptr<1> -> f32
)",
                          i);
    } else {
      body += fmt::format("      %x0_{0} = arith.constant 0.0 : f32\n", i);
    }
  }
  if (g.defect != Defect::kNoFence) {
    body += "      llvm.inline_asm has_side_effects " + Quoted(WgmmaFenceAsm()) + " : () -> ()\n";
  }
  const InlineAsm wgmma = WgmmaAsm(form);
  for (uint32_t s = 0; s < steps; ++s) {
    std::string operands, types;
    if (g.register_a) {
      for (uint32_t j = 0; j < 4; ++j) {
        body += fmt::format(R"(      %ai{0}_{1} = arith.constant {2} : i32
      %aj{0}_{1} = arith.addi %t4, %ai{0}_{1} : i32
      %ap{0}_{1} = llvm.getelementptr %a[%aj{0}_{1}] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      %a{0}_{1} = llvm.load %ap{0}_{1} : !llvm.ptr<1> -> i32
)",
                            s, j, s * 128 * 4 + j);
        operands += fmt::format("%a{}_{}, ", s, j);
        types += "i32, ";
      }
    } else {
      operands += fmt::format("%da_{}, ", s);
      types += "i64, ";
    }
    operands += fmt::format("%db_{}, {}, ", s, s == 0 && !g.use_c ? "%c0" : "%c1");
    types += "i64, i32";
    for (uint32_t i = 0; i < r; ++i) {
      operands += fmt::format("{}%x{}_{}", i ? ", " : "", s, i);
      types += ", f32";
    }
    body += fmt::format("      %w{} = llvm.inline_asm has_side_effects {} {} : ({}) -> {}\n", s,
                        Quoted(wgmma), operands, types, Struct(r));
    body += Extract(fmt::format("x{}_", s + 1), fmt::format("w{}", s), r);
  }
  body += "      llvm.inline_asm has_side_effects " + Quoted(WgmmaCommitAsm()) + " : () -> ()\n";
  if (g.defect == Defect::kOverwrite) {
    body += R"(      %zero16 = arith.constant dense<0> : vector<4xi32>
      %over = llvm.getelementptr %b_tile[%t16] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      llvm.store %zero16, %over {alignment = 16 : i64} : vector<4xi32>, !llvm.ptr<3>
)";
  }
  if (g.defect != Defect::kNoWait) {
    body += "      llvm.inline_asm has_side_effects " + Quoted(WgmmaWaitAsm(0)) + " : () -> ()\n";
  }
  std::string result = fmt::format("x{}_", steps);
  if (g.defect != Defect::kNoRegisterFence) {
    std::string types;
    for (uint32_t i = 0; i < r; ++i) types += i ? ", f32" : "f32";
    body += fmt::format("      %fenced = llvm.inline_asm has_side_effects {} {} : ({}) -> {}\n",
                        Quoted(WgmmaRegisterFenceAsm(r)), List(result, r), types, Struct(r));
    body += Extract("y", "fenced", r);
    result = "y";
  }
  for (uint32_t i = 0; i < r; ++i) {
    body += fmt::format(R"(      %di{0} = arith.constant {0} : i32
      %dj{0} = arith.addi %tr, %di{0} : i32
      %dp{0} = llvm.getelementptr %d[%dj{0}] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
      llvm.store %{1}{0}, %dp{0} : f32, !llvm.ptr<1>
)",
                        i, result);
  }
  std::string text = R"(
module attributes {gpu.container_module} {
  gpu.module @kernels {
    llvm.mlir.global internal @a_tile() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<@ABYTES x i8>
    llvm.mlir.global internal @b_tile() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<@BBYTES x i8>
    gpu.func @@NAME(%a: !llvm.ptr<1>, %b: !llvm.ptr<1>, %c: !llvm.ptr<1>, %d: !llvm.ptr<1>) kernel
        attributes {nvvm.maxntid = array<i32: 128, 1, 1>} {
      %tid = nvvm.read.ptx.sreg.tid.x : i32
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c4 = arith.constant 4 : i32
      %c16 = arith.constant 16 : i32
      %c2048 = arith.constant 2048 : i32
      %c4_64 = arith.constant 4 : i64
      %c16383 = arith.constant 16383 : i64
      %cr = arith.constant @R : i32
      %t16 = arith.muli %tid, %c16 : i32
      %t4 = arith.muli %tid, %c4 : i32
      %tr = arith.muli %tid, %cr : i32
      %a_tile = llvm.mlir.addressof @a_tile : !llvm.ptr<3>
      %b_tile = llvm.mlir.addressof @b_tile : !llvm.ptr<3>
@BODY      gpu.return
    }
  }
}
)";
  ReplaceAll(text, "@ABYTES", std::to_string(g.register_a ? 16 : a.bytes()));
  ReplaceAll(text, "@BBYTES", std::to_string(b.bytes()));
  ReplaceAll(text, "@NAME", g.name);
  ReplaceAll(text, "@R", std::to_string(r));
  ReplaceAll(text, "@BODY", body);
  return text;
}

uint64_t Ptr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// Runs `g` on random operands; the run's status, and with `compare` D
// against the host matmul.
Status RunKernel(const WgmmaKernel& g, bool compare, uint32_t threads = 128, bool checks = true) {
  StatusOr<EmuTextKernel> lowered = LowerForEmulator(KernelMlir(g), g.name);
  if (!lowered.ok()) return lowered.status();
  const HostKernel& host = *lowered->kernel.host;
  EXPECT_TRUE(host.uses_sync);
  EXPECT_EQ(host.wgmmas, g.k / 16);
  lowered->library->SetChecks(checks);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  const uint32_t r = g.n / 2;
  std::vector<uint16_t> a(64 * g.k), bt(g.n * g.k);  // A (64 x K), B^T (N x K)
  for (uint16_t& x : a) x = F32ToBF16Bits(dist(rng));
  for (uint16_t& x : bt) x = F32ToBF16Bits(dist(rng));
  std::vector<uint16_t> a_image;
  if (g.register_a) {
    // [k-step][thread][4 registers]: Note [emulated warpgroup matrix operations].
    for (uint32_t s = 0; s < g.k / 16; ++s) {
      for (uint32_t t = 0; t < 128; ++t) {
        for (uint32_t j = 0; j < 4; ++j) {
          uint32_t row, col;
          rt::emu::RegisterAElement(t, j, &row, &col);
          a_image.push_back(a[row * g.k + 16 * s + col]);
          a_image.push_back(a[row * g.k + 16 * s + col + 1]);
        }
      }
    }
  } else {
    a_image = ALayout(g).Image(a);
  }
  const std::vector<uint16_t> b_image = BLayout(g).Image(bt);
  std::vector<float> c(128 * r), d(128 * r, -1.0f);
  for (float& x : c) x = dist(rng);
  rt::emu::GridRunner runner(2);
  RETURN_IF_ERROR(runner.Run(rt::emu::Launch{
      .kernel = g.name,
      .function = lowered->library->Symbol(host.symbol),
      .args = {Ptr(a_image.data()), Ptr(b_image.data()), Ptr(c.data()), Ptr(d.data())},
      .grid = {1, 1, 1},
      .block = {threads, 1, 1},
      .static_shared = static_cast<uint32_t>(host.shared_bytes),
      .uses_sync = host.uses_sync,
      .warpgroups = host.wgmmas > 0,
      .checks = checks}));
  for (uint32_t t = 0; t < 128 && compare; ++t) {
    for (uint32_t reg = 0; reg < r; ++reg) {
      uint32_t i, j;
      rt::emu::AccumulatorElement(t, reg, &i, &j);
      double sum = g.use_c ? c[t * r + reg] : 0.0, magnitude = std::abs(sum);
      for (uint32_t kk = 0; kk < g.k; ++kk) {
        const double p =
            static_cast<double>(BF16BitsToF32(a[i * g.k + kk])) * BF16BitsToF32(bt[j * g.k + kk]);
        sum += p;
        magnitude += std::abs(p);
      }
      // One rounding per k-step (Note [emulated warpgroup matrix operations]).
      EXPECT_NEAR(d[t * r + reg], sum, g.k / 16 * magnitude * 0x1p-23 + 1e-30)
          << g.name << " D[" << i << "][" << j << "]";
    }
  }
  return Status::Ok();
}

// Every swizzle mode of both operands, K-major and MN-major.
TEST(WgmmaTest, SharedOperandsInEveryLayoutRunOnTheEmulator) {
  for (uint32_t swizzle : {0u, 32u, 64u, 128u}) {
    for (bool mn_a : {false, true}) {
      for (bool mn_b : {false, true}) {
        WgmmaKernel g{
            .name = fmt::format("wgmma_ss_sw{}_{}{}", swizzle, mn_a ? "m" : "k", mn_b ? "n" : "k"),
            .n = 64,
            .k = 32,
            .a = {.swizzle = swizzle, .mn_major = mn_a, .rows = 64},
            .b = {.swizzle = swizzle, .mn_major = mn_b, .rows = 64},
            .use_c = mn_a};
        SCOPED_TRACE(g.name);
        const Status s = RunKernel(g, true);
        ASSERT_TRUE(s.ok()) << s.message();
      }
    }
  }
}

// The attention kernels' form: A (q, p, ds) in registers, B in 128- or
// 32-byte swizzled tiles; N from 8 to 256 and a chain of four k-steps.
TEST(WgmmaTest, RegisterAChainsRunOnTheEmulator) {
  for (auto [n, swizzle, mn_b] :
       {std::tuple{64u, 128u, false}, std::tuple{64u, 128u, true}, std::tuple{16u, 32u, true},
        std::tuple{8u, 0u, false}, std::tuple{256u, 64u, false}, std::tuple{128u, 128u, true}}) {
    WgmmaKernel g{.name = fmt::format("wgmma_rs_n{}_sw{}_{}", n, swizzle, mn_b ? "n" : "k"),
                  .n = n,
                  .k = 64,
                  .register_a = true,
                  .b = {.swizzle = swizzle, .mn_major = mn_b, .rows = n},
                  .use_c = true};
    SCOPED_TRACE(g.name);
    const Status s = RunKernel(g, true);
    ASSERT_TRUE(s.ok()) << s.message();
  }
}

TEST(WgmmaTest, RunsWithTheChecksOff) {
  const WgmmaKernel g{.name = "wgmma_unchecked", .k = 32, .register_a = true};
  const Status s = RunKernel(g, true, 128, /*checks=*/false);
  ASSERT_TRUE(s.ok()) << s.message();
}

// Each defect is one line naming the thread (or warpgroup) and the instruction.
TEST(WgmmaTest, SeededDefectsAreOneLineNamingTheInstruction) {
  struct Case {
    Defect defect;
    const char* finding;
    uint32_t threads = 128;
  };
  for (const Case& c :
       {Case{Defect::kNoWait,
             "thread (0,0,0): register fence #0 takes accumulator d[0] of wgmma #0 "
             "(wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16) before a "
             "wgmma.wait_group retired its group"},
        Case{Defect::kNoRegisterFence,
             "of wgmma #0 (wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16) without the "
             "register fence that follows its wgmma.wait_group"},
        Case{Defect::kOverwrite,
             "thread (0,0,0): store of 16 bytes at shared offset 8192 overwrites what "
             "wgmma #0 (wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16) of warpgroup 0 "
             "reads, in flight: thread 0 has not retired it"},
        Case{Defect::kNoFence,
             "thread (0,0,0): wgmma #0 (wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16) "
             "with no wgmma.fence"},
        Case{Defect::kNoProxyFence,
             "no fence.proxy.async.shared::cta since (a wgmma reads shared memory through the "
             "async proxy)"},
        Case{Defect::kNoBarrier, "after the block's last barrier (no barrier between"},
        Case{Defect::kBadDescriptor,
             "block (0,0,0) warpgroup 0: wgmma #0 "
             "(wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16): element (0, 8) of B "
             "(descriptor"},
        Case{Defect::kNone,
             "wgmma #0 (wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16) "
             "needs all 128 threads of the warpgroup (.aligned), but the block "
             "has only 96 of them",
             96}}) {
    const WgmmaKernel g{.name = fmt::format("wgmma_defect_{}", static_cast<int>(c.defect)),
                        .a = {.swizzle = 128},
                        .b = {.swizzle = 128},
                        .defect = c.defect};
    SCOPED_TRACE(g.name);
    const Status s = RunKernel(g, false, c.threads);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(c.finding), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  }
}

// The same kernels through the NVPTX backend and ptxas, for the GPU: each
// wgmma's PTX, and no warning (ptxas says when it must serialize a wgmma
// pipeline).
TEST(WgmmaTest, KernelsAssembleForSm90a) {
  std::optional<std::string> ptxas = FindPtxas();
  if (!ptxas) GTEST_SKIP() << "no ptxas";
  for (const WgmmaKernel& g :
       {WgmmaKernel{.name = "wgmma_ss_ptx", .k = 32, .a = {.swizzle = 64}, .b = {.mn_major = true}},
        WgmmaKernel{.name = "wgmma_rs_ptx",
        .n = 16,
        .k = 64,
        .register_a = true,
        .b = {.swizzle = 32, .mn_major = true, .rows = 16},
        .use_c = true}}) {
    StatusOr<LoweredKernel> lowered = LowerMlirText(KernelMlir(g), g.name, CodegenOptions{});
    ASSERT_TRUE(lowered.ok()) << lowered.status().message();
    const std::string& ptx = lowered->ptx;
    EXPECT_NE(ptx.find(fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.bf16.bf16", g.n)),
              std::string::npos)
        << ptx;
    EXPECT_NE(ptx.find("wgmma.wait_group.sync.aligned 0;"), std::string::npos) << ptx;
    EXPECT_NE(ptx.find("fence.proxy.async.shared::cta;"), std::string::npos) << ptx;
    StatusOr<PtxasInfo> info = RunPtxas(*ptxas, ptx, g.name, "sm_90a");
    ASSERT_TRUE(info.ok()) << info.status().message();
    EXPECT_TRUE(info->warnings.empty()) << info->warnings.front();
    EXPECT_EQ(info->spill_stores, 0);
    std::printf("kernel %s: %ld registers, %ld bytes smem\n", g.name.c_str(),
                static_cast<long>(info->registers), static_cast<long>(info->shared_bytes));
  }
}

// The inline asm texts round-trip through their recognizer, and nothing
// else is recognized.
TEST(WgmmaAsmTest, RecognizesExactlyItsOwnTexts) {
  for (const WgmmaForm& form :
       {WgmmaForm{.n = 64}, WgmmaForm{.n = 8, .register_a = false, .trans_a = true},
        WgmmaForm{.n = 256, .f16 = true, .trans_b = true, .neg_a = true, .neg_b = true}}) {
    const InlineAsm a = WgmmaAsm(form);
    std::optional<WarpgroupAsm> wg = RecognizeWarpgroupAsm(a.text, a.constraints);
    ASSERT_TRUE(wg.has_value()) << a.text;
    EXPECT_EQ(wg->kind, WarpgroupAsm::Kind::kWgmma);
    EXPECT_TRUE(wg->wgmma == form) << a.text;
    // A change of one character, or of the constraints, is not recognized.
    std::string other = a.text;
    other[other.find("p, ") + 3] = other[other.find("p, ") + 3] == '1' ? '0' : '1';
    EXPECT_FALSE(RecognizeWarpgroupAsm(other, a.constraints)) << other;
    EXPECT_FALSE(RecognizeWarpgroupAsm(a.text, a.constraints + ",r"));
  }
  EXPECT_EQ(WgmmaAsm(WgmmaForm{.n = 16}).text,
            "{\n.reg .pred p;\nsetp.ne.b32 p, $13, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
            "{$0, $1, $2, $3, $4, $5, $6, $7}, {$8, $9, $10, $11}, $12, p, 1, 1, 0;\n}");
  EXPECT_EQ(WgmmaAsm(WgmmaForm{.n = 16}).constraints,
            "=f,=f,=f,=f,=f,=f,=f,=f,r,r,r,r,l,r,0,1,2,3,4,5,6,7,~{memory}");
  std::optional<WarpgroupAsm> wait = RecognizeWarpgroupAsm(WgmmaWaitAsm(1).text, "~{memory}");
  ASSERT_TRUE(wait.has_value());
  EXPECT_EQ(wait->kind, WarpgroupAsm::Kind::kWait);
  EXPECT_EQ(wait->count, 1);
  const InlineAsm fence = WgmmaRegisterFenceAsm(3);
  EXPECT_EQ(fence.constraints, "=f,=f,=f,0,1,2,~{memory}");
  std::optional<WarpgroupAsm> regs = RecognizeWarpgroupAsm(fence.text, fence.constraints);
  ASSERT_TRUE(regs.has_value());
  EXPECT_EQ(regs->kind, WarpgroupAsm::Kind::kRegisterFence);
  EXPECT_EQ(regs->count, 3);
  EXPECT_FALSE(RecognizeWarpgroupAsm("", "=r,0,~{memory}"));
  EXPECT_FALSE(RecognizeWarpgroupAsm("wgmma.wait_group.sync.aligned 9;", "~{memory}"));
  EXPECT_FALSE(RecognizeWarpgroupAsm("rcp.approx.ftz.f32 $0,$1;", "=f,f"));
}

}  // namespace
}  // namespace gptc::codegen
