// Rounding f32 to bf16 and f16: round-to-nearest-even on known values, ties,
// overflow, subnormals and NaN, and exhaustive round trips of every 16-bit value.
#include "compiler/support/float_bits.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace gptc {
namespace {

float F(uint32_t bits) { return std::bit_cast<float>(bits); }

bool IsBF16NaN(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0; }
bool IsF16NaN(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0; }

TEST(FloatBitsTest, BF16KnownValues) {
  EXPECT_EQ(F32ToBF16Bits(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBF16Bits(-1.0f), 0xbf80);
  EXPECT_EQ(F32ToBF16Bits(0.0f), 0x0000);
  EXPECT_EQ(F32ToBF16Bits(-0.0f), 0x8000);
  EXPECT_EQ(F32ToBF16Bits(2.5f), 0x4020);
  EXPECT_EQ(F32ToBF16Bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(F32ToBF16Bits(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(RoundToBF16(3.14159f), 3.140625f);
  EXPECT_EQ(RoundToBF16(65504.0f), 65536.0f);
  EXPECT_EQ(BF16BitsToF32(0x3f81), 1.0078125f);
}

TEST(FloatBitsTest, BF16RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between 0x3f80 and 0x3f81: ties go to the even 0x3f80.
  EXPECT_EQ(F32ToBF16Bits(F(0x3f808000)), 0x3f80);
  // 1 + 3 * 2^-8 lies halfway between 0x3f81 and 0x3f82: ties go to the even 0x3f82.
  EXPECT_EQ(F32ToBF16Bits(F(0x3f818000)), 0x3f82);
  EXPECT_EQ(F32ToBF16Bits(F(0x3f807fff)), 0x3f80);  // just below half
  EXPECT_EQ(F32ToBF16Bits(F(0x3f808001)), 0x3f81);  // just above half
  EXPECT_EQ(F32ToBF16Bits(F(0xbf818000)), 0xbf82);  // sign is symmetric
  // A carry out of the mantissa bumps the exponent: 0x3fffc000 -> 2.0.
  EXPECT_EQ(F32ToBF16Bits(F(0x3fffc000)), 0x4000);
}

TEST(FloatBitsTest, BF16OverflowAndSubnormals) {
  EXPECT_EQ(F32ToBF16Bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_EQ(F32ToBF16Bits(F(0x7f7f7fff)), 0x7f7f);                      // largest finite bf16
  EXPECT_EQ(F32ToBF16Bits(F(0x7f7f8000)), 0x7f80);                      // tie, odd -> inf
  EXPECT_EQ(F32ToBF16Bits(F(0xff7f8000)), 0xff80);
  EXPECT_EQ(F32ToBF16Bits(F(0x00010000)), 0x0001);  // smallest bf16 subnormal
  EXPECT_EQ(F32ToBF16Bits(F(0x00000001)), 0x0000);  // far below half: flushes to zero
  EXPECT_EQ(F32ToBF16Bits(F(0x00008000)), 0x0000);  // tie with zero -> even zero
  EXPECT_EQ(F32ToBF16Bits(F(0x00008001)), 0x0001);
  EXPECT_EQ(F32ToBF16Bits(F(0x00018000)), 0x0002);  // tie -> even
  EXPECT_EQ(F32ToBF16Bits(F(0x007fffff)), 0x0080);  // largest f32 subnormal -> smallest normal
  EXPECT_EQ(F32ToBF16Bits(F(0x80008000)), 0x8000);  // negative tie keeps its sign
}

TEST(FloatBitsTest, BF16NaNStaysNaN) {
  EXPECT_TRUE(IsBF16NaN(F32ToBF16Bits(std::numeric_limits<float>::quiet_NaN())));
  // A payload only in the low 16 bits would truncate to inf without the quiet bit.
  EXPECT_TRUE(IsBF16NaN(F32ToBF16Bits(F(0x7f800001))));
  EXPECT_TRUE(IsBF16NaN(F32ToBF16Bits(F(0x7fffffff))));  // would carry into the sign
  EXPECT_EQ(F32ToBF16Bits(F(0xff800001)) & 0x8000, 0x8000);
  EXPECT_TRUE(IsBF16NaN(F32ToBF16Bits(F(0xff800001))));
  EXPECT_TRUE(std::isnan(RoundToBF16(std::numeric_limits<float>::quiet_NaN())));
}

TEST(FloatBitsTest, F16KnownValues) {
  EXPECT_EQ(F32ToF16Bits(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16Bits(-2.0f), 0xc000);
  EXPECT_EQ(F32ToF16Bits(0.5f), 0x3800);
  EXPECT_EQ(F32ToF16Bits(0.0f), 0x0000);
  EXPECT_EQ(F32ToF16Bits(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16Bits(65504.0f), 0x7bff);  // largest finite f16
  EXPECT_EQ(F32ToF16Bits(-65504.0f), 0xfbff);
  EXPECT_EQ(F32ToF16Bits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(F32ToF16Bits(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(F32ToF16Bits(0.1f), 0x2e66);
  EXPECT_EQ(RoundToF16(0.1f), 0.0999755859375f);
  EXPECT_EQ(F16BitsToF32(0x3555), 0.333251953125f);
}

TEST(FloatBitsTest, F16Overflow) {
  EXPECT_EQ(F32ToF16Bits(65519.0f), 0x7bff);       // below the halfway point 65520
  EXPECT_EQ(F32ToF16Bits(F(0x477fefff)), 0x7bff);  // largest float below 65520
  EXPECT_EQ(F32ToF16Bits(65520.0f), 0x7c00);       // tie with odd 0x7bff -> inf
  EXPECT_EQ(F32ToF16Bits(-65520.0f), 0xfc00);
  EXPECT_EQ(F32ToF16Bits(65536.0f), 0x7c00);
  EXPECT_EQ(F32ToF16Bits(1e10f), 0x7c00);
  EXPECT_EQ(F32ToF16Bits(std::numeric_limits<float>::max()), 0x7c00);
}

TEST(FloatBitsTest, F16RoundsToNearestEven) {
  EXPECT_EQ(F32ToF16Bits(1.0f + 0x1p-11f), 0x3c00);      // tie -> even
  EXPECT_EQ(F32ToF16Bits(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie -> even
  EXPECT_EQ(F32ToF16Bits(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  EXPECT_EQ(F32ToF16Bits(2049.0f), 0x6800);        // spacing 2 at 2048: tie -> 2048
  EXPECT_EQ(F32ToF16Bits(2051.0f), 0x6802);        // tie -> 2052
  EXPECT_EQ(F32ToF16Bits(F(0x3ffff000)), 0x4000);  // tie, odd: carries into the exponent
}

TEST(FloatBitsTest, F16Subnormals) {
  EXPECT_EQ(F32ToF16Bits(0x1p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(F32ToF16Bits(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(F32ToF16Bits(-0x1p-24f), 0x8001);
  EXPECT_EQ(F32ToF16Bits(1023 * 0x1p-24f), 0x03ff);     // largest subnormal
  EXPECT_EQ(F32ToF16Bits(1023.5f * 0x1p-24f), 0x0400);  // tie -> even (the smallest normal)
  EXPECT_EQ(F32ToF16Bits(0x1p-25f), 0x0000);            // tie with zero -> zero
  EXPECT_EQ(F32ToF16Bits(-0x1p-25f), 0x8000);
  EXPECT_EQ(F32ToF16Bits(0x1p-25f * 1.0001f), 0x0001);  // just above half
  EXPECT_EQ(F32ToF16Bits(3 * 0x1p-25f), 0x0002);        // 1.5 ulp: tie -> even 2
  EXPECT_EQ(F32ToF16Bits(5 * 0x1p-25f), 0x0002);        // 2.5 ulp: tie -> even 2
  EXPECT_EQ(F32ToF16Bits(0x1p-26f), 0x0000);
  EXPECT_EQ(F32ToF16Bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(F16BitsToF32(0x0001), 0x1p-24f);
  EXPECT_EQ(F16BitsToF32(0x83ff), -1023 * 0x1p-24f);
}

TEST(FloatBitsTest, F16NaNStaysNaN) {
  EXPECT_TRUE(IsF16NaN(F32ToF16Bits(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(IsF16NaN(F32ToF16Bits(F(0x7f800001))));  // payload below the f16 mantissa
  EXPECT_TRUE(IsF16NaN(F32ToF16Bits(F(0xffc00000))));
  EXPECT_EQ(F32ToF16Bits(F(0xffc00000)) & 0x8000, 0x8000);
  EXPECT_TRUE(std::isnan(RoundToF16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(F16BitsToF32(0x7e00)));
}

TEST(FloatBitsTest, Every16BitValueRoundTrips) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    uint16_t bits = static_cast<uint16_t>(b);
    float bf = BF16BitsToF32(bits);
    if (IsBF16NaN(bits)) {
      EXPECT_TRUE(std::isnan(bf)) << std::hex << b;
      EXPECT_TRUE(IsBF16NaN(F32ToBF16Bits(bf))) << std::hex << b;
    } else {
      ASSERT_EQ(F32ToBF16Bits(bf), bits) << std::hex << b;
    }
    float h = F16BitsToF32(bits);
    if (IsF16NaN(bits)) {
      EXPECT_TRUE(std::isnan(h)) << std::hex << b;
      EXPECT_TRUE(IsF16NaN(F32ToF16Bits(h))) << std::hex << b;
    } else {
      ASSERT_EQ(F32ToF16Bits(h), bits) << std::hex << b;
    }
  }
}

// Rounds a finite non-negative `x` to the nearer of two adjacent 16-bit values `lo` <= x < `hi`
// (given as bits and values), ties to the even one, in exact double arithmetic.
uint16_t NearestEven(float x, uint16_t lo, uint16_t hi, double lo_value, double hi_value) {
  double dl = static_cast<double>(x) - lo_value;
  double dh = hi_value - static_cast<double>(x);
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) == 0 ? lo : hi;
}

TEST(FloatBitsTest, RandomValuesMatchAReference) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    // Half the samples anywhere, half in the f16 range 2^-25 .. 2^16 where rounding is subtle.
    if (i % 2 == 1) bits = (bits & 0x807fffff) | ((102 + static_cast<uint32_t>(rng()) % 41) << 23);
    float x = F(bits);
    if (std::isnan(x)) continue;
    uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    float a = std::abs(x);

    // bf16: the neighbours are the truncation and the next value up.
    uint16_t lo = static_cast<uint16_t>(std::bit_cast<uint32_t>(a) >> 16);
    if (std::isinf(a)) {
      EXPECT_EQ(F32ToBF16Bits(x), sign | 0x7f80);
    } else {
      uint16_t hi = static_cast<uint16_t>(lo + 1);
      // Above the largest finite bf16 the next step would be 2^128 (which rounds to inf).
      double hi_value = hi == 0x7f80 ? std::ldexp(1.0, 128) : BF16BitsToF32(hi);
      uint16_t want = NearestEven(a, lo, hi, BF16BitsToF32(lo), hi_value);
      ASSERT_EQ(F32ToBF16Bits(x), sign | want) << std::hex << std::bit_cast<uint32_t>(x);
    }

    // f16: binary search for the largest f16 magnitude <= |x|.
    uint16_t want16;
    if (a >= 65520.0f) {
      want16 = 0x7c00;
    } else {
      uint16_t l = 0, h = 0x7bff;
      while (l < h) {
        uint16_t mid = static_cast<uint16_t>((l + h + 1) / 2);
        if (F16BitsToF32(mid) <= a) {
          l = mid;
        } else {
          h = static_cast<uint16_t>(mid - 1);
        }
      }
      want16 = l == 0x7bff ? l
                           : NearestEven(a, l, static_cast<uint16_t>(l + 1), F16BitsToF32(l),
                                         F16BitsToF32(static_cast<uint16_t>(l + 1)));
    }
    ASSERT_EQ(F32ToF16Bits(x), sign | want16) << std::hex << std::bit_cast<uint32_t>(x);
#ifdef __FLT16_MAX__
    // The compiler's own conversion agrees.
    ASSERT_EQ(F32ToF16Bits(x), std::bit_cast<uint16_t>(static_cast<_Float16>(x)))
        << std::hex << std::bit_cast<uint32_t>(x);
#endif
  }
}

TEST(FloatBitsTest, RoundingIsIdempotentAndMonotonic) {
  std::mt19937 rng(11);
  for (int i = 0; i < 100000; ++i) {
    float a = F(static_cast<uint32_t>(rng()) & 0x7fffffff);
    float b = F(static_cast<uint32_t>(rng()) & 0x7fffffff);
    if (std::isnan(a) || std::isnan(b)) continue;
    if (a > b) std::swap(a, b);
    EXPECT_EQ(RoundToBF16(RoundToBF16(a)), RoundToBF16(a));
    EXPECT_EQ(RoundToF16(RoundToF16(a)), RoundToF16(a));
    ASSERT_LE(RoundToBF16(a), RoundToBF16(b)) << a << " " << b;
    ASSERT_LE(RoundToF16(a), RoundToF16(b)) << a << " " << b;
  }
}

}  // namespace
}  // namespace gptc
