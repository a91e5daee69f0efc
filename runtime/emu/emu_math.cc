#include "runtime/emu/emu_math.h"

#include <xmmintrin.h>

#include <cmath>

#include "compiler/program/emu_abi.h"

namespace gptc::rt::emu {

namespace abi = program::emu;

namespace {

// MXCSR's rounding-control field (bits 13-14): the mode of SSE arithmetic,
// which is what float math compiles to on x86-64 (fmaf is an FMA3
// instruction, sqrtf sqrtss). Switching it alone costs a few cycles, where
// fesetround also rewrites the x87 control word.
constexpr unsigned kRoundingBits = 0x6000;
constexpr unsigned kModes[] = {0x2000 /* down */, 0x4000 /* up */, 0x6000 /* toward zero */};

}  // namespace

float DirectedMath(uint32_t op, float a, float b, float c) {
  const unsigned saved = _mm_getcsr();
  _mm_setcsr((saved & ~kRoundingBits) | kModes[op % 3]);
  // volatile: the operations must happen here, between the two switches
  // (this file is built with -frounding-math too).
  volatile float x = a, y = b, z = c;
  float r = 0;
  switch (op / 3) {
    case abi::kFmaRm / 3: r = std::fma(x, y, z); break;
    case abi::kAddRm / 3: r = x + y; break;
    case abi::kMulRm / 3: r = x * y; break;
    case abi::kDivRm / 3: r = x / y; break;
    case abi::kSqrtRm / 3: r = std::sqrt(x); break;
    default: r = std::nanf(""); break;
  }
  volatile float result = r;
  _mm_setcsr(saved);
  return result;
}

}  // namespace gptc::rt::emu
