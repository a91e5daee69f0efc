// What the kernels built of member classes share (Note [member classes] in
// loop_plan.h, Note [member partials] in column_reduction_plan.h): the
// block's member and its kernel arguments, chosen at the top of the block,
// and the lanes of a vector load (Note [loop vectorisation] in
// loop_emitter.cc).
#ifndef GPTC_COMPILER_CODEGEN_MEMBER_CLASSES_H_
#define GPTC_COMPILER_CODEGEN_MEMBER_CLASSES_H_

#include <cstdint>
#include <vector>

#include "compiler/codegen/fused_emitter.h"
#include "compiler/ir/shape.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"

namespace gptc::codegen {

// The block's member m = class_bid / blocks_per_member of a class whose
// member i reads kernel arguments args[i][0], args[i][1], ...: fills
// `selected` with member m's, args[m][k] for each k, chosen by a chain of
// selects over m where the members' arguments differ (a shared scalar
// needs none). Returns the block's index among m's blocks (class_bid itself
// when the class has one member, and then builds nothing).
mlir::Value SelectMember(mlir::OpBuilder& b, FusedEmitter& emitter, mlir::Block* entry,
                         const std::vector<std::vector<int64_t>>& args, int64_t blocks_per_member,
                         mlir::Value class_bid, std::vector<mlir::Value>& selected);

// Lane `lane` of the `width` elements of `dtype` from element `base` of
// buffer `ptr`, in register form; the vector is loaded into `vec` at its
// first use (a later lane of the same iteration reuses it).
mlir::Value VectorLane(mlir::OpBuilder& b, mlir::Location loc, mlir::Value ptr, mlir::Value base,
                       ir::DType dtype, int64_t width, int lane, mlir::Value& vec);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_MEMBER_CLASSES_H_
