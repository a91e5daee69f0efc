#include "runtime/emu/warp_matrix.h"

#include <cstring>

#include "compiler/support/float_bits.h"

namespace gptc::rt::emu {

namespace abi = program::emu;

namespace {

constexpr int kM = 16, kN = 8, kK = 16;

// The 16-bit element `half` (0: low) of a register, as a float.
float Element(uint32_t op, uint32_t reg, int half) {
  const uint16_t bits = static_cast<uint16_t>(reg >> (16 * half));
  return op == abi::kMmaM16N8K16Bf16 ? BF16BitsToF32(bits) : F16BitsToF32(bits);
}

}  // namespace

std::string MmaName(uint32_t op) {
  switch (op) {
    case abi::kMmaM16N8K16Bf16:
      return "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32";
    case abi::kMmaM16N8K16F16:
      return "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32";
    default:
      return "";
  }
}

uint32_t LdmatrixCount(uint32_t op) {
  if ((op & ~(abi::kLdmatrixCountMask | abi::kLdmatrixTrans)) != 0) return 0;
  const uint32_t count = op & abi::kLdmatrixCountMask;
  return count == 1 || count == 2 || count == 4 ? count : 0;
}

std::string LdmatrixName(uint32_t op) {
  const uint32_t count = LdmatrixCount(op);
  if (count == 0) return "";
  return "ldmatrix.sync.aligned.m8n8.x" + std::to_string(count) +
         (op & abi::kLdmatrixTrans ? ".trans" : "") + ".shared.b16";
}

// Note [emulated warp matrix operations]: the fragments gathered into whole
// matrices, multiplied in double, and scattered back.
void WarpMma(uint32_t op, const uint32_t* const fragments[kWarpLanes], float* const d[kWarpLanes]) {
  float a[kM][kK], b[kK][kN], c[kM][kN];
  for (uint32_t lane = 0; lane < kWarpLanes; ++lane) {
    const uint32_t* f = fragments[lane];
    const uint32_t* fa = f;
    const uint32_t* fb = f + abi::kMmaARegs;
    const uint32_t* fc = fb + abi::kMmaBRegs;
    const int g = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
    for (int reg = 0; reg < 4; ++reg) {
      const int row = g + 8 * (reg & 1), col = 2 * t + 8 * (reg >> 1);
      a[row][col] = Element(op, fa[reg], 0);
      a[row][col + 1] = Element(op, fa[reg], 1);
    }
    for (int reg = 0; reg < 2; ++reg) {
      b[2 * t + 8 * reg][g] = Element(op, fb[reg], 0);
      b[2 * t + 8 * reg + 1][g] = Element(op, fb[reg], 1);
    }
    for (int i = 0; i < 4; ++i) std::memcpy(&c[g + 8 * (i >> 1)][2 * t + (i & 1)], &fc[i], 4);
  }
  float out[kM][kN];
  for (int i = 0; i < kM; ++i) {
    for (int j = 0; j < kN; ++j) {
      double sum = c[i][j];
      for (int k = 0; k < kK; ++k) sum += static_cast<double>(a[i][k]) * b[k][j];
      out[i][j] = static_cast<float>(sum);
    }
  }
  for (uint32_t lane = 0; lane < kWarpLanes; ++lane) {
    const int g = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
    for (int i = 0; i < 4; ++i) d[lane][i] = out[g + 8 * (i >> 1)][2 * t + (i & 1)];
  }
}

void WarpLdmatrix(uint32_t op, const char* const rows[kWarpLanes],
                  uint32_t* const out[kWarpLanes]) {
  const uint32_t count = LdmatrixCount(op);
  const bool trans = (op & abi::kLdmatrixTrans) != 0;
  // Element (r, c) of matrix m: the c-th 16-bit value at row r's address.
  auto element = [&](uint32_t m, uint32_t r, uint32_t c) {
    uint16_t v;
    std::memcpy(&v, rows[8 * m + r] + 2 * c, 2);
    return static_cast<uint32_t>(v);
  };
  uint32_t result[kWarpLanes][4];
  for (uint32_t lane = 0; lane < kWarpLanes; ++lane) {
    const uint32_t q = lane / 4, e = 2 * (lane % 4);
    for (uint32_t m = 0; m < count; ++m) {
      result[lane][m] = trans ? element(m, e, q) | element(m, e + 1, q) << 16
                              : element(m, q, e) | element(m, q, e + 1) << 16;
    }
  }
  for (uint32_t lane = 0; lane < kWarpLanes; ++lane) {
    std::memcpy(out[lane], result[lane], 4 * count);
  }
}

}  // namespace gptc::rt::emu
