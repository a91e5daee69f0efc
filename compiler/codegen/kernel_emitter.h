// The emitter interface: one KernelEmitter per EmitterKind (ChooseEmitter in
// codegen.h picks it: Note [emitter choice]) builds one kernel
// (a `gpu.func` with the `gpu.kernel` attribute) for a fusion instruction.
//
// Contract: Emit() adds exactly one kernel function named `name` to
// `gpu_module`, with the parameters of Note [kernel ABI] (kernel_spec.h) as
// `!llvm.ptr<1>` arguments, and returns the KernelSpec that launches it. It
// may use the gpu, scf, arith, math, memref, llvm and nvvm dialects (the
// lowering in lowering.h converts them). It sets `nvvm.maxntid` to the block
// size so ptxas knows the launch bounds. On an unsupported instruction it
// fails naming it: "%fused.3/%e: opcode dot is not supported in a loop fusion".
//
// A new emitter plugs in through MakeEmitter() and a case of ChooseEmitter.
#ifndef GPTC_COMPILER_CODEGEN_KERNEL_EMITTER_H_
#define GPTC_COMPILER_CODEGEN_KERNEL_EMITTER_H_

#include <memory>
#include <string>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/kernel_spec.h"
#include "compiler/ir/instruction.h"
#include "compiler/support/status.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace gptc::codegen {

class KernelEmitter {
 public:
  virtual ~KernelEmitter() = default;
  virtual std::string_view Name() const = 0;
  // Builds kernel `name` for `fusion` (a fusion instruction) in `gpu_module`.
  virtual StatusOr<KernelSpec> Emit(const ir::Instruction& fusion, const std::string& name,
                                    mlir::gpu::GPUModuleOp gpu_module) const = 0;
};

std::unique_ptr<KernelEmitter> MakeLoopEmitter();
std::unique_ptr<KernelEmitter> MakeRowReductionEmitter();
std::unique_ptr<KernelEmitter> MakeColumnReductionEmitter();
// Note [mixed row and column reductions] (codegen.h): the row part, the column part.
std::unique_ptr<KernelEmitter> MakeMixedReductionRowsEmitter();
std::unique_ptr<KernelEmitter> MakeMixedReductionColumnsEmitter();
// Note [split column reductions]: the two kernels of a split column reduction.
std::unique_ptr<KernelEmitter> MakeColumnReductionPartialsEmitter();
std::unique_ptr<KernelEmitter> MakeColumnReductionFinalEmitter();
std::unique_ptr<KernelEmitter> MakeGatherEmitter();  // gather_emitter.cc: also scatter-add
std::unique_ptr<KernelEmitter> MakeScatterAddInitEmitter();
std::unique_ptr<KernelEmitter> MakeScatterAddEmitter();
// attention_emitter.cc: forward (+ lse), its tensor-core products on `mma`.
std::unique_ptr<KernelEmitter> MakeAttentionEmitter(AttentionMma mma = AttentionMma::kMmaSync);
// attention_backward_emitter.cc: dq or dk + dv (`keys`: the dk + dv kernel
// of a fusion of both, Note [packed attention gradient]).
std::unique_ptr<KernelEmitter> MakeAttentionBackwardEmitter(
    bool keys = false, AttentionMma mma = AttentionMma::kMmaSync);

// The emitter of `kind` (codegen.h: ChooseEmitter picks it); the attention
// emitters' tensor-core products on `attention_mma`.
std::unique_ptr<KernelEmitter> MakeEmitter(EmitterKind kind,
                                           AttentionMma attention_mma = AttentionMma::kMmaSync);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_KERNEL_EMITTER_H_
