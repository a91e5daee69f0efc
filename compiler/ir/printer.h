// The IR text printer. Its output is the contract for tests and dumps:
// ParseModule(PrintModule(m)) prints back to the same text, byte for byte.
#ifndef GPTC_COMPILER_IR_PRINTER_H_
#define GPTC_COMPILER_IR_PRINTER_H_

#include <string>

#include "compiler/ir/module.h"

namespace gptc::ir {

std::string PrintModule(const Module& module);
std::string PrintComputation(const Computation& computation, bool is_entry = false);
// One line, without indentation or newline:
//   %h3_qkv = bf16[16,1024,2304] dot(%a, %b), lhs_contracting={2}, rhs_contracting={0}, meta="h.3"
// Without `origin`, the role and metadata are left out: what the value
// computes, not where it came from (the kernel cache's keys).
std::string PrintInstruction(const Instruction& inst, bool origin = true);
// Shortest text that parses back to exactly `value` in `dtype`.
std::string FormatLiteralValue(DType dtype, double value);

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_PRINTER_H_
