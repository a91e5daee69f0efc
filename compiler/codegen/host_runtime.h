// How host kernels call the emulator (Note [host kernels] in host_lowering.h):
// through the runtime table (compiler/program/emu_abi.h: EmuRuntime) that
// the library's kRuntimeSymbol global points to. Shared by host_lowering.cc
// and host_warpgroup.cc.
//
// Internal to compiler/codegen.
#ifndef GPTC_COMPILER_CODEGEN_HOST_RUNTIME_H_
#define GPTC_COMPILER_CODEGEN_HOST_RUNTIME_H_

#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Instructions.h"

namespace gptc::codegen {

// Field numbers of emu::EmuRuntime in its LLVM struct type (RuntimeType).
enum RuntimeField : unsigned {
  kAbiVersionField = 0,
  kSpecialRegisterField,
  kBarrierField,
  kShuffleField,
  kAccessField,
  kSharedMemoryField,
  kMathField,
  kMmaField,
  kLdmatrixField,
  kBlockField,
  kWgmmaField,
  kWarpgroupField,
  kWgmmaReadField,
  kNumRuntimeFields,
};

llvm::StructType* RuntimeType(llvm::LLVMContext& ctx);

// Tags a load the rewriter added (of the runtime table or the checks flag),
// which the access instrumentation must not check.
void MarkInternal(llvm::Instruction* inst);
bool IsInternal(const llvm::Instruction& inst);

// Loads field `field` of the table `runtime` points to (at `b`'s insertion
// point) and calls it.
llvm::Value* CallRuntime(llvm::IRBuilder<>& b, llvm::GlobalVariable* runtime, RuntimeField field,
                         llvm::FunctionType* type, llvm::ArrayRef<llvm::Value*> args);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_HOST_RUNTIME_H_
