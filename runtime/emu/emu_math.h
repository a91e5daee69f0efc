// PTX arithmetic with a directed rounding mode (.rm, .rp, .rz), for kernels
// run on the emulated device (emu_abi.h's EmuRuntime::math): the host
// computes it exactly rounded in that mode.
#ifndef GPTC_RUNTIME_EMU_EMU_MATH_H_
#define GPTC_RUNTIME_EMU_EMU_MATH_H_

#include <cstdint>

namespace gptc::rt::emu {

// `op` is a program::emu::MathOp; unused operands are ignored.
float DirectedMath(uint32_t op, float a, float b, float c);

}  // namespace gptc::rt::emu

#endif  // GPTC_RUNTIME_EMU_EMU_MATH_H_
