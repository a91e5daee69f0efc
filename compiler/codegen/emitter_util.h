// Helpers shared by the kernel emitters: kernel function creation, fusion
// output lists, kernel parameter lists, the base of the kernel builders.
#ifndef GPTC_COMPILER_CODEGEN_EMITTER_UTIL_H_
#define GPTC_COMPILER_CODEGEN_EMITTER_UTIL_H_

#include <string>
#include <vector>

#include "compiler/codegen/fused_emitter.h"
#include "compiler/codegen/kernel_spec.h"
#include "compiler/ir/computation.h"
#include "compiler/support/status.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace gptc::codegen {

// The fused computation's outputs: the root's operands for a tuple root,
// else the root itself.
std::vector<const ir::Instruction*> FusionOutputs(const ir::Computation& fused);

// Checks that `fusion` is a fusion whose fused computation has one parameter
// per operand, and returns the computation.
StatusOr<const ir::Computation*> FusedComputation(const ir::Instruction& fusion);

// Params of Note [kernel ABI] for `fusion`, each requiring `alignment` bytes.
std::vector<KernelParam> KernelParams(const ir::Instruction& fusion, int64_t alignment);

// The spec of a kernel of `fusion` with a 1-D grid and block, `shared_floats`
// f32 of static shared memory, and params aligned to their element size.
KernelSpec MakeKernelSpec(const ir::Instruction& fusion, const std::string& name,
                          ir::FusionKind kind, int64_t grid, int64_t block,
                          int64_t shared_floats = 0);

// Adds kernel `name` with one `!llvm.ptr<1>` argument per param, `block`
// threads (nvvm.maxntid, known_block_size) and `workgroup_floats` f32 of
// static shared memory (a workgroup attribution, when > 0). Leaves `b` at the
// start of the body, before its gpu.return.
mlir::gpu::GPUFuncOp CreateKernel(mlir::OpBuilder& b, mlir::gpu::GPUModuleOp gpu_module,
                                  const std::string& name, int64_t num_params, int64_t block,
                                  int64_t workgroup_floats);

// The address (an `!llvm.ptr<3>`, built at b's insertion point) of the
// launch's dynamic shared memory: an extern [0 x i8] named `symbol`, 16-byte
// aligned, declared in `gpu_module`.
mlir::Value DynamicSharedBase(mlir::OpBuilder& b, mlir::gpu::GPUModuleOp gpu_module,
                              const std::string& symbol);

// What every kernel builder starts from: kernel `name` added to `gpu_module`
// by CreateKernel, a builder at the start of its body, and a FusedEmitter of
// 64-bit indices when `wide` (else 32) that reads parameters and reduces
// with the given readers (a null `read_parameter`: ReadArgument). `what`
// names the kernel in the FusedEmitter's errors.
class FusedKernelBuilder {
 public:
  FusedKernelBuilder(const FusedKernelBuilder&) = delete;
  FusedKernelBuilder& operator=(const FusedKernelBuilder&) = delete;

 protected:
  FusedKernelBuilder(mlir::gpu::GPUModuleOp gpu_module, const std::string& name, int64_t num_params,
                     int64_t block, int64_t workgroup_floats, bool wide, std::string what,
                     FusedEmitter::Reader read_parameter, FusedEmitter::Reader read_reduce);
  ~FusedKernelBuilder() = default;

  // Parameter `p` at `index`, loaded from its kernel argument.
  StatusOr<mlir::Value> ReadArgument(const ir::Instruction& p, const ElementIndex& index);

  mlir::OpBuilder b_;
  mlir::gpu::GPUFuncOp func_;
  mlir::Block* entry_;
  mlir::Location loc_;
  mlir::IntegerType index_type_;
  FusedEmitter emitter_;
};

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_EMITTER_UTIL_H_
