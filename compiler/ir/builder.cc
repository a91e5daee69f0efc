#include "compiler/ir/builder.h"

#include <memory>

#include "compiler/ir/shape_inference.h"

namespace gptc::ir {

StatusOr<Instruction*> Builder::Build(Opcode opcode, std::vector<Instruction*> operands,
                                      Attrs attrs, const Shape& declared, Computation* called,
                                      std::string_view name) {
  std::string base(name);
  if (base.empty()) {
    base = name_prefix_.empty() ? std::string(OpcodeName(opcode))
                                : fmt::format("{}.{}", name_prefix_, OpcodeName(opcode));
  }
  std::string unique = computation_->UniqueName(base);
  std::vector<Shape> shapes;
  for (Instruction* op : operands) shapes.push_back(op->shape());
  StatusOr<Shape> shape = InferShape(opcode, shapes, attrs, called, declared);
  if (!shape.ok()) {
    std::string subject = fmt::format("%{} ({})", unique, OpcodeName(opcode));
    if (!metadata_.empty()) subject = fmt::format("{} {}", metadata_, subject);
    return shape.status().WithPrefix(subject);
  }
  auto inst = std::make_unique<Instruction>(unique, opcode, std::move(shape).value(),
                                            std::move(operands), std::move(attrs));
  inst->set_metadata(metadata_);
  inst->set_role(role_);
  inst->set_called_computation(called);
  return computation_->InsertInstructionBefore(std::move(inst), insert_before_);
}

StatusOr<Instruction*> Builder::Parameter(int64_t number, const Shape& shape,
                                          std::string_view name) {
  Attrs attrs;
  attrs.index = number;
  return Build(Opcode::kParameter, {}, attrs, shape, nullptr, name);
}

StatusOr<Instruction*> Builder::Constant(const Shape& shape, std::vector<double> values,
                                         std::string_view name) {
  Attrs attrs;
  attrs.literal = std::move(values);
  return Build(Opcode::kConstant, {}, std::move(attrs), shape, nullptr, name);
}

StatusOr<Instruction*> Builder::ScalarConstant(DType dtype, double value, std::string_view name) {
  return Constant(Shape::Scalar(dtype), {value}, name);
}

StatusOr<Instruction*> Builder::Iota(const Shape& shape, int64_t dimension) {
  Attrs attrs;
  attrs.index = dimension;
  return Build(Opcode::kIota, {}, attrs, shape);
}

StatusOr<Instruction*> Builder::Convert(Instruction* x, DType dtype) {
  return Build(Opcode::kConvert, {x}, {}, x->shape().WithDType(dtype));
}

StatusOr<Instruction*> Builder::Broadcast(Instruction* x, const std::vector<int64_t>& result_dims,
                                          std::vector<int64_t> dimensions) {
  Attrs attrs;
  attrs.dimensions = std::move(dimensions);
  return Build(Opcode::kBroadcast, {x}, std::move(attrs), Shape(x->shape().dtype(), result_dims));
}

StatusOr<Instruction*> Builder::Reshape(Instruction* x, const std::vector<int64_t>& dims) {
  return Build(Opcode::kReshape, {x}, {}, Shape(x->shape().dtype(), dims));
}

StatusOr<Instruction*> Builder::Transpose(Instruction* x, std::vector<int64_t> permutation) {
  Attrs attrs;
  attrs.dimensions = std::move(permutation);
  return Build(Opcode::kTranspose, {x}, std::move(attrs), x->shape());
}

StatusOr<Instruction*> Builder::Slice(Instruction* x, std::vector<int64_t> starts,
                                      std::vector<int64_t> limits, std::vector<int64_t> strides) {
  if (strides.empty()) strides.assign(starts.size(), 1);
  Attrs attrs;
  attrs.slice = {std::move(starts), std::move(limits), std::move(strides)};
  return Build(Opcode::kSlice, {x}, std::move(attrs), x->shape());
}

StatusOr<Instruction*> Builder::Pad(Instruction* x, Instruction* value, std::vector<int64_t> low,
                                    std::vector<int64_t> high) {
  Attrs attrs;
  attrs.pad_low = std::move(low);
  attrs.pad_high = std::move(high);
  return Build(Opcode::kPad, {x, value}, std::move(attrs), x->shape());
}

StatusOr<Instruction*> Builder::Concatenate(std::vector<Instruction*> xs, int64_t dimension) {
  Attrs attrs;
  attrs.dimensions = {dimension};
  Shape declared = xs.empty() ? Shape() : xs[0]->shape();
  return Build(Opcode::kConcatenate, std::move(xs), std::move(attrs), declared);
}

StatusOr<Instruction*> Builder::Select(Instruction* pred, Instruction* on_true,
                                       Instruction* on_false) {
  return Build(Opcode::kSelect, {pred, on_true, on_false}, {}, on_true->shape());
}

StatusOr<Instruction*> Builder::Compare(Instruction* a, Instruction* b,
                                        CompareDirection direction) {
  Attrs attrs;
  attrs.direction = direction;
  return Build(Opcode::kCompare, {a, b}, attrs, a->shape().WithDType(DType::kPred));
}

StatusOr<Instruction*> Builder::Unary(Opcode opcode, Instruction* x) {
  if (!IsUnaryElementwise(opcode)) return Error("{} is not a unary op", OpcodeName(opcode));
  return Build(opcode, {x}, {}, x->shape());
}

StatusOr<Instruction*> Builder::Binary(Opcode opcode, Instruction* a, Instruction* b) {
  if (!IsBinaryElementwise(opcode)) return Error("{} is not a binary op", OpcodeName(opcode));
  return Build(opcode, {a, b}, {}, a->shape());
}

StatusOr<Instruction*> Builder::Reduce(Instruction* x, std::vector<int64_t> dimensions,
                                       ReduceKind kind, DType result_dtype) {
  Attrs attrs;
  attrs.dimensions = std::move(dimensions);
  attrs.reduce_kind = kind;
  return Build(Opcode::kReduce, {x}, std::move(attrs), Shape::Scalar(result_dtype));
}

StatusOr<Instruction*> Builder::Dot(Instruction* lhs, Instruction* rhs, DotDimensions dims,
                                    DType result_dtype) {
  Attrs attrs;
  attrs.dot = std::move(dims);
  return Build(Opcode::kDot, {lhs, rhs}, std::move(attrs), Shape::Scalar(result_dtype));
}

StatusOr<Instruction*> Builder::Gather(Instruction* table, Instruction* indices, int64_t axis) {
  Attrs attrs;
  attrs.index = axis;
  return Build(Opcode::kGather, {table, indices}, attrs, table->shape());
}

StatusOr<Instruction*> Builder::ScatterAdd(Instruction* operand, Instruction* indices,
                                           Instruction* updates, int64_t axis) {
  Attrs attrs;
  attrs.index = axis;
  return Build(Opcode::kScatterAdd, {operand, indices, updates}, attrs, operand->shape());
}

StatusOr<Instruction*> Builder::AllReduce(Instruction* x, ReduceKind kind) {
  Attrs attrs;
  attrs.reduce_kind = kind;
  return Build(Opcode::kAllReduce, {x}, attrs, x->shape());
}

StatusOr<Instruction*> Builder::ReduceScatter(Instruction* x, ReduceKind kind, int64_t replicas) {
  Attrs attrs;
  attrs.reduce_kind = kind;
  attrs.index = replicas;
  return Build(Opcode::kReduceScatter, {x}, attrs, x->shape());
}

StatusOr<Instruction*> Builder::AllGather(Instruction* x, int64_t replicas) {
  Attrs attrs;
  attrs.index = replicas;
  return Build(Opcode::kAllGather, {x}, attrs, x->shape());
}

StatusOr<Instruction*> Builder::Fusion(std::vector<Instruction*> operands, Computation* fused,
                                       FusionKind kind) {
  Attrs attrs;
  attrs.fusion_kind = kind;
  return Build(Opcode::kFusion, std::move(operands), attrs, Shape(), fused);
}

StatusOr<Instruction*> Builder::Attention(Instruction* q, Instruction* k, Instruction* v,
                                          bool causal, double scale, Computation* decomposition) {
  Attrs attrs;
  attrs.causal = causal;
  attrs.scale = scale;
  return Build(Opcode::kAttention, {q, k, v}, attrs, q->shape(), decomposition);
}

StatusOr<Instruction*> Builder::SoftmaxCrossEntropy(Instruction* logits, Instruction* targets,
                                                    int64_t num_classes,
                                                    Computation* decomposition) {
  Attrs attrs;
  attrs.num_classes = num_classes;
  return Build(Opcode::kSoftmaxCrossEntropy, {logits, targets}, attrs, Shape(), decomposition);
}

StatusOr<Instruction*> Builder::Tuple(std::vector<Instruction*> elements) {
  return Build(Opcode::kTuple, std::move(elements), {});
}

StatusOr<Instruction*> Builder::GetTupleElement(Instruction* tuple, int64_t index) {
  Attrs attrs;
  attrs.index = index;
  return Build(Opcode::kGetTupleElement, {tuple}, attrs);
}

}  // namespace gptc::ir
