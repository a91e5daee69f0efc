// Emission and lowering of one kernel: fusion -> gpu.func (kernel_emitter.h)
// -> MLIR passes (convert-scf-to-cf, gpu.module(convert-gpu-to-nvvm),
// reconcile-unrealized-casts) -> LLVM IR (translateModuleToLLVMIR on the
// gpu.module) -> libdevice linked (only the needed __nv_* functions, then
// internalised) -> O3 with the NVPTX TargetMachine (which adds NVVMReflect)
// -> NVPTX backend -> PTX text for the target (PTX ISA 8.5).
//
// This is the only translation unit that includes LLVM headers; its
// interface has no LLVM/MLIR types.
#ifndef GPTC_COMPILER_CODEGEN_LOWERING_H_
#define GPTC_COMPILER_CODEGEN_LOWERING_H_

#include <optional>
#include <string>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/kernel_spec.h"
#include "compiler/ir/instruction.h"
#include "compiler/support/status.h"

namespace gptc::codegen {

struct LoweredKernel {
  KernelSpec spec;
  std::string ptx;
  std::string mlir;     // when options.keep_mlir
  std::string llvm_ir;  // when options.keep_llvm
  std::optional<HostKernel> host;  // when options.emit_host
};

// Emits `fusion` with the emitter of `kind` as kernel `kernel_name` and
// lowers it to PTX for options.target. Errors name the kernel and fusion.
StatusOr<LoweredKernel> EmitAndLower(const ir::Instruction& fusion, EmitterKind kind,
                                     const std::string& kernel_name,
                                     const CodegenOptions& options);

// Lowers kernel `kernel_name` (a gpu.func of a gpu.module in `mlir_text`,
// written by hand: tests of NVVM operations such as nvvm.mma.sync and
// nvvm.ldmatrix) exactly as EmitAndLower lowers an emitted kernel. The spec
// holds only the name. Errors name the kernel and the first MLIR diagnostic.
StatusOr<LoweredKernel> LowerMlirText(const std::string& mlir_text, const std::string& kernel_name,
                                      const CodegenOptions& options);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_LOWERING_H_
