#include "runtime/emu/warpgroup_matrix.h"

#include <fmt/format.h>

#include <vector>

#include "compiler/support/float_bits.h"

namespace gptc::rt::emu {

namespace abi = program::emu;

namespace {

// Descriptor fields (Note [emulated warpgroup matrix operations]).
constexpr uint64_t kField = 0x3fff;
constexpr int kLboShift = 16, kSboShift = 32, kBaseOffsetShift = 49, kSwizzleShift = 62;
constexpr uint64_t kUsedBits = kField | kField << kLboShift | kField << kSboShift |
                               uint64_t{7} << kBaseOffsetShift | uint64_t{3} << kSwizzleShift;

float Element(uint32_t op, uint16_t bits) {
  return op & abi::kWgmmaF16 ? F16BitsToF32(bits) : BF16BitsToF32(bits);
}

}  // namespace

std::string WgmmaName(uint32_t op) {
  const uint32_t n = op & abi::kWgmmaNMask;
  if ((op & ~abi::kWgmmaOpMask) != 0 || n < 8 || n > 256 || n % 8 != 0 ||
      ((op & abi::kWgmmaRegisterA) && (op & abi::kWgmmaTransA))) {
    return "";
  }
  return fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.{}", n,
                     op & abi::kWgmmaF16 ? "f16.f16" : "bf16.bf16");
}

uint32_t WgmmaOperandWords(uint32_t op) {
  return (op & abi::kWgmmaRegisterA ? abi::kWgmmaARegs : 2) + 2 + 1 + abi::WgmmaAccumulators(op);
}

std::optional<MatrixDescriptor> DecodeDescriptor(uint64_t bits, std::string* error) {
  if ((bits & ~kUsedBits) != 0) {
    *error =
        fmt::format("descriptor {:#018x} sets reserved bits {:#018x}", bits, bits & ~kUsedBits);
    return std::nullopt;
  }
  if (const uint64_t base = bits >> kBaseOffsetShift & 7; base != 0) {
    *error = fmt::format(
        "descriptor {:#018x}: matrix base offset {} has no emulation (the "
        "swizzle atoms must start at multiples of their size)",
        bits, base);
    return std::nullopt;
  }
  static constexpr uint32_t kSwizzleBytes[4] = {0, 128, 64, 32};
  return MatrixDescriptor{.start = static_cast<uint32_t>((bits & kField) << 4),
                          .lbo = static_cast<uint32_t>((bits >> kLboShift & kField) << 4),
                          .sbo = static_cast<uint32_t>((bits >> kSboShift & kField) << 4),
                          .swizzle = kSwizzleBytes[bits >> kSwizzleShift]};
}

uint64_t EncodeDescriptor(const MatrixDescriptor& d) {
  const uint64_t mode = d.swizzle == 128 ? 1 : d.swizzle == 64 ? 2 : d.swizzle == 32 ? 3 : 0;
  return (uint64_t{d.start} >> 4 & kField) | (uint64_t{d.lbo} >> 4 & kField) << kLboShift |
         (uint64_t{d.sbo} >> 4 & kField) << kSboShift | mode << kSwizzleShift;
}

uint32_t OperandAddress(const MatrixDescriptor& d, bool mn_major, uint32_t r, uint32_t k) {
  if (d.swizzle == 0) {
    return mn_major ? d.start + r / 8 * d.sbo + r % 8 * 2 + k / 8 * d.lbo + k % 8 * 16
                    : d.start + r / 8 * d.sbo + r % 8 * 16 + k / 8 * d.lbo + k % 8 * 2;
  }
  const uint32_t w = d.swizzle;
  const uint32_t x =
      mn_major ? d.start + r / (w / 2) * d.lbo + r % (w / 2) * 2 + k % 8 * w + k / 8 * d.sbo
               : d.start + r / 8 * d.sbo + r % 8 * w + 2 * k;
  return x ^ ((x >> 7 & (w / 16 - 1)) << 4);
}

void RegisterAElement(uint32_t t, uint32_t j, uint32_t* row, uint32_t* col) {
  const uint32_t lane = t % 32;
  *row = 16 * (t / 32) + lane / 4 + 8 * (j % 2);
  *col = 2 * (lane % 4) + 8 * (j / 2);
}

void AccumulatorElement(uint32_t t, uint32_t reg, uint32_t* row, uint32_t* col) {
  const uint32_t lane = t % 32, e = reg % 4;
  *row = 16 * (t / 32) + lane / 4 + 8 * (e / 2);
  *col = 8 * (reg / 4) + 2 * (lane % 4) + e % 2;
}

// Note [emulated warpgroup matrix operations]: C gathered, the product in
// double, one rounding, D scattered back.
void WarpgroupMma(uint32_t op, const uint16_t* a, const uint16_t* b, bool scale_d,
                  const float* const c[kWarpgroupThreads], float* const d[kWarpgroupThreads]) {
  const uint32_t n = op & abi::kWgmmaNMask, regs = n / 2;
  const double sign = (op & abi::kWgmmaNegA ? -1.0 : 1.0) * (op & abi::kWgmmaNegB ? -1.0 : 1.0);
  std::vector<double> acc(kWgmmaM * n, 0.0);
  if (scale_d) {
    for (uint32_t t = 0; t < kWarpgroupThreads; ++t) {
      for (uint32_t reg = 0; reg < regs; ++reg) {
        uint32_t row, col;
        AccumulatorElement(t, reg, &row, &col);
        acc[row * n + col] = c[t][reg];
      }
    }
  }
  std::vector<double> bk(kWgmmaK * n);
  for (uint32_t i = 0; i < kWgmmaK * n; ++i) bk[i] = Element(op, b[i]);
  for (uint32_t i = 0; i < kWgmmaM; ++i) {
    for (uint32_t k = 0; k < kWgmmaK; ++k) {
      const double x = sign * Element(op, a[i * kWgmmaK + k]);
      for (uint32_t j = 0; j < n; ++j) acc[i * n + j] += x * bk[k * n + j];
    }
  }
  for (uint32_t t = 0; t < kWarpgroupThreads; ++t) {
    for (uint32_t reg = 0; reg < regs; ++reg) {
      uint32_t row, col;
      AccumulatorElement(t, reg, &row, &col);
      d[t][reg] = static_cast<float>(acc[row * n + col]);
    }
  }
}

}  // namespace gptc::rt::emu
