// Rounding to the 16-bit float formats, shared by the evaluator and the runtime.
//
// The evaluator stores bf16/f16 values rounded to their format so that a
// mixed-precision module computes on the CPU what it will compute on the GPU.
#ifndef GPTC_COMPILER_SUPPORT_FLOAT_BITS_H_
#define GPTC_COMPILER_SUPPORT_FLOAT_BITS_H_

#include <bit>
#include <cmath>
#include <cstdint>

namespace gptc {

// Round-to-nearest-even from f32 to bf16, as bits.
inline uint16_t F32ToBF16Bits(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // keep it a quiet NaN
  uint32_t rounding_bias = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}
inline float BF16BitsToF32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
inline float RoundToBF16(float x) { return BF16BitsToF32(F32ToBF16Bits(x)); }

// Round-to-nearest-even from f32 to IEEE binary16, as bits (overflow gives inf).
inline uint16_t F32ToF16Bits(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  uint32_t abs = bits & 0x7fffffff;
  if (abs >= 0x7f800000) return sign | (abs > 0x7f800000 ? 0x7e00 : 0x7c00);
  if (abs >= 0x477ff000) return sign | 0x7c00;  // rounds past 65504
  if (abs < 0x38800000) {                        // subnormal or zero in f16
    // Scale so the f16 subnormal step (2^-24) becomes 1 and let the FPU round to nearest even.
    float scaled = std::bit_cast<float>(abs) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t mantissa_rounded = abs + 0xfff + ((abs >> 13) & 1);
  return sign | static_cast<uint16_t>((mantissa_rounded - 0x38000000) >> 13);
}
inline float F16BitsToF32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {
    float magnitude = static_cast<float>(mantissa) / 16777216.0f;  // mantissa * 2^-24
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000 | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}
inline float RoundToF16(float x) { return F16BitsToF32(F32ToF16Bits(x)); }

}  // namespace gptc

#endif  // GPTC_COMPILER_SUPPORT_FLOAT_BITS_H_
