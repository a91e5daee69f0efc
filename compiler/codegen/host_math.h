// The NVVM math intrinsics that the host lowering (host_lowering.cc, Note
// [emulated intrinsics]) maps to plain LLVM: the round-to-nearest and
// approximate arithmetic, conversions and bit moves, each computed as the
// GPU rounds it. The directed roundings go to the emulator's runtime.
//
// Internal to compiler/codegen.
#ifndef GPTC_COMPILER_CODEGEN_HOST_MATH_H_
#define GPTC_COMPILER_CODEGEN_HOST_MATH_H_

#include <string>

#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Instructions.h"

namespace gptc::codegen {

// A subnormal f32 (or f64) flushed to a zero of its sign, as PTX's .ftz.
llvm::Value* FlushSubnormal(llvm::IRBuilder<>& b, llvm::Value* x);

// The value of `call`, the intrinsic `op` (its name without "llvm.nvvm."
// and ".ftz"), built with `b` before it; null when `op` is not one of them.
llvm::Value* EmulateNearestMath(llvm::IRBuilder<>& b, llvm::CallInst& call, const std::string& op);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_HOST_MATH_H_
