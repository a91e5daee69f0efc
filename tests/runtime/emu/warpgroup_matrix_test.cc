// Note [emulated warpgroup matrix operations] (runtime/emu/warpgroup_matrix.h)
// element by element against the PTX ISA's descriptions, each written here
// in its own terms: the accumulator and register-A fragments of
// wgmma.m64nNk16 as each warp's mma.m16n8k16 fragments, the descriptor's
// bit fields, and the canonical shared-memory layouts as core matrices (8
// rows of 16 bytes) whose 16-byte chunks a swizzle mode XORs with the row
// within its 8-row atom.
#include "runtime/emu/warpgroup_matrix.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "compiler/support/float_bits.h"
#include "tests/testing/wgmma_layouts.h"

namespace gptc::rt::emu {
namespace {

namespace abi = program::emu;
using testing::PictureAddress;

TEST(WarpgroupMatrixTest, AccumulatorsAreEachWarpsMmaFragments) {
  for (uint32_t n : {8u, 64u, 256u}) {
    std::set<std::pair<uint32_t, uint32_t>> seen;
    for (uint32_t t = 0; t < kWarpgroupThreads; ++t) {
      const uint32_t warp = t / 32, group = (t % 32) / 4, in_group = t % 4;
      for (uint32_t reg = 0; reg < n / 2; ++reg) {
        uint32_t row, col;
        AccumulatorElement(t, reg, &row, &col);
        // n-tile reg / 4 of 8 columns; c0, c1 in row g, c2, c3 in row g + 8.
        const uint32_t c = reg % 4;
        EXPECT_EQ(row, 16 * warp + group + (c >= 2 ? 8 : 0)) << t << " " << reg;
        EXPECT_EQ(col, 8 * (reg / 4) + 2 * in_group + c % 2) << t << " " << reg;
        EXPECT_TRUE(seen.insert({row, col}).second);
      }
    }
    EXPECT_EQ(seen.size(), 64u * n);  // every element once
  }
}

TEST(WarpgroupMatrixTest, RegisterAIsEachWarpsMmaAFragment) {
  std::set<std::pair<uint32_t, uint32_t>> seen;
  for (uint32_t t = 0; t < kWarpgroupThreads; ++t) {
    const uint32_t warp = t / 32, group = (t % 32) / 4, in_group = t % 4;
    // a0 = A[g][2q, 2q+1], a1 = A[g+8][..], a2 = A[g][2q+8, +9], a3 = A[g+8][2q+8, +9].
    const uint32_t rows[4] = {group, group + 8, group, group + 8};
    const uint32_t cols[4] = {2 * in_group, 2 * in_group, 2 * in_group + 8, 2 * in_group + 8};
    for (uint32_t j = 0; j < 4; ++j) {
      uint32_t row, col;
      RegisterAElement(t, j, &row, &col);
      EXPECT_EQ(row, 16 * warp + rows[j]);
      EXPECT_EQ(col, cols[j]);
      EXPECT_TRUE(seen.insert({row, col}).second);
      EXPECT_TRUE(seen.insert({row, col + 1}).second);
    }
  }
  EXPECT_EQ(seen.size(), 64u * 16u);
}

TEST(WarpgroupMatrixTest, DescriptorFieldsRoundTripAndReservedBitsAreRefused) {
  for (uint32_t swizzle : {0u, 32u, 64u, 128u}) {
    const MatrixDescriptor d{.start = 0x3ff0, .lbo = 0x2000, .sbo = 1024, .swizzle = swizzle};
    const uint64_t bits = EncodeDescriptor(d);
    // start >> 4 in bits 0-13, LBO >> 4 in 16-29, SBO >> 4 in 32-45, the mode in 62-63.
    EXPECT_EQ(bits & 0x3fff, 0x3ffu);
    EXPECT_EQ(bits >> 16 & 0x3fff, 0x200u);
    EXPECT_EQ(bits >> 32 & 0x3fff, 64u);
    EXPECT_EQ(bits >> 62, swizzle == 0 ? 0u : swizzle == 128 ? 1u : swizzle == 64 ? 2u : 3u);
    std::string error;
    std::optional<MatrixDescriptor> back = DecodeDescriptor(bits, &error);
    ASSERT_TRUE(back.has_value()) << error;
    EXPECT_EQ(back->start, d.start);
    EXPECT_EQ(back->lbo, d.lbo);
    EXPECT_EQ(back->sbo, d.sbo);
    EXPECT_EQ(back->swizzle, swizzle);
  }
  std::string error;
  EXPECT_FALSE(DecodeDescriptor(uint64_t{1} << 47, &error));
  EXPECT_NE(error.find("reserved bits"), std::string::npos) << error;
  EXPECT_FALSE(DecodeDescriptor(uint64_t{3} << 49, &error));
  EXPECT_NE(error.find("base offset 3 has no emulation"), std::string::npos) << error;
}

TEST(WarpgroupMatrixTest, OperandAddressesFollowTheCanonicalLayouts) {
  for (uint32_t swizzle : {0u, 32u, 64u, 128u}) {
    for (bool mn_major : {false, true}) {
      // Starts at an atom, and for a K-major operand 32 bytes into one (its
      // next k-step inside a 64- or 128-byte row).
      for (uint32_t start : {2048u, 2048u + (swizzle >= 64 && !mn_major ? 32u : 0u)}) {
        // Atoms of 8 rows one after the other along R (K-major) or K
        // (MN-major, whose R goes by LBO from one column of atoms to the next).
        const MatrixDescriptor d{.start = start,
                                 .lbo = swizzle == 0 ? 128u : 64u * swizzle,
                                 .sbo = swizzle == 0 ? 256u : 8 * swizzle,
                                 .swizzle = swizzle};
        std::set<uint32_t> addresses;
        const uint32_t rows = 64;
        for (uint32_t r = 0; r < rows; ++r) {
          for (uint32_t k = 0; k < 16; ++k) {
            const uint32_t at = OperandAddress(d, mn_major, r, k);
            ASSERT_EQ(at, PictureAddress(d, mn_major, r, k))
                << "swizzle " << swizzle << (mn_major ? " MN" : " K") << "-major start " << start
                << " element (" << r << ", " << k << ")";
            EXPECT_EQ(at % 2, 0u);
            addresses.insert(at);
          }
        }
        EXPECT_EQ(addresses.size(), rows * 16) << "two elements at one address";
      }
    }
  }
  // A hand-checked pair: 128-byte swizzle, K-major, row 3, k 9: line 3 of
  // the atom (384), chunk 1 ^ 3 = 2, byte 2 of it.
  const MatrixDescriptor sw128{.start = 0, .lbo = 16, .sbo = 1024, .swizzle = 128};
  EXPECT_EQ(OperandAddress(sw128, false, 3, 9), 384u + 32u + 2u);
  // 32-byte swizzle, K-major, row 5 (line 1 of its 32-byte rows' 256-byte
  // atom: bit 7 set), k 0: chunk 0 ^ 1.
  const MatrixDescriptor sw32{.start = 0, .lbo = 16, .sbo = 256, .swizzle = 32};
  EXPECT_EQ(OperandAddress(sw32, false, 5, 0), 5u * 32u + 16u);
}

float Bf16(std::mt19937& rng) {
  return RoundToBF16(std::uniform_real_distribution<float>(-2, 2)(rng));
}

TEST(WarpgroupMatrixTest, ProductIsTheExactSumRoundedOnce) {
  std::mt19937 rng(3);
  for (uint32_t op : {64u, 16u | abi::kWgmmaNegA, 256u | abi::kWgmmaNegA | abi::kWgmmaNegB}) {
    const uint32_t n = op & abi::kWgmmaNMask;
    std::vector<uint16_t> a(64 * 16), b(16 * n);
    for (uint16_t& x : a) x = F32ToBF16Bits(Bf16(rng));
    for (uint16_t& x : b) x = F32ToBF16Bits(Bf16(rng));
    std::vector<float> c(128 * n / 2), d(128 * n / 2);
    for (float& x : c) x = std::uniform_real_distribution<float>(-4, 4)(rng);
    for (bool scale_d : {true, false}) {
      const float* cp[128];
      float* dp[128];
      for (uint32_t t = 0; t < 128; ++t) cp[t] = &c[t * n / 2], dp[t] = &d[t * n / 2];
      WarpgroupMma(op, a.data(), b.data(), scale_d, cp, dp);
      const double sign = (op & abi::kWgmmaNegA ? -1 : 1) * (op & abi::kWgmmaNegB ? -1 : 1);
      for (uint32_t t = 0; t < 128; ++t) {
        for (uint32_t reg = 0; reg < n / 2; ++reg) {
          uint32_t i, j;
          AccumulatorElement(t, reg, &i, &j);
          double sum = scale_d ? c[t * n / 2 + reg] : 0.0;
          for (uint32_t k = 0; k < 16; ++k) {
            sum += sign * BF16BitsToF32(a[i * 16 + k]) * BF16BitsToF32(b[k * n + j]);
          }
          ASSERT_EQ(d[t * n / 2 + reg], static_cast<float>(sum)) << t << " " << reg;
        }
      }
    }
  }
}

TEST(WarpgroupMatrixTest, NamesTheFormsItKnows) {
  EXPECT_EQ(WgmmaName(64 | abi::kWgmmaRegisterA),
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16");
  EXPECT_EQ(WgmmaName(256 | abi::kWgmmaF16), "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16");
  EXPECT_EQ(WgmmaName(12), "");                                             // N not a multiple of 8
  EXPECT_EQ(WgmmaName(264), "");                                            // N over 256
  EXPECT_EQ(WgmmaName(64 | abi::kWgmmaRegisterA | abi::kWgmmaTransA), "");  // no A to transpose
  EXPECT_EQ(WgmmaName(64 | 1u << 20), "");                                  // an unknown bit
  EXPECT_EQ(WgmmaOperandWords(64 | abi::kWgmmaRegisterA), 4u + 2 + 1 + 32);
  EXPECT_EQ(WgmmaOperandWords(16), 2u + 2 + 1 + 8);
}

}  // namespace
}  // namespace gptc::rt::emu
