// Instruction patterns the passes and the emitters both recognize, so that
// what a fusion rule accepts is what the kernel that runs it accepts.
#ifndef GPTC_COMPILER_IR_PATTERNS_H_
#define GPTC_COMPILER_IR_PATTERNS_H_

#include <vector>

#include "compiler/ir/instruction.h"

namespace gptc::ir {

// A reduce over the last dim alone of an input of rank >= 2.
bool IsRowReduce(const Instruction& inst);

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_PATTERNS_H_
