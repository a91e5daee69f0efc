// FusedEmitter: emits the value of one element of an instruction of a fused
// computation as MLIR (arith/math/llvm ops), given that element's index. The
// loop and reduction emitters drive it; parameters and reduce results are read
// through callbacks so each emitter decides how (vector loads, reduced rows).
//
// Composite ops (softmax-cross-entropy) are inlined: their decomposition is
// emitted with its parameters bound to the composite's operands.
// Layout ops only remap the index (broadcast, transpose, reshape, slice);
// pad and concatenate clamp the index and select, so every load is in bounds.
// 16-bit float arithmetic runs in f32 and rounds after each op.
#ifndef GPTC_COMPILER_CODEGEN_FUSED_EMITTER_H_
#define GPTC_COMPILER_CODEGEN_FUSED_EMITTER_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/ir/computation.h"
#include "compiler/support/status.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Value.h"

namespace gptc::codegen {

// log2(e): exp(x) = 2^(x log2(e)) (Note [fast exp] in fused_emitter.cc).
inline constexpr double kLog2E = 1.4426950408889634;

// The index of one element: its row-major linear index, its per-dimension
// index, or both (each is computed from the other on demand).
struct ElementIndex {
  mlir::Value linear;
  std::vector<mlir::Value> multi;
  // True while the index is the kernel's own output element (it survives
  // elementwise ops and reshapes), so same-shaped parameters may be read with
  // the kernel's vector loads; `lane` is the element's lane in that vector.
  bool identity = false;
  int lane = 0;
};

class FusedEmitter {
 public:
  // Reads parameter / reduce `inst` at `index` (an index of inst's shape).
  using Reader = std::function<StatusOr<mlir::Value>(const ir::Instruction&, const ElementIndex&)>;
  using Cache = std::map<std::pair<const ir::Instruction*, std::vector<const void*>>, mlir::Value>;

  // `b` is the builder the emitter inserts with; constants go to the start of
  // `entry` (the kernel's entry block) so they dominate every use. Indices are
  // of `index_type` (i32 or i64). `what` names the fusion kind for errors.
  FusedEmitter(mlir::OpBuilder& b, mlir::Block* entry, mlir::IntegerType index_type,
               std::string what, Reader read_parameter, Reader read_reduce);

  // Binds the parameters of the composites' decompositions in `fused` (and
  // nested ones) to the composites' operands, so that instructions inside a
  // decomposition (its reduces) can be emitted before the composite itself.
  void BindComposites(const ir::Computation& fused);

  // The value of `inst` at `index`; memoised per (instruction, index).
  StatusOr<mlir::Value> Emit(const ir::Instruction& inst, const ElementIndex& index);

  // Takes `value` as `inst`'s at `index` from here on (a fact the caller
  // knows, such as a compare that holds over a loop's range).
  void Assume(const ir::Instruction& inst, const ElementIndex& index, mlir::Value value);

  // Values emitted inside a nested region must not be reused outside it:
  // save the cache before emitting into the region and restore it after.
  Cache SaveCache() const { return cache_; }
  void RestoreCache(Cache cache) { cache_ = std::move(cache); }

  mlir::Value Linear(const ElementIndex& index, const ir::Shape& shape);
  std::vector<mlir::Value> Multi(const ElementIndex& index, const ir::Shape& shape);
  mlir::Value IndexConstant(int64_t value);
  mlir::IntegerType index_type() const { return index_type_; }

 private:
  StatusOr<mlir::Value> EmitUncached(const ir::Instruction& inst, const ElementIndex& index);
  static std::vector<const void*> CacheKey(const ElementIndex& index);
  // The operand multi-index of a reshape from `out` to `in` at `multi`, dim
  // group by dim group (Note [reshape index groups]); nullopt if the shapes
  // do not split into groups.
  std::optional<std::vector<mlir::Value>> ReshapeGroups(const std::vector<mlir::Value>& multi,
                                                        const ir::Shape& out, const ir::Shape& in);
  StatusOr<mlir::Value> EmitOperand(const ir::Instruction& inst, int64_t i,
                                    std::vector<mlir::Value> multi);
  // The cases of EmitUncached that take more than a few lines: a splat
  // constant, and the ops that map the index to their operands' (Note
  // [reshape index groups]; a pad or concatenate selects among them).
  StatusOr<mlir::Value> EmitConstant(const ir::Instruction& inst);
  // A broadcast or transpose: its operand at the mapped index.
  StatusOr<mlir::Value> EmitPermuted(const ir::Instruction& inst, const ElementIndex& index);
  StatusOr<mlir::Value> EmitReshape(const ir::Instruction& inst, const ElementIndex& index);
  StatusOr<mlir::Value> EmitSlice(const ir::Instruction& inst, const ElementIndex& index);
  StatusOr<mlir::Value> EmitPad(const ir::Instruction& inst, const ElementIndex& index);
  StatusOr<mlir::Value> EmitConcatenate(const ir::Instruction& inst, const ElementIndex& index);

  mlir::OpBuilder& b_;
  mlir::Block* entry_;
  mlir::IntegerType index_type_;
  std::string what_;
  Reader read_parameter_, read_reduce_;
  // Parameters of inlined decompositions -> the composite's operands.
  std::map<const ir::Instruction*, const ir::Instruction*> inlined_;
  Cache cache_;
  std::map<int64_t, mlir::Value> constants_;
};

// x (+) y for a reduce of `kind`: an f32 add or maximum.
mlir::Value CombineReduce(mlir::OpBuilder& b, mlir::Location loc, ir::ReduceKind kind,
                          mlir::Value x, mlir::Value y);

// Register type of a dtype (pred: i1) and its in-memory type (pred: i8).
mlir::Type ElementType(mlir::MLIRContext* ctx, ir::DType dtype);
mlir::Type StorageType(mlir::MLIRContext* ctx, ir::DType dtype);
int64_t StorageBytes(ir::DType dtype);

// Scalar loads and stores of element `index` of a `!llvm.ptr<1>` buffer.
mlir::Value LoadElement(mlir::OpBuilder& b, mlir::Location loc, mlir::Value ptr, mlir::Value index,
                        ir::DType dtype);
void StoreElement(mlir::OpBuilder& b, mlir::Location loc, mlir::Value value, mlir::Value ptr,
                  mlir::Value index, ir::DType dtype);
// Elements index, index + 1, ... of the buffer as one vector store of
// `lanes` (aligned to the vector, at most 16 bytes); one lane: StoreElement.
void StoreElements(mlir::OpBuilder& b, mlir::Location loc, const std::vector<mlir::Value>& lanes,
                   mlir::Value ptr, mlir::Value index, ir::DType dtype);
// Emits outputs[o] at `index` and stores it at element `at` of kernel
// argument slots[o] of the kernel `body`, for every o; errors are prefixed with the fusion's name.
Status EmitAndStore(FusedEmitter& emitter, mlir::OpBuilder& b, mlir::Location loc,
                    mlir::Block* body, const ir::Instruction& fusion,
                    const std::vector<const ir::Instruction*>& outputs,
                    const std::vector<int64_t>& slots, const ElementIndex& index, mlir::Value at);
// Storage <-> register form of one element (pred: i8 <-> i1).
mlir::Value FromStorage(mlir::OpBuilder& b, mlir::Location loc, mlir::Value v, ir::DType dtype);
mlir::Value ToStorage(mlir::OpBuilder& b, mlir::Location loc, mlir::Value v, ir::DType dtype);

// `convert` semantics between any two dtypes.
mlir::Value ConvertValue(mlir::OpBuilder& b, mlir::Location loc, mlir::Value v, ir::DType from,
                         ir::DType to);
mlir::Value ScalarConstant(mlir::OpBuilder& b, mlir::Location loc, ir::DType dtype, double value);

// "%fused.3/%e": an instruction of a fused computation, for error messages.
std::string Describe(const ir::Instruction& inst);

// Creates an scf.for over [lb, ub) by `step` carrying `inits`, and leaves `b`
// inside its body (before the terminator if any); the caller must create the
// scf.yield when `inits` is not empty.
mlir::Operation* CreateFor(mlir::OpBuilder& b, mlir::Location loc, mlir::Value lb, mlir::Value ub,
                           mlir::Value step, mlir::ValueRange inits);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_FUSED_EMITTER_H_
