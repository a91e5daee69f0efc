#include "runtime/emu/emu_math.h"

#include <cfenv>
#include <cmath>

#include "compiler/codegen/emu_abi.h"

// Built with -frounding-math: the compiler must not fold or move the
// arithmetic across the rounding-mode switches.
#pragma STDC FENV_ACCESS ON

namespace gptc::rt::emu {

namespace abi = codegen::emu;

float DirectedMath(uint32_t op, float a, float b, float c) {
  static constexpr int kModes[] = {FE_DOWNWARD, FE_UPWARD, FE_TOWARDZERO};
  const int saved = std::fegetround();
  std::fesetround(kModes[op % 3]);
  volatile float x = a, y = b, z = c;
  float r = 0;
  switch (op / 3) {
    case abi::kFmaRm / 3:
      r = std::fma(x, y, z);
      break;
    case abi::kAddRm / 3:
      r = x + y;
      break;
    case abi::kMulRm / 3:
      r = x * y;
      break;
    case abi::kDivRm / 3:
      r = x / y;
      break;
    case abi::kSqrtRm / 3:
      r = std::sqrt(x);
      break;
    default:
      r = std::nanf("");
      break;
  }
  volatile float result = r;
  std::fesetround(saved);
  return result;
}

}  // namespace gptc::rt::emu
