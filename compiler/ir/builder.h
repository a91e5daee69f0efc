// Builder: appends shape-checked instructions to a computation.
//
// Every method infers the result shape with the typing rules of
// shape_inference.h and returns an error naming the instruction (and the
// current metadata scope) instead of building an ill-typed value.
#ifndef GPTC_COMPILER_IR_BUILDER_H_
#define GPTC_COMPILER_IR_BUILDER_H_

#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir/computation.h"
#include "compiler/support/status.h"

namespace gptc::ir {

class Builder {
 public:
  explicit Builder(Computation* computation) : computation_(computation) {}

  Computation* computation() const { return computation_; }
  // Metadata given to every instruction built from now on (the model scope).
  void set_metadata(std::string metadata) { metadata_ = std::move(metadata); }
  const std::string& metadata() const { return metadata_; }
  // Role given to every instruction built from now on (compiler/ir/role.h).
  void set_role(Role role) { role_ = role; }
  // Both of `x`'s: for the instructions a pass builds to replace or rewrite `x`.
  void set_origin(const Instruction& x) {
    metadata_ = x.metadata();
    role_ = x.role();
  }
  // Default names become `PREFIX.opcode` (made unique), so dumps read
  // `%h.3.attn.c_attn.dot` rather than `%dot.37`. Empty: the bare opcode.
  void set_name_prefix(std::string prefix) { name_prefix_ = std::move(prefix); }
  // New instructions go right before `before` (nullptr: at the end).
  void set_insertion_point(Instruction* before) { insert_before_ = before; }

  // The general form: `declared` supplies what operands do not determine (see
  // InferShape); `name` defaults to the name prefix and opcode, made unique.
  StatusOr<Instruction*> Build(Opcode opcode, std::vector<Instruction*> operands, Attrs attrs,
                               const Shape& declared = Shape(), Computation* called = nullptr,
                               std::string_view name = {});

  StatusOr<Instruction*> Parameter(int64_t number, const Shape& shape, std::string_view name = {});
  StatusOr<Instruction*> Constant(const Shape& shape, std::vector<double> values,
                                  std::string_view name = {});
  StatusOr<Instruction*> ScalarConstant(DType dtype, double value, std::string_view name = {});
  StatusOr<Instruction*> Iota(const Shape& shape, int64_t dimension);
  StatusOr<Instruction*> Convert(Instruction* x, DType dtype);
  StatusOr<Instruction*> Broadcast(Instruction* x, const std::vector<int64_t>& result_dims,
                                   std::vector<int64_t> dimensions);
  StatusOr<Instruction*> Reshape(Instruction* x, const std::vector<int64_t>& dims);
  StatusOr<Instruction*> Transpose(Instruction* x, std::vector<int64_t> permutation);
  StatusOr<Instruction*> Slice(Instruction* x, std::vector<int64_t> starts,
                               std::vector<int64_t> limits, std::vector<int64_t> strides = {});
  StatusOr<Instruction*> Pad(Instruction* x, Instruction* value, std::vector<int64_t> low,
                             std::vector<int64_t> high);
  StatusOr<Instruction*> Concatenate(std::vector<Instruction*> xs, int64_t dimension);
  StatusOr<Instruction*> Select(Instruction* pred, Instruction* on_true, Instruction* on_false);
  StatusOr<Instruction*> Compare(Instruction* a, Instruction* b, CompareDirection direction);
  StatusOr<Instruction*> Unary(Opcode opcode, Instruction* x);
  StatusOr<Instruction*> Binary(Opcode opcode, Instruction* a, Instruction* b);
  StatusOr<Instruction*> Reduce(Instruction* x, std::vector<int64_t> dimensions, ReduceKind kind,
                                DType result_dtype);
  StatusOr<Instruction*> Dot(Instruction* lhs, Instruction* rhs, DotDimensions dims,
                             DType result_dtype);
  StatusOr<Instruction*> Gather(Instruction* table, Instruction* indices, int64_t axis);
  StatusOr<Instruction*> ScatterAdd(Instruction* operand, Instruction* indices,
                                    Instruction* updates, int64_t axis);
  StatusOr<Instruction*> AllReduce(Instruction* x, ReduceKind kind);
  // This rank's shard of the reduction of a rank-1 `x` over `replicas` ranks,
  // and the concatenation of every rank's rank-1 `x` in rank order.
  StatusOr<Instruction*> ReduceScatter(Instruction* x, ReduceKind kind, int64_t replicas);
  StatusOr<Instruction*> AllGather(Instruction* x, int64_t replicas);
  StatusOr<Instruction*> Fusion(std::vector<Instruction*> operands, Computation* fused,
                                FusionKind kind);
  StatusOr<Instruction*> Attention(Instruction* q, Instruction* k, Instruction* v, bool causal,
                                   double scale, Computation* decomposition);
  StatusOr<Instruction*> SoftmaxCrossEntropy(Instruction* logits, Instruction* targets,
                                             int64_t num_classes, Computation* decomposition);
  StatusOr<Instruction*> Tuple(std::vector<Instruction*> elements);
  StatusOr<Instruction*> GetTupleElement(Instruction* tuple, int64_t index);

 private:
  Computation* computation_;
  Instruction* insert_before_ = nullptr;
  std::string metadata_;
  Role role_;
  std::string name_prefix_;
};

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_BUILDER_H_
