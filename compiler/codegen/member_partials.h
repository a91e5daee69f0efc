// The MLIR of Note [member partials] (column_reduction_plan.h): the
// partials kernel of a split of full reductions, and the members' totals of
// its final kernel (whose outputs the column-reduction emitter writes).
#ifndef GPTC_COMPILER_CODEGEN_MEMBER_PARTIALS_H_
#define GPTC_COMPILER_CODEGEN_MEMBER_PARTIALS_H_

#include <cstdint>
#include <string>

#include "compiler/codegen/column_reduction_plan.h"
#include "compiler/codegen/fused_emitter.h"
#include "compiler/codegen/kernel_spec.h"
#include "compiler/ir/instruction.h"
#include "compiler/support/status.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace gptc::codegen {

// Builds the partials kernel `name` of `plan` (part kPartials, with
// classes) into `gpu_module`; its spec ends with the scratch argument.
StatusOr<KernelSpec> EmitMemberPartials(const ir::Instruction& fusion,
                                        const ColumnReductionPlan& plan, const std::string& name,
                                        mlir::gpu::GPUModuleOp gpu_module);

// In the final kernel of `plan` (part kFinal, with classes): each member's
// total of its partials (kernel argument `scratch_arg`) into shared[its
// total_slot], by the warps of thread `tid`'s block. The caller adds the
// barrier before the totals are read.
void EmitMemberTotals(mlir::OpBuilder& b, FusedEmitter& emitter, mlir::Block* entry,
                      const ColumnReductionPlan& plan, mlir::Value tid, mlir::Value shared,
                      int64_t scratch_arg);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_MEMBER_PARTIALS_H_
