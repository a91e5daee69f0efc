// Kernel code generation: fusion instructions -> PTX (+ cubin where ptxas is
// installed), one kernel per fusion. No LLVM/MLIR types appear here.
//
// Pipeline per fusion (see lowering.h): an emitter (kernel_emitter.h) builds a
// `gpu.func` in a `gpu.module`; MLIR lowers it to the NVVM/LLVM dialects; it is
// translated to LLVM IR, linked with libdevice, optimised at O3 and compiled by
// the NVPTX backend; ptxas then assembles the PTX for the target.
#ifndef GPTC_COMPILER_CODEGEN_CODEGEN_H_
#define GPTC_COMPILER_CODEGEN_CODEGEN_H_

#include <optional>
#include <string>
#include <vector>

#include "compiler/codegen/kernel_spec.h"
#include "compiler/codegen/ptxas.h"
#include "compiler/ir/module.h"
#include "compiler/support/status.h"

namespace gptc::codegen {

struct CodegenOptions {
  std::string target = "sm_90a";  // sm_90a, sm_90 or sm_80
  // Assemble every kernel with ptxas when it is installed (RunPtxas); with
  // `require_ptxas`, a missing ptxas is an error instead of a skipped check.
  bool run_ptxas = true;
  bool require_ptxas = false;
  std::string ptxas_path;  // empty: FindPtxas()
  std::string libdevice_path = "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc";
  bool keep_mlir = false;  // fill CompiledKernel::mlir (the emitted gpu.module)
  bool keep_llvm = false;  // fill CompiledKernel::llvm_ir (after linking, before O3)
};

struct CompiledKernel {
  KernelSpec spec;
  std::string ptx;
  std::optional<PtxasInfo> ptxas;  // absent when ptxas was not run
  std::string mlir;
  std::string llvm_ir;
};

struct SkippedFusion {
  std::string fusion;  // instruction name
  ir::FusionKind kind;
  std::string reason;  // "fusion kind gemm has no emitter yet"
};

struct CompiledKernels {
  std::vector<CompiledKernel> kernels;  // in entry order
  std::vector<SkippedFusion> skipped;   // fusions without an emitter yet
};

// Whether a fusion kind has an emitter (a reduction fusion also needs row
// reductions only: column reductions have none yet).
bool HasEmitter(ir::FusionKind kind);

// Validates a target name ("sm_90a", "sm_90", "sm_80").
Status CheckTarget(std::string_view target);

// Compiles one fusion instruction to one kernel named `kernel_name`.
StatusOr<CompiledKernel> CompileFusion(const ir::Instruction& fusion, std::string kernel_name,
                                       const CodegenOptions& options);

// Compiles every fusion of the entry computation whose kind has an emitter;
// the others are listed in `skipped`. Kernel names derive from the fusion
// names ("%fusion.3" -> "fusion_3"), made unique.
StatusOr<CompiledKernels> CompileFusions(const ir::Module& module, const CodegenOptions& options);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_CODEGEN_H_
