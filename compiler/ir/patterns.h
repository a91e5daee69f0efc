// Instruction patterns the passes and the emitters both recognize, so that
// what a fusion rule accepts is what the kernel that runs it accepts.
#ifndef GPTC_COMPILER_IR_PATTERNS_H_
#define GPTC_COMPILER_IR_PATTERNS_H_

#include <vector>

#include "compiler/ir/instruction.h"

namespace gptc::ir {

// A reduce over the last dim alone of an input of rank >= 2.
bool IsRowReduce(const Instruction& inst);

// A pad of the last dim alone, with the constant zero.
bool IsLastDimZeroPad(const Instruction& inst);

// Whether `pads` (last-dim zero pads) place same-shaped operands side by side,
// covering the last dim of their common result exactly once: a concatenation
// written as a sum of pads (Note [concat epilogue] in
// compiler/codegen/attention_util.h).
bool PadsTileLastDim(const std::vector<const Instruction*>& pads);

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_PATTERNS_H_
