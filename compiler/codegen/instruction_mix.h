// What a basic block of a device kernel executes, by instruction class
// (Note [emulated instruction counters] in runtime/emu/grid_runner.h): the
// host lowering gives each block its mix, and the emulator multiplies it by
// how often a warp starts the block.
//
// Internal to compiler/codegen.
#ifndef GPTC_COMPILER_CODEGEN_INSTRUCTION_MIX_H_
#define GPTC_COMPILER_CODEGEN_INSTRUCTION_MIX_H_

#include <array>
#include <cstdint>

#include "compiler/program/emu_abi.h"

namespace llvm {
class BasicBlock;
}  // namespace llvm

namespace gptc::codegen {

using InstructionMix = std::array<uint32_t, program::emu::kNumInstructionClasses>;

// The instructions of `block` (device LLVM IR: NVVM intrinsics and address
// spaces as the NVPTX backend receives them) by class.
InstructionMix BlockMix(const llvm::BasicBlock& block);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_INSTRUCTION_MIX_H_
