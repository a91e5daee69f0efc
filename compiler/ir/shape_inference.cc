#include "compiler/ir/shape_inference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/ir/computation.h"
#include "compiler/support/float_bits.h"

namespace gptc::ir {

namespace {

std::string Dims(std::span<const int64_t> d) { return DimsToString(d); }

// Checks that `dims` are distinct and each in [0, rank).
Status CheckDimensionList(std::string_view what, std::span<const int64_t> dims, int64_t rank) {
  std::vector<bool> seen(rank, false);
  for (int64_t d : dims) {
    if (d < 0 || d >= rank) return Error("{} {} out of range for rank {}", what, d, rank);
    if (seen[d]) return Error("{} {} repeated", what, d);
    seen[d] = true;
  }
  return Status::Ok();
}

Status CheckArray(const Shape& s, std::string_view what) {
  if (s.is_tuple()) return Error("{} must be an array, got tuple {}", what, s.ToString());
  return Status::Ok();
}

// A fusion or composite op's callee takes exactly the op's operands and returns its result.
StatusOr<Shape> CheckCalled(std::span<const Shape> operands, const Computation* called) {
  if (called == nullptr) return Error("needs a called computation (calls=%name)");
  std::vector<Instruction*> params = called->parameters();
  if (params.size() != operands.size()) {
    return Error("calls %{} with {} parameters but has {} operands", called->name(), params.size(),
                 operands.size());
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i] == nullptr) return Error("calls %{}: parameter {} missing", called->name(), i);
    if (params[i]->shape() != operands[i]) {
      return Error("operand {} has shape {} but %{} parameter {} is {}", i, operands[i].ToString(),
                   called->name(), i, params[i]->shape().ToString());
    }
  }
  if (called->root() == nullptr) return Error("calls %{} which has no root", called->name());
  return called->root()->shape();
}

StatusOr<Shape> InferDot(const Shape& lhs, const Shape& rhs, const DotDimensions& dn,
                         DType result_dtype) {
  if (lhs.dtype() != rhs.dtype()) {
    return Error("dot operand dtypes differ: {} vs {}", DTypeName(lhs.dtype()),
                 DTypeName(rhs.dtype()));
  }
  if (!IsFloat(lhs.dtype())) return Error("dot needs float operands, got {}", lhs.ToString());
  if (result_dtype != lhs.dtype() && result_dtype != DType::kF32) {
    return Error("dot of {} can produce {} or f32, not {}", DTypeName(lhs.dtype()),
                 DTypeName(lhs.dtype()), DTypeName(result_dtype));
  }
  if (dn.lhs_batch.size() != dn.rhs_batch.size()) {
    return Error("dot has {} lhs batch dims but {} rhs batch dims", dn.lhs_batch.size(),
                 dn.rhs_batch.size());
  }
  if (dn.lhs_contracting.size() != dn.rhs_contracting.size()) {
    return Error("dot has {} lhs contracting dims but {} rhs contracting dims",
                 dn.lhs_contracting.size(), dn.rhs_contracting.size());
  }
  std::vector<int64_t> lhs_used = dn.lhs_batch, rhs_used = dn.rhs_batch;
  lhs_used.insert(lhs_used.end(), dn.lhs_contracting.begin(), dn.lhs_contracting.end());
  rhs_used.insert(rhs_used.end(), dn.rhs_contracting.begin(), dn.rhs_contracting.end());
  RETURN_IF_ERROR(CheckDimensionList("dot lhs dim", lhs_used, lhs.rank()));
  RETURN_IF_ERROR(CheckDimensionList("dot rhs dim", rhs_used, rhs.rank()));
  for (size_t i = 0; i < dn.lhs_batch.size(); ++i) {
    if (lhs.dim(dn.lhs_batch[i]) != rhs.dim(dn.rhs_batch[i])) {
      return Error("dot batch dim {} has size {}, rhs dim {} has size {}", dn.lhs_batch[i],
                   lhs.dim(dn.lhs_batch[i]), dn.rhs_batch[i], rhs.dim(dn.rhs_batch[i]));
    }
  }
  for (size_t i = 0; i < dn.lhs_contracting.size(); ++i) {
    if (lhs.dim(dn.lhs_contracting[i]) != rhs.dim(dn.rhs_contracting[i])) {
      return Error("dot contracting dim {} has size {}, rhs dim {} has size {}",
                   dn.lhs_contracting[i], lhs.dim(dn.lhs_contracting[i]), dn.rhs_contracting[i],
                   rhs.dim(dn.rhs_contracting[i]));
    }
  }
  std::vector<int64_t> dims;
  for (int64_t d : dn.lhs_batch) dims.push_back(lhs.dim(d));
  auto append_free = [&dims](const Shape& s, const std::vector<int64_t>& used) {
    for (int64_t d = 0; d < s.rank(); ++d) {
      if (std::find(used.begin(), used.end(), d) == used.end()) dims.push_back(s.dim(d));
    }
  };
  append_free(lhs, lhs_used);
  append_free(rhs, rhs_used);
  return Shape(result_dtype, dims);
}

StatusOr<Shape> InferSlice(const Shape& in, const SliceSpec& s) {
  if (static_cast<int64_t>(s.starts.size()) != in.rank() || s.limits.size() != s.starts.size() ||
      s.strides.size() != s.starts.size()) {
    return Error("slice needs {} [start:limit:stride] ranges for {}", in.rank(), in.ToString());
  }
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < in.rank(); ++d) {
    if (s.starts[d] < 0 || s.starts[d] > s.limits[d] || s.limits[d] > in.dim(d)) {
      return Error("slice range [{}:{}] of dim {} out of bounds for size {}", s.starts[d],
                   s.limits[d], d, in.dim(d));
    }
    if (s.strides[d] < 1) return Error("slice stride {} of dim {} must be >= 1", s.strides[d], d);
    // ceil((limit - start) / stride), without overflow for huge strides.
    int64_t extent = s.limits[d] - s.starts[d];
    dims.push_back(extent == 0 ? 0 : (extent - 1) / s.strides[d] + 1);
  }
  return Shape(in.dtype(), dims);
}

// gather: result = table.dims[:axis] ++ indices.dims ++ table.dims[axis+1:].
StatusOr<Shape> InferGather(const Shape& table, const Shape& indices, int64_t axis) {
  if (indices.dtype() != DType::kS32 && indices.dtype() != DType::kU16) {
    return Error("indices must be s32 or u16, got {}", indices.ToString());
  }
  if (axis < 0 || axis >= table.rank()) {
    return Error("axis {} out of range for {}", axis, table.ToString());
  }
  std::vector<int64_t> dims(table.dims().begin(), table.dims().begin() + axis);
  dims.insert(dims.end(), indices.dims().begin(), indices.dims().end());
  dims.insert(dims.end(), table.dims().begin() + axis + 1, table.dims().end());
  return Shape(table.dtype(), dims);
}

StatusOr<Shape> InferElementwise(Opcode opcode, std::span<const Shape> ops) {
  const Shape& a = ops[0];
  if (IsUnaryElementwise(opcode)) {
    if (opcode == Opcode::kCopy) return a;
    if (a.dtype() == DType::kPred) return Error("{} of pred is undefined", OpcodeName(opcode));
    bool float_only = opcode != Opcode::kNeg && opcode != Opcode::kAbs;
    if (float_only && !IsFloat(a.dtype())) {
      return Error("{} needs a float operand, got {}", OpcodeName(opcode), a.ToString());
    }
    return a;
  }
  if (opcode == Opcode::kSelect) {
    const Shape &p = ops[0], &t = ops[1], &f = ops[2];
    if (p.dtype() != DType::kPred)
      return Error("select predicate must be pred, got {}", p.ToString());
    if (t != f) return Error("select branches differ: {} vs {}", t.ToString(), f.ToString());
    if (p.dims() != t.dims()) {
      return Error("select predicate {} does not match branches {}", p.ToString(), t.ToString());
    }
    return t;
  }
  const Shape& b = ops[1];
  if (a != b) {
    return Error("{} operands differ: {} vs {}", OpcodeName(opcode), a.ToString(), b.ToString());
  }
  if (opcode == Opcode::kCompare) return a.WithDType(DType::kPred);
  if (a.dtype() == DType::kPred) return Error("{} of pred is undefined", OpcodeName(opcode));
  if (opcode == Opcode::kPow && !IsFloat(a.dtype())) {
    return Error("pow needs float operands, got {}", a.ToString());
  }
  return a;
}

}  // namespace

Status CheckLiteralValues(DType dtype, std::span<const double> values) {
  for (size_t i = 0; i < values.size(); ++i) {
    double v = values[i];
    bool ok = true;
    switch (dtype) {
      case DType::kPred:
        ok = v == 0 || v == 1;
        break;
      case DType::kS32:
        ok = v == std::trunc(v) && v >= -2147483648.0 && v <= 2147483647.0;
        break;
      case DType::kU16:
        ok = v == std::trunc(v) && v >= 0 && v <= 65535;
        break;
      case DType::kF32:
        ok = std::isnan(v) || static_cast<double>(static_cast<float>(v)) == v;
        break;
      case DType::kBF16:
        ok = std::isnan(v) || static_cast<double>(RoundToBF16(static_cast<float>(v))) == v;
        break;
      case DType::kF16:
        ok = std::isnan(v) || static_cast<double>(RoundToF16(static_cast<float>(v))) == v;
        break;
    }
    if (!ok)
      return Error("constant value {} at index {} is not exact in {}", v, i, DTypeName(dtype));
  }
  return Status::Ok();
}

namespace {

// The shape rules of InferShape that take more than a few lines, one per
// opcode; each names what does not fit, as InferShape documents.
StatusOr<Shape> InferBroadcast(std::span<const Shape> ops, const Attrs& attrs,
                               const Shape& declared) {
  const Shape& in = ops[0];
  if (static_cast<int64_t>(attrs.dimensions.size()) != in.rank()) {
    return Error("broadcast dimensions {} must have one entry per operand dim ({})",
                 Dims(attrs.dimensions), in.rank());
  }
  RETURN_IF_ERROR(CheckDimensionList("broadcast dimension", attrs.dimensions, declared.rank()));
  for (int64_t i = 0; i < in.rank(); ++i) {
    if (in.dim(i) != declared.dim(attrs.dimensions[i])) {
      return Error("broadcast operand dim {} (size {}) maps to result dim {} of size {}", i,
                   in.dim(i), attrs.dimensions[i], declared.dim(attrs.dimensions[i]));
    }
  }
  return Shape(in.dtype(), declared.dims());
}

StatusOr<Shape> InferTranspose(std::span<const Shape> ops, const Attrs& attrs) {
  const Shape& in = ops[0];
  if (static_cast<int64_t>(attrs.dimensions.size()) != in.rank()) {
    return Error("transpose dimensions {} is not a permutation of rank {}", Dims(attrs.dimensions),
                 in.rank());
  }
  RETURN_IF_ERROR(CheckDimensionList("transpose dimension", attrs.dimensions, in.rank()));
  std::vector<int64_t> dims;
  for (int64_t d : attrs.dimensions) dims.push_back(in.dim(d));
  return Shape(in.dtype(), dims);
}

StatusOr<Shape> InferPad(std::span<const Shape> ops, const Attrs& attrs) {
  const Shape &in = ops[0], &value = ops[1];
  if (!value.is_scalar() || value.dtype() != in.dtype()) {
    return Error("pad value must be a {} scalar, got {}", DTypeName(in.dtype()), value.ToString());
  }
  if (static_cast<int64_t>(attrs.pad_low.size()) != in.rank() ||
      attrs.pad_high.size() != attrs.pad_low.size()) {
    return Error("pad needs low and high padding for each of {} dims", in.rank());
  }
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < in.rank(); ++d) {
    if (attrs.pad_low[d] < 0 || attrs.pad_high[d] < 0) {
      return Error("pad of dim {} is negative", d);
    }
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    if (attrs.pad_low[d] > kMax - in.dim(d) ||
        attrs.pad_high[d] > kMax - in.dim(d) - attrs.pad_low[d]) {
      return Error("pad of dim {} overflows", d);
    }
    dims.push_back(in.dim(d) + attrs.pad_low[d] + attrs.pad_high[d]);
  }
  return Shape(in.dtype(), dims);
}

StatusOr<Shape> InferConcatenate(std::span<const Shape> ops, const Attrs& attrs) {
  if (ops.empty()) return Error("concatenate needs at least one operand");
  if (attrs.dimensions.size() != 1) return Error("concatenate needs one dimension");
  int64_t axis = attrs.dimensions[0];
  const Shape& first = ops[0];
  if (axis < 0 || axis >= first.rank()) {
    return Error("concatenate dimension {} out of range for {}", axis, first.ToString());
  }
  std::vector<int64_t> dims = first.dims();
  for (size_t i = 1; i < ops.size(); ++i) {
    const Shape& s = ops[i];
    bool same = s.dtype() == first.dtype() && s.rank() == first.rank();
    for (int64_t d = 0; same && d < s.rank(); ++d) same = d == axis || s.dim(d) == first.dim(d);
    if (!same) {
      return Error("concatenate operand {} {} does not match {} outside dim {}", i, s.ToString(),
                   first.ToString(), axis);
    }
    dims[axis] += s.dim(axis);
  }
  return Shape(first.dtype(), dims);
}

StatusOr<Shape> InferReduce(std::span<const Shape> ops, const Attrs& attrs, const Shape& declared) {
  const Shape& in = ops[0];
  if (in.dtype() == DType::kPred) return Error("reduce of pred is undefined");
  RETURN_IF_ERROR(CheckDimensionList("reduce dimension", attrs.dimensions, in.rank()));
  DType out = declared.dtype();
  if (out != in.dtype() && !(IsFloat(in.dtype()) && out == DType::kF32)) {
    if (!IsFloat(in.dtype())) {
      return Error("reduce of {} can only produce {}, not {}", DTypeName(in.dtype()),
                   DTypeName(in.dtype()), DTypeName(out));
    }
    return Error("reduce of {} can produce {} or f32, not {}", DTypeName(in.dtype()),
                 DTypeName(in.dtype()), DTypeName(out));
  }
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < in.rank(); ++d) {
    if (std::find(attrs.dimensions.begin(), attrs.dimensions.end(), d) == attrs.dimensions.end()) {
      dims.push_back(in.dim(d));
    }
  }
  return Shape(out, dims);
}

StatusOr<Shape> InferScatterAdd(std::span<const Shape> ops, const Attrs& attrs) {
  ASSIGN_OR_RETURN(Shape updates, InferGather(ops[0], ops[1], attrs.index));
  if (updates != ops[2]) {
    return Error("scatter-add updates {} must be {} for these indices", ops[2].ToString(),
                 updates.ToString());
  }
  if (!IsFloat(ops[0].dtype())) return Error("scatter-add needs a float operand");
  return ops[0];
}

StatusOr<Shape> InferAttention(std::span<const Shape> ops, const Attrs& attrs,
                               const Computation* called) {
  const Shape &q = ops[0], &k = ops[1], &v = ops[2];
  for (const Shape* s : {&q, &k, &v}) {
    RETURN_IF_ERROR(CheckArray(*s, "attention operand"));
    if (s->rank() != 4 || !IsFloat(s->dtype()) || s->dtype() != q.dtype()) {
      return Error(
          "attention takes q, k, v as float [batch,heads,seq,head_dim] of one "
          "dtype, got {}",
          s->ToString());
    }
  }
  if (k.dims() != v.dims() || q.dim(0) != k.dim(0) || q.dim(1) != k.dim(1) ||
      q.dim(3) != k.dim(3)) {
    return Error("attention q {} does not match k {} and v {}", q.ToString(), k.ToString(),
                 v.ToString());
  }
  if (attrs.causal && q.dim(2) != k.dim(2)) {
    return Error("causal attention needs equal query and key lengths");
  }
  if (attrs.grad_dtype && !IsFloat(*attrs.grad_dtype)) {
    return Error("attention grad_dtype must be a float dtype, got {}",
                 DTypeName(*attrs.grad_dtype));
  }
  ASSIGN_OR_RETURN(Shape result, CheckCalled(ops, called));
  if (result != q) {
    return Error("attention decomposition returns {}, expected {}", result.ToString(),
                 q.ToString());
  }
  return result;
}

// Note [flash attention ops] (passes/autodiff_attention.h).
StatusOr<Shape> InferAttentionLseOrGrad(Opcode opcode, std::span<const Shape> ops,
                                        const Attrs& attrs, const Computation* called,
                                        const Shape& declared) {
  const bool grad = opcode == Opcode::kAttentionGrad;
  const std::string_view op = OpcodeName(opcode);
  const Shape &q = ops[0], &k = ops[1];
  const int64_t n = grad ? 4 : 2;
  for (int64_t i = 0; i < n; ++i) {
    const Shape& s = ops[i == 3 ? 3 : i];
    RETURN_IF_ERROR(CheckArray(s, "attention operand"));
    if (s.rank() != 4 || !IsFloat(s.dtype()) || s.dtype() != q.dtype()) {
      return Error("{} takes q, k{} as float [batch,heads,seq,head_dim] of one dtype, got {}", op,
                   grad ? ", v, do" : "", s.ToString());
    }
  }
  if (q.dim(0) != k.dim(0) || q.dim(1) != k.dim(1) || q.dim(3) != k.dim(3) ||
      (grad && (ops[2].dims() != k.dims() || ops[3].dims() != q.dims()))) {
    return Error("{} q {} does not match k {}{}", op, q.ToString(), k.ToString(),
                 grad ? fmt::format(", v {} and do {}", ops[2].ToString(), ops[3].ToString()) : "");
  }
  if (attrs.causal && q.dim(2) != k.dim(2)) {
    return Error("causal {} needs equal query and key lengths", op);
  }
  Shape rows(DType::kF32, {q.dim(0), q.dim(1), q.dim(2)});
  if (grad) {
    for (int64_t i : {4, 5}) {
      if (ops[i] != rows) {
        return Error("attention-grad {} must be {}, got {}", i == 4 ? "lse" : "delta",
                     rows.ToString(), ops[i].ToString());
      }
    }
    if (attrs.index < 0 || attrs.index > 2) {
      return Error("attention-grad wrt must be q, k or v");
    }
  }
  Shape result =
      !grad ? rows : (attrs.index == 0 ? q : ops[attrs.index]).WithDType(declared.dtype());
  if (!IsFloat(result.dtype())) return Error("{} result must be float", op);
  ASSIGN_OR_RETURN(Shape decomposed, CheckCalled(ops, called));
  if (decomposed != result) {
    return Error("{} decomposition returns {}, expected {}", op, decomposed.ToString(),
                 result.ToString());
  }
  return result;
}

StatusOr<Shape> InferSoftmaxCrossEntropy(std::span<const Shape> ops, const Attrs& attrs,
                                         const Computation* called) {
  const Shape &logits = ops[0], &targets = ops[1];
  RETURN_IF_ERROR(CheckArray(logits, "logits"));
  RETURN_IF_ERROR(CheckArray(targets, "targets"));
  if (!IsFloat(logits.dtype()) || logits.rank() < 1) {
    return Error("logits must be float [..., classes], got {}", logits.ToString());
  }
  std::vector<int64_t> rows(logits.dims().begin(), logits.dims().end() - 1);
  if (targets.dtype() != DType::kS32 || targets.dims() != rows) {
    return Error("targets must be s32{} for logits {}, got {}", Dims(rows), logits.ToString(),
                 targets.ToString());
  }
  int64_t classes = logits.dim(logits.rank() - 1);
  if (attrs.num_classes < 0 || attrs.num_classes > classes) {
    return Error("num_classes {} out of range for {} classes", attrs.num_classes, classes);
  }
  ASSIGN_OR_RETURN(Shape result, CheckCalled(ops, called));
  Shape expected(DType::kF32, rows);
  if (result != expected) {
    return Error("softmax-cross-entropy decomposition returns {}, expected {}", result.ToString(),
                 expected.ToString());
  }
  return result;
}

StatusOr<Shape> InferGetTupleElement(std::span<const Shape> ops, const Attrs& attrs) {
  const Shape& t = ops[0];
  if (!t.is_tuple()) return Error("get-tuple-element of non-tuple {}", t.ToString());
  if (attrs.index < 0 || attrs.index >= static_cast<int64_t>(t.tuple_elements().size())) {
    return Error("tuple index {} out of range for {}", attrs.index, t.ToString());
  }
  return t.tuple_elements()[attrs.index];
}

// reduce-scatter and all-gather: a rank-1 float operand and `replicas=N`
// ranks; reduce-scatter's length divides by N and gives its 1/N shard,
// all-gather's gives N times its length.
StatusOr<Shape> InferCollective(Opcode opcode, const Shape& x, const Attrs& attrs) {
  const std::string_view name = OpcodeName(opcode);
  if (!IsFloat(x.dtype())) return Error("{} needs a float operand, got {}", name, x.ToString());
  if (x.rank() != 1) return Error("{} needs a rank-1 operand, got {}", name, x.ToString());
  const int64_t n = attrs.index;
  if (n < 1) return Error("{} needs replicas >= 1, got replicas={}", name, n);
  const int64_t length = x.dims()[0];
  if (opcode == Opcode::kAllGather) {
    if (length > 0 && n > (int64_t{1} << 48) / length) {
      return Error("{} of {} over replicas={} is too large", name, x.ToString(), n);
    }
    return Shape(x.dtype(), {length * n});
  }
  if (length % n != 0) {
    return Error("{} of {} over replicas={}: {} elements do not divide into {} shards", name,
                 x.ToString(), n, length, n);
  }
  return Shape(x.dtype(), {length / n});
}

// The operand count and kinds and the declared result's, before the rules.
Status CheckOperands(Opcode opcode, std::span<const Shape> ops, const Shape& declared) {
  int arity = OpcodeArity(opcode);
  if (arity >= 0 && static_cast<int>(ops.size()) != arity) {
    return Error("{} takes {} operand{}, got {}", OpcodeName(opcode), arity, arity == 1 ? "" : "s",
                 ops.size());
  }
  bool takes_tuples =
      opcode == Opcode::kTuple || opcode == Opcode::kGetTupleElement || CallsComputation(opcode);
  if (!takes_tuples) {
    for (size_t i = 0; i < ops.size(); ++i) {
      RETURN_IF_ERROR(CheckArray(ops[i], fmt::format("operand {}", i)));
    }
  }
  if (opcode != Opcode::kTuple && opcode != Opcode::kGetTupleElement &&
      opcode != Opcode::kParameter && !CallsComputation(opcode)) {
    RETURN_IF_ERROR(CheckArray(declared, "result"));
  }
  for (int64_t d : declared.is_tuple() ? std::vector<int64_t>{} : declared.dims()) {
    if (d < 0) return Error("negative dimension in {}", declared.ToString());
  }
  return Status::Ok();
}

// Parameters, constants and iotas: the declared shape, checked.
StatusOr<Shape> InferLeaf(Opcode opcode, const Attrs& attrs, const Shape& declared) {
  switch (opcode) {
    case Opcode::kParameter:
      if (attrs.index < 0) return Error("parameter number {} is negative", attrs.index);
      return declared;
    case Opcode::kConstant:
      if (static_cast<int64_t>(attrs.literal.size()) != declared.num_elements()) {
        return Error("constant has {} values but {} holds {}", attrs.literal.size(),
                     declared.ToString(), declared.num_elements());
      }
      RETURN_IF_ERROR(CheckLiteralValues(declared.dtype(), attrs.literal));
      return declared;
    default:  // iota
      if (declared.dtype() == DType::kPred) return Error("iota of pred is undefined");
      if (attrs.index < 0 || attrs.index >= declared.rank()) {
        return Error("iota_dimension {} out of range for {}", attrs.index, declared.ToString());
      }
      return declared;
  }
}

}  // namespace

StatusOr<Shape> InferShape(Opcode opcode, std::span<const Shape> ops, const Attrs& attrs,
                           const Computation* called, const Shape& declared) {
  RETURN_IF_ERROR(CheckOperands(opcode, ops, declared));
  if (IsElementwise(opcode)) {
    if (opcode == Opcode::kConvert) return ops[0].WithDType(declared.dtype());
    return InferElementwise(opcode, ops);
  }
  switch (opcode) {
    case Opcode::kParameter:
    case Opcode::kConstant:
    case Opcode::kIota:
      return InferLeaf(opcode, attrs, declared);
    case Opcode::kBroadcast:
      return InferBroadcast(ops, attrs, declared);
    case Opcode::kReshape:
      if (ops[0].num_elements() != declared.num_elements()) {
        return Error("reshape of {} to {} changes the element count", ops[0].ToString(),
                     declared.ToString());
      }
      return Shape(ops[0].dtype(), declared.dims());
    case Opcode::kTranspose:
      return InferTranspose(ops, attrs);
    case Opcode::kSlice:
      return InferSlice(ops[0], attrs.slice);
    case Opcode::kPad:
      return InferPad(ops, attrs);
    case Opcode::kConcatenate:
      return InferConcatenate(ops, attrs);
    case Opcode::kReduce:
      return InferReduce(ops, attrs, declared);
    case Opcode::kDot:
      return InferDot(ops[0], ops[1], attrs.dot, declared.dtype());
    case Opcode::kGather:
      return InferGather(ops[0], ops[1], attrs.index);
    case Opcode::kScatterAdd:
      return InferScatterAdd(ops, attrs);
    case Opcode::kAllReduce:
      if (!IsFloat(ops[0].dtype())) return Error("all-reduce needs a float operand");
      return ops[0];
    case Opcode::kReduceScatter:
    case Opcode::kAllGather:
      return InferCollective(opcode, ops[0], attrs);
    case Opcode::kFusion:
      return CheckCalled(ops, called);
    case Opcode::kAttention:
      return InferAttention(ops, attrs, called);
    case Opcode::kAttentionLse:
    case Opcode::kAttentionGrad:
      return InferAttentionLseOrGrad(opcode, ops, attrs, called, declared);
    case Opcode::kSoftmaxCrossEntropy:
      return InferSoftmaxCrossEntropy(ops, attrs, called);
    case Opcode::kTuple:
      return Shape::Tuple(std::vector<Shape>(ops.begin(), ops.end()));
    case Opcode::kGetTupleElement:
      return InferGetTupleElement(ops, attrs);
    default:
      return Error("no shape rule for {}", OpcodeName(opcode));
  }
}

}  // namespace gptc::ir
