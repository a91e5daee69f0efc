// The verifier: checks every invariant of a module and names the instruction
// at fault ("file.ir:12:3: %h3_qkv: dot contracting dim 2 has size 768, ...").
//
// Invariants: an entry computation; unique, printable names; each
// computation has a root and its operands are defined earlier in the same
// computation (SSA order); parameters numbered 0..n-1 without gaps; every
// stated shape equals the one shape inference gives; called computations
// belong to the module, are defined before their callers and are not the entry.
#ifndef GPTC_COMPILER_IR_VERIFIER_H_
#define GPTC_COMPILER_IR_VERIFIER_H_

#include "compiler/ir/module.h"
#include "compiler/support/status.h"

namespace gptc::ir {

Status VerifyModule(const Module& module);

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_VERIFIER_H_
