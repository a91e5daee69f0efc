// The warp matrix instructions of the emulated device (runtime/emu/
// warp_matrix.h) with kernels written in C++ against the emulator ABI, as
// host-compiled kernels call it: every lane's fragments of mma.m16n8k16 and
// ldmatrix.m8n8 against the PTX ISA's layout formulas, written out here
// element by element as the ISA states them, and the defects of .aligned
// instructions that not every lane of the warp executes.
#include "runtime/emu/warp_matrix.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "compiler/support/float_bits.h"
#include "runtime/emu/grid_runner.h"

namespace gptc::rt::emu {
namespace {

namespace abi = program::emu;

const abi::EmuRuntime& Rt() { return *GridRunner::Table(); }
uint32_t Tid() { return Rt().special_register(abi::kTidX); }
uint32_t Lane() { return Rt().special_register(abi::kLaneId); }

Launch MakeLaunch(KernelFunction f, std::vector<uint64_t> args, uint32_t block, uint32_t shared = 0,
                  bool sync = true) {
  return Launch{.kernel = "test",
                .function = f,
                .args = std::move(args),
                .grid = Dim3{1, 1, 1},
                .block = Dim3{block, 1, 1},
                .static_shared = shared,
                .uses_sync = sync,
                .checks = true};
}

uint64_t Ptr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type".
// Element i of a lane's A fragment (a0..a7, two per register):
int ARow(uint32_t lane, int i) { return (i < 2 || (i >= 4 && i < 6)) ? lane / 4 : lane / 4 + 8; }
int ACol(uint32_t lane, int i) { return lane % 4 * 2 + (i & 1) + (i >= 4 ? 8 : 0); }
// Element i of B (b0..b3): row (k) and column (n).
int BRow(uint32_t lane, int i) { return lane % 4 * 2 + (i & 1) + (i >= 2 ? 8 : 0); }
int BCol(uint32_t lane, int) { return lane / 4; }
// Element i of C and D (c0..c3).
int CRow(uint32_t lane, int i) { return i < 2 ? lane / 4 : lane / 4 + 8; }
int CCol(uint32_t lane, int i) { return lane % 4 * 2 + (i & 1); }

// args: A (16x16, 16-bit, row-major), B (16x8, k x n, row-major), C and D
// (16x8 f32): every lane gathers its fragments by the formulas above.
template <uint32_t kOp>
void MmaOfGlobals(const uint64_t* args) {
  const auto* a = reinterpret_cast<const uint16_t*>(args[0]);
  const auto* b = reinterpret_cast<const uint16_t*>(args[1]);
  const auto* c = reinterpret_cast<const float*>(args[2]);
  auto* d = reinterpret_cast<float*>(args[3]);
  const uint32_t lane = Lane();
  uint32_t regs[abi::kMmaFragmentRegs] = {};
  for (int i = 0; i < 8; ++i) {
    regs[i / 2] |= uint32_t{a[ARow(lane, i) * 16 + ACol(lane, i)]} << (16 * (i % 2));
  }
  for (int i = 0; i < 4; ++i) {
    regs[abi::kMmaARegs + i / 2] |= uint32_t{b[BRow(lane, i) * 8 + BCol(lane, i)]}
                                    << (16 * (i % 2));
  }
  for (int i = 0; i < 4; ++i) {
    std::memcpy(&regs[abi::kMmaARegs + abi::kMmaBRegs + i], &c[CRow(lane, i) * 8 + CCol(lane, i)],
                4);
  }
  float out[4];
  Rt().mma(kOp, regs, out, 0);
  for (int i = 0; i < 4; ++i) d[CRow(lane, i) * 8 + CCol(lane, i)] = out[i];
}

template <uint32_t kOp>
void CheckMma(uint16_t (*to_bits)(float), float (*from_bits)(uint16_t)) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<uint16_t> a(16 * 16), b(16 * 8);
  std::vector<float> c(16 * 8), d(16 * 8, -1.0f);
  for (uint16_t& x : a) x = to_bits(dist(rng));
  for (uint16_t& x : b) x = to_bits(dist(rng));
  for (float& x : c) x = dist(rng);
  GridRunner runner(1);
  Status s = runner.Run(MakeLaunch(
      &MmaOfGlobals<kOp>, {Ptr(a.data()), Ptr(b.data()), Ptr(c.data()), Ptr(d.data())}, 32));
  ASSERT_TRUE(s.ok()) << s.message();
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 8; ++j) {
      // Note [emulated warp matrix operations]: C first, k ascending, in
      // double, rounded once.
      double sum = c[i * 8 + j];
      for (int k = 0; k < 16; ++k) {
        sum += static_cast<double>(from_bits(a[i * 16 + k])) * from_bits(b[k * 8 + j]);
      }
      EXPECT_EQ(d[i * 8 + j], static_cast<float>(sum)) << i << "," << j;
    }
  }
}

TEST(WarpMatrixTest, Bf16MmaFollowsThePtxFragmentLayout) {
  CheckMma<abi::kMmaM16N8K16Bf16>(&F32ToBF16Bits, &BF16BitsToF32);
}

TEST(WarpMatrixTest, F16MmaFollowsThePtxFragmentLayout) {
  CheckMma<abi::kMmaM16N8K16F16>(&F32ToF16Bits, &F16BitsToF32);
}

// Shared memory: 4 matrices of 8 rows of 8 elements, rows 32 bytes apart;
// element (m, r, c) holds m * 64 + r * 8 + c. Lane 8m + r gives row r of
// matrix m (lanes past the op's matrices give null: their address is
// ignored); out[lane * 4 + m] receives register m.
constexpr uint32_t kRowStride = 16;  // elements

uint16_t Value(uint32_t m, uint32_t r, uint32_t c) { return m * 64 + r * 8 + c; }

template <uint32_t kOp>
void LdmatrixOfShared(const uint64_t* args) {
  auto* out = reinterpret_cast<uint32_t*>(args[0]);
  auto* s = static_cast<uint16_t*>(Rt().shared_memory());
  const uint32_t t = Tid(), m = t / 8, r = t % 8;
  for (uint32_t c = 0; c < 8; ++c) {
    uint16_t* p = &s[(m * 8 + r) * kRowStride + c];
    Rt().access(p, 2, abi::kStore | abi::kSharedSpace, 0);
    *p = Value(m, r, c);
  }
  Rt().barrier(0);
  const uint32_t count = kOp & abi::kLdmatrixCountMask;
  const void* row = t < 8 * count ? &s[(m * 8 + r) * kRowStride] : nullptr;
  uint32_t regs[4] = {};
  Rt().ldmatrix(kOp, row, regs, 0);
  for (uint32_t i = 0; i < 4; ++i) out[t * 4 + i] = regs[i];
}

template <uint32_t kOp>
void CheckLdmatrix() {
  const uint32_t count = kOp & abi::kLdmatrixCountMask;
  const bool trans = (kOp & abi::kLdmatrixTrans) != 0;
  GridRunner runner(1);
  std::vector<uint32_t> out(32 * 4, 0xdeadbeef);
  Status s =
      runner.Run(MakeLaunch(&LdmatrixOfShared<kOp>, {Ptr(out.data())}, 32, 32 * kRowStride * 2));
  ASSERT_TRUE(s.ok()) << s.message();
  // PTX ISA, "ldmatrix": lane l holds row l / 4, columns 2 (l % 4) and
  // 2 (l % 4) + 1 of each matrix; .trans, the same of the transpose.
  for (uint32_t lane = 0; lane < 32; ++lane) {
    const uint32_t row = lane / 4, col = lane % 4 * 2;
    for (uint32_t m = 0; m < 4; ++m) {
      uint32_t expected = 0;
      if (m < count) {
        expected = trans ? Value(m, col, row) | Value(m, col + 1, row) << 16
                         : Value(m, row, col) | Value(m, row, col + 1) << 16;
      }
      EXPECT_EQ(out[lane * 4 + m], expected) << LdmatrixName(kOp) << " lane " << lane << " m " << m;
    }
  }
}

TEST(WarpMatrixTest, LdmatrixFollowsThePtxFragmentLayout) {
  CheckLdmatrix<1>();
  CheckLdmatrix<2>();
  CheckLdmatrix<4>();
  CheckLdmatrix<1 | abi::kLdmatrixTrans>();
  CheckLdmatrix<2 | abi::kLdmatrixTrans>();
  CheckLdmatrix<4 | abi::kLdmatrixTrans>();
}

TEST(WarpMatrixTest, OpsAreNamedAsInPtx) {
  EXPECT_EQ(MmaName(abi::kMmaM16N8K16Bf16), "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");
  EXPECT_EQ(MmaName(abi::kNumMmaOps), "");
  EXPECT_EQ(LdmatrixName(4 | abi::kLdmatrixTrans),
            "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16");
  EXPECT_EQ(LdmatrixName(3), "");
  EXPECT_EQ(LdmatrixCount(0x21), 0u);
}

// Defects. An mma with zero fragments, at `site`.
void ZeroMma(uint32_t site = 0) {
  uint32_t regs[abi::kMmaFragmentRegs] = {};
  float out[4];
  Rt().mma(abi::kMmaM16N8K16Bf16, regs, out, site);
}

// Lanes 16-31 exit before the mma.
void DivergentMma(const uint64_t*) {
  if (Lane() >= 16) return;
  ZeroMma();
}

Status RunDefect(KernelFunction f, uint32_t block = 32, uint32_t shared = 0, bool sync = true) {
  GridRunner runner(1);
  return runner.Run(MakeLaunch(f, {}, block, shared, sync));
}

TEST(WarpMatrixTest, AnMmaNotEveryLaneReachesIsADefect) {
  Status s = RunDefect(&DivergentMma);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "kernel test: block (0,0,0) warp 0: mma #0 "
            "(mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32) is .aligned, but lanes 16-31 "
            "exited without executing it (lanes 0-15 wait at it)");
}

// Even lanes at mma #0, odd lanes at mma #1.
void MmaAtTwoSites(const uint64_t*) { ZeroMma(Lane() % 2); }

TEST(WarpMatrixTest, LanesAtDifferentMmasAreADefect) {
  Status s = RunDefect(&MmaAtTwoSites);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("warp 0: lane 0 waits at mma #0 "
                             "(mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32), lane 1 at "
                             "mma #1"),
            std::string::npos)
      << s.message();
}

void EveryLaneMma(const uint64_t*) { ZeroMma(); }

TEST(WarpMatrixTest, AnMmaInAPartialWarpIsADefect) {
  Status s = RunDefect(&EveryLaneMma, 48);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("block (0,0,0) warp 1: mma #0 "
                             "(mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32) needs all 32 "
                             "lanes (.aligned), but the warp has only 16 threads"),
            std::string::npos)
      << s.message();
}

TEST(WarpMatrixTest, AnMmaInAKernelWithoutFibersIsADefect) {
  Status s = RunDefect(&EveryLaneMma, 32, 0, /*sync=*/false);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("an mma in a kernel the library says has none"), std::string::npos)
      << s.message();
}

// Lanes 0-15 wait at an mma, lanes 16-31 at a barrier.
void MmaAgainstBarrier(const uint64_t*) {
  if (Lane() < 16) {
    ZeroMma();
  } else {
    Rt().barrier(0);
  }
}

TEST(WarpMatrixTest, AnMmaAgainstABarrierIsADeadlock) {
  Status s = RunDefect(&MmaAgainstBarrier);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("deadlock: threads 0-15 wait at mma #0; threads 16-31 wait at "
                             "barrier #0"),
            std::string::npos)
      << s.message();
}

// ldmatrix.x1 whose rows are `offset` bytes into shared memory, written first
// unless `kUnwritten`.
template <uint32_t kOffset, bool kUnwritten = false>
void LdmatrixAt(const uint64_t*) {
  auto* s = static_cast<char*>(Rt().shared_memory());
  if (!kUnwritten) {
    Rt().access(s + 16 * Tid(), 16, abi::kStore | abi::kSharedSpace, 0);
    std::memset(s + 16 * Tid(), 0, 16);
    Rt().barrier(0);
  }
  uint32_t reg;
  Rt().ldmatrix(1, s + kOffset + 16 * (Lane() % 8), &reg, 0);
}

TEST(WarpMatrixTest, AnUnalignedLdmatrixRowIsADefect) {
  Status s = RunDefect(&LdmatrixAt<8>, 32, 32 * 16);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("ldmatrix.sync.aligned.m8n8.x1.shared.b16 #0: lane 0's row address, "
                             "shared offset 8, is not 16-byte aligned"),
            std::string::npos)
      << s.message();
}

TEST(WarpMatrixTest, AnLdmatrixRowCrossingTheEndOfSharedMemoryIsADefect) {
  // Lane 0's row starts in the last 8 bytes.
  Status s = RunDefect(&LdmatrixAt<32 * 16>, 32, 32 * 16 + 8);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("load of 16 bytes at shared offset 512 outside the block's 520 bytes "
                             "of shared memory"),
            std::string::npos)
      << s.message();
}

TEST(WarpMatrixTest, AnLdmatrixOfUnwrittenSharedMemoryIsADefect) {
  Status s = RunDefect(&LdmatrixAt<0, true>, 32, 32 * 16);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("reads shared memory at offset 0 that no thread has written"),
            std::string::npos)
      << s.message();
}

void LdmatrixOfGlobal(const uint64_t* args) {
  uint32_t reg;
  Rt().ldmatrix(1, reinterpret_cast<const void*>(args[0]), &reg, 0);
}

TEST(WarpMatrixTest, AnLdmatrixRowOutsideSharedMemoryIsADefect) {
  std::vector<uint16_t> global(8 * 8);
  GridRunner runner(1);
  Status s = runner.Run(MakeLaunch(&LdmatrixOfGlobal, {Ptr(global.data())}, 32, 64));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is not in the block's shared memory"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace gptc::rt::emu
