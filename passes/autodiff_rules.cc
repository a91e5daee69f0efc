// The VJP rules of the autodiff pass, one function per opcode (as tinygrad's gradient.py).
//
// Notation: y = op(x...), dy is the adjoint of y, dx the adjoint returned for x.
// Every rule is checked against central finite differences in
// tests/passes/autodiff_test.cc.
#include "passes/autodiff_rules.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <numeric>

#include "passes/autodiff_attention.h"

namespace gptc::passes::autodiff {

using ir::CompareDirection;
using ir::DType;
using ir::Opcode;
using ir::Shape;

// ---------------------------------------------------------------------------
// GradBuilder

void GradBuilder::SetScope(const Instruction& forward) {
  name_ = "grad." + forward.name();
  builder_.set_metadata(forward.metadata().empty() ? "" : "grad." + forward.metadata());
  builder_.set_role({ir::Phase::kGradient, forward.role().layer});
}

void GradBuilder::Fail(Status status) {
  if (status_.ok()) status_ = std::move(status);
}

Instruction* GradBuilder::Build(Opcode opcode, std::vector<Instruction*> operands, ir::Attrs attrs,
                                const Shape& declared, ir::Computation* called) {
  if (!status_.ok()) return nullptr;
  for (Instruction* op : operands) {
    if (op == nullptr) {
      Fail(Error("autodiff: internal error: missing operand for {}", ir::OpcodeName(opcode)));
      return nullptr;
    }
  }
  StatusOr<Instruction*> inst =
      builder_.Build(opcode, std::move(operands), std::move(attrs), declared, called, name_);
  if (!inst.ok()) {
    Fail(inst.status().WithPrefix("autodiff"));
    return nullptr;
  }
  return *inst;
}

Instruction* GradBuilder::Full(const Shape& shape, double value) {
  ir::Attrs attrs;
  attrs.literal = {static_cast<double>(static_cast<float>(value))};
  Instruction* c = Build(Opcode::kConstant, {}, attrs, Shape::Scalar(DType::kF32));
  c = Convert(c, shape.dtype());
  if (shape.rank() == 0) return c;
  return Broadcast(c, shape.dims(), {});
}

Instruction* GradBuilder::Iota(const Shape& shape, int64_t dimension) {
  ir::Attrs attrs;
  attrs.index = dimension;
  return Build(Opcode::kIota, {}, attrs, shape);
}

Instruction* GradBuilder::Unary(Opcode opcode, Instruction* x) {
  if (x == nullptr) return nullptr;
  return Build(opcode, {x}, {}, x->shape());
}

Instruction* GradBuilder::Binary(Opcode opcode, Instruction* a, Instruction* b) {
  if (a == nullptr || b == nullptr) return nullptr;
  return Build(opcode, {a, b}, {}, a->shape());
}

Instruction* GradBuilder::Scale(Instruction* x, double c) {
  if (x == nullptr) return nullptr;
  return Mul(x, Full(x->shape(), c));
}

Instruction* GradBuilder::Convert(Instruction* x, DType dtype) {
  if (x == nullptr || x->shape().dtype() == dtype) return x;
  return Build(Opcode::kConvert, {x}, {}, x->shape().WithDType(dtype));
}

Instruction* GradBuilder::Compare(Instruction* a, Instruction* b, CompareDirection direction) {
  if (a == nullptr) return nullptr;
  ir::Attrs attrs;
  attrs.direction = direction;
  return Build(Opcode::kCompare, {a, b}, attrs, a->shape().WithDType(DType::kPred));
}

Instruction* GradBuilder::Select(Instruction* pred, Instruction* on_true, Instruction* on_false) {
  if (on_true == nullptr) return nullptr;
  return Build(Opcode::kSelect, {pred, on_true, on_false}, {}, on_true->shape());
}

Instruction* GradBuilder::Broadcast(Instruction* x, const std::vector<int64_t>& result_dims,
                                    std::vector<int64_t> dimensions) {
  if (x == nullptr) return nullptr;
  ir::Attrs attrs;
  attrs.dimensions = std::move(dimensions);
  return Build(Opcode::kBroadcast, {x}, attrs, Shape(x->shape().dtype(), result_dims));
}

Instruction* GradBuilder::Reshape(Instruction* x, const std::vector<int64_t>& dims) {
  if (x == nullptr) return nullptr;
  if (x->shape().dims() == dims) return x;
  return Build(Opcode::kReshape, {x}, {}, Shape(x->shape().dtype(), dims));
}

Instruction* GradBuilder::Transpose(Instruction* x, std::vector<int64_t> permutation) {
  if (x == nullptr) return nullptr;
  std::vector<int64_t> identity(permutation.size());
  std::iota(identity.begin(), identity.end(), 0);
  if (permutation == identity) return x;
  ir::Attrs attrs;
  attrs.dimensions = std::move(permutation);
  return Build(Opcode::kTranspose, {x}, attrs, x->shape());
}

Instruction* GradBuilder::Slice(Instruction* x, std::vector<int64_t> starts,
                                std::vector<int64_t> limits) {
  if (x == nullptr) return nullptr;
  ir::Attrs attrs;
  std::vector<int64_t> strides(starts.size(), 1);
  attrs.slice = {std::move(starts), std::move(limits), std::move(strides)};
  return Build(Opcode::kSlice, {x}, attrs, x->shape());
}

Instruction* GradBuilder::Pad(Instruction* x, Instruction* value, std::vector<int64_t> low,
                              std::vector<int64_t> high) {
  if (x == nullptr) return nullptr;
  ir::Attrs attrs;
  attrs.pad_low = std::move(low);
  attrs.pad_high = std::move(high);
  return Build(Opcode::kPad, {x, value}, attrs, x->shape());
}

Instruction* GradBuilder::Reduce(Instruction* x, std::vector<int64_t> dimensions,
                                 ir::ReduceKind kind, DType result_dtype) {
  if (x == nullptr) return nullptr;
  ir::Attrs attrs;
  attrs.dimensions = std::move(dimensions);
  attrs.reduce_kind = kind;
  return Build(Opcode::kReduce, {x}, attrs, Shape::Scalar(result_dtype));
}

Instruction* GradBuilder::ReduceAll(Instruction* x, DType result_dtype) {
  if (x == nullptr) return nullptr;
  std::vector<int64_t> all(x->shape().rank());
  std::iota(all.begin(), all.end(), 0);
  return Reduce(x, all, ir::ReduceKind::kSum, result_dtype);
}

Instruction* GradBuilder::Dot(Instruction* lhs, Instruction* rhs, ir::DotDimensions dims,
                              DType result_dtype) {
  if (lhs == nullptr || rhs == nullptr) return nullptr;
  ir::Attrs attrs;
  attrs.dot = std::move(dims);
  return Build(Opcode::kDot, {lhs, rhs}, attrs, Shape::Scalar(result_dtype));
}

Instruction* GradBuilder::Gather(Instruction* table, Instruction* indices, int64_t axis) {
  if (table == nullptr) return nullptr;
  ir::Attrs attrs;
  attrs.index = axis;
  return Build(Opcode::kGather, {table, indices}, attrs, table->shape());
}

Instruction* GradBuilder::ScatterAdd(Instruction* operand, Instruction* indices,
                                     Instruction* updates, int64_t axis) {
  if (operand == nullptr || updates == nullptr) return nullptr;
  ir::Attrs attrs;
  attrs.index = axis;
  return Build(Opcode::kScatterAdd, {operand, indices, updates}, attrs, operand->shape());
}

namespace {

using Grads = StatusOr<std::vector<Instruction*>>;

// Returns `g` for operand i only if it is wanted.
std::vector<Instruction*> Only(const std::vector<bool>& wants, std::vector<Instruction*> grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!wants[i]) grads[i] = nullptr;
  }
  return grads;
}

// The inverse of a permutation: inv[perm[i]] = i.
std::vector<int64_t> Inverse(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

// Position of `v` in the sorted copy of `values`.
int64_t RankIn(const std::vector<int64_t>& values, int64_t v) {
  return std::count_if(values.begin(), values.end(), [v](int64_t u) { return u < v; });
}

// ---------------------------------------------------------------------------
// Elementwise arithmetic.

// y = a + b  =>  da = dy, db = dy
Grads AddRule(RuleContext&, const Instruction&, Instruction* dy, const std::vector<bool>& w) {
  return Only(w, {dy, dy});
}

// y = a - b  =>  da = dy, db = -dy
Grads SubRule(RuleContext& c, const Instruction&, Instruction* dy, const std::vector<bool>& w) {
  return Only(w, {dy, w[1] ? c.g.Neg(dy) : nullptr});
}

// y = a * b  =>  da = dy * b, db = dy * a
Grads MulRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>& w) {
  Instruction *a = y.operand(0), *b = y.operand(1);
  return Only(w, {w[0] ? c.g.Mul(dy, b) : nullptr, w[1] ? c.g.Mul(dy, a) : nullptr});
}

// y = a / b  =>  da = dy / b, db = -dy * y / b
Grads DivRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>& w) {
  Instruction* b = y.operand(1);
  Instruction* yy = const_cast<Instruction*>(&y);
  return Only(
      w, {w[0] ? c.g.Div(dy, b) : nullptr, w[1] ? c.g.Neg(c.g.Div(c.g.Mul(dy, yy), b)) : nullptr});
}

// y = -x  =>  dx = -dy
Grads NegRule(RuleContext& c, const Instruction&, Instruction* dy, const std::vector<bool>&) {
  return std::vector<Instruction*>{c.g.Neg(dy)};
}

// y = exp(x)  =>  dx = dy * y
Grads ExpRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>&) {
  return std::vector<Instruction*>{c.g.Mul(dy, const_cast<Instruction*>(&y))};
}

// y = log(x)  =>  dx = dy / x
Grads LogRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>&) {
  return std::vector<Instruction*>{c.g.Div(dy, y.operand(0))};
}

// y = tanh(x)  =>  dx = dy * (1 - y^2)
Grads TanhRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>&) {
  Instruction* yy = const_cast<Instruction*>(&y);
  Instruction* one_minus_y2 = c.g.Sub(c.g.Full(y.shape(), 1.0), c.g.Mul(yy, yy));
  return std::vector<Instruction*>{c.g.Mul(dy, one_minus_y2)};
}

// y = sqrt(x)  =>  dx = dy * 0.5 / y
Grads SqrtRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>&) {
  return std::vector<Instruction*>{c.g.Div(c.g.Scale(dy, 0.5), const_cast<Instruction*>(&y))};
}

// y = x^(-1/2)  =>  dx = dy * -0.5 * y / x
Grads RsqrtRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>&) {
  Instruction* yy = const_cast<Instruction*>(&y);
  return std::vector<Instruction*>{c.g.Div(c.g.Mul(c.g.Scale(dy, -0.5), yy), y.operand(0))};
}

// y = erf(x)  =>  dx = dy * 2/sqrt(pi) * exp(-x^2)
Grads ErfRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>&) {
  Instruction* x = y.operand(0);
  Instruction* gauss = c.g.Unary(Opcode::kExp, c.g.Neg(c.g.Mul(x, x)));
  return std::vector<Instruction*>{
      c.g.Mul(c.g.Scale(dy, 2.0 / std::sqrt(std::numbers::pi)), gauss)};
}

// y = |x|  =>  dx = dy * sign(x), sign(0) = 0
Grads AbsRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>&) {
  Instruction* x = y.operand(0);
  Instruction* zero = c.g.Zeros(x->shape());
  Instruction* sign = c.g.Select(
      c.g.Compare(x, zero, CompareDirection::kGt), c.g.Full(x->shape(), 1.0),
      c.g.Select(c.g.Compare(x, zero, CompareDirection::kLt), c.g.Full(x->shape(), -1.0), zero));
  return std::vector<Instruction*>{c.g.Mul(dy, sign)};
}

// y = max(a, b) (min: LE)  =>  da = a >= b ? dy : 0, db = a >= b ? 0 : dy (ties to a)
Grads MaxMinRule(RuleContext& c, const Instruction& y, Instruction* dy,
                 const std::vector<bool>& w) {
  CompareDirection dir = y.opcode() == Opcode::kMax ? CompareDirection::kGe : CompareDirection::kLe;
  Instruction* pick_a = c.g.Compare(y.operand(0), y.operand(1), dir);
  Instruction* zero = c.g.Zeros(y.shape());
  return Only(w, {w[0] ? c.g.Select(pick_a, dy, zero) : nullptr,
                  w[1] ? c.g.Select(pick_a, zero, dy) : nullptr});
}

// y = a^b  =>  da = dy * b * a^(b-1), db = dy * y * log(a) (0 where a <= 0)
Grads PowRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>& w) {
  Instruction *a = y.operand(0), *b = y.operand(1);
  Instruction* da = nullptr;
  Instruction* db = nullptr;
  if (w[0]) {
    Instruction* a_pow = c.g.Binary(Opcode::kPow, a, c.g.Sub(b, c.g.Full(b->shape(), 1.0)));
    da = c.g.Mul(dy, c.g.Mul(b, a_pow));
  }
  if (w[1]) {
    Instruction* positive = c.g.Compare(a, c.g.Zeros(a->shape()), CompareDirection::kGt);
    Instruction* safe_a = c.g.Select(positive, a, c.g.Full(a->shape(), 1.0));
    Instruction* log_a = c.g.Unary(Opcode::kLog, safe_a);
    db = c.g.Mul(dy, c.g.Mul(const_cast<Instruction*>(&y), log_a));
  }
  return std::vector<Instruction*>{da, db};
}

// y = convert(x)  =>  dx = convert(dy) back to x's dtype (no gradient into integers)
Grads ConvertRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>&) {
  DType from = y.operand(0)->shape().dtype();
  if (!ir::IsFloat(from)) return std::vector<Instruction*>{nullptr};
  return std::vector<Instruction*>{c.g.Convert(dy, from)};
}

// y = copy(x)  =>  dx = dy
Grads CopyRule(RuleContext&, const Instruction&, Instruction* dy, const std::vector<bool>&) {
  return std::vector<Instruction*>{dy};
}

// y = select(p, a, b)  =>  dp: none, da = select(p, dy, 0), db = select(p, 0, dy)
Grads SelectRule(RuleContext& c, const Instruction& y, Instruction* dy,
                 const std::vector<bool>& w) {
  Instruction* p = y.operand(0);
  Instruction* zero = (w[1] || w[2]) ? c.g.Zeros(y.shape()) : nullptr;
  return std::vector<Instruction*>{nullptr, w[1] ? c.g.Select(p, dy, zero) : nullptr,
                                   w[2] ? c.g.Select(p, zero, dy) : nullptr};
}

// ---------------------------------------------------------------------------
// Data movement.

// y = broadcast(x, dims)  =>  dx = reduce_sum(dy) over the new dims, transposed to x's order
Grads BroadcastRule(RuleContext& c, const Instruction& y, Instruction* dy,
                    const std::vector<bool>&) {
  const std::vector<int64_t>& kept = y.attrs().dimensions;
  std::vector<int64_t> summed;
  for (int64_t d = 0; d < y.shape().rank(); ++d) {
    if (std::find(kept.begin(), kept.end(), d) == kept.end()) summed.push_back(d);
  }
  Instruction* dx =
      summed.empty() ? dy : c.g.Reduce(dy, summed, ir::ReduceKind::kSum, y.shape().dtype());
  // The reduction keeps the result dims in increasing order; x's dim i is result dim kept[i].
  std::vector<int64_t> perm;
  for (int64_t d : kept) perm.push_back(RankIn(kept, d));
  return std::vector<Instruction*>{c.g.Transpose(dx, perm)};
}

// y = reshape(x)  =>  dx = reshape(dy) to x's dims
Grads ReshapeRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>&) {
  return std::vector<Instruction*>{c.g.Reshape(dy, y.operand(0)->shape().dims())};
}

// y = transpose(x, perm)  =>  dx = transpose(dy, inverse(perm))
Grads TransposeRule(RuleContext& c, const Instruction& y, Instruction* dy,
                    const std::vector<bool>&) {
  return std::vector<Instruction*>{c.g.Transpose(dy, Inverse(y.attrs().dimensions))};
}

// y = x[start:limit]  =>  dx = pad(dy, 0, low=start, high=size-limit) (stride 1 only)
Grads SliceRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>&) {
  const ir::SliceSpec& s = y.attrs().slice;
  const Shape& x = y.operand(0)->shape();
  std::vector<int64_t> high;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (s.strides[d] != 1) {
      return Error("autodiff: no gradient rule for strided slice %{} (stride {} in dim {})",
                   y.name(), s.strides[d], d);
    }
    high.push_back(x.dim(d) - s.limits[d]);
  }
  Instruction* zero = c.g.Zeros(Shape::Scalar(x.dtype()));
  return std::vector<Instruction*>{c.g.Pad(dy, zero, s.starts, high)};
}

// y = pad(x, v)  =>  dx = dy[low:low+size], dv = sum(dy) - sum(dx)
Grads PadRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>& w) {
  const Shape& x = y.operand(0)->shape();
  std::vector<int64_t> limits;
  for (int64_t d = 0; d < x.rank(); ++d) limits.push_back(y.attrs().pad_low[d] + x.dim(d));
  Instruction* dx = (w[0] || w[1]) ? c.g.Slice(dy, y.attrs().pad_low, limits) : nullptr;
  Instruction* dv = nullptr;
  if (w[1]) dv = c.g.Sub(c.g.ReduceAll(dy, x.dtype()), c.g.ReduceAll(dx, x.dtype()));
  return std::vector<Instruction*>{w[0] ? dx : nullptr, dv};
}

// y = concatenate(x0, x1, ...)  =>  dxi = the slice of dy that xi fills
Grads ConcatenateRule(RuleContext& c, const Instruction& y, Instruction* dy,
                      const std::vector<bool>& w) {
  int64_t axis = y.attrs().dimensions[0];
  std::vector<Instruction*> grads;
  int64_t offset = 0;
  for (int64_t i = 0; i < y.operand_count(); ++i) {
    const Shape& x = y.operand(i)->shape();
    if (w[i]) {
      std::vector<int64_t> starts(x.rank(), 0), limits = x.dims();
      starts[axis] = offset;
      limits[axis] = offset + x.dim(axis);
      grads.push_back(c.g.Slice(dy, starts, limits));
    } else {
      grads.push_back(nullptr);
    }
    offset += x.dim(axis);
  }
  return grads;
}

// ---------------------------------------------------------------------------
// Reductions, contractions, indexing.

// y = reduce_sum(x, dims)  =>  dx = broadcast(dy) over dims
// y = reduce_max(x, dims)  =>  dx = (x == max) ? broadcast(dy / count(x == max)) : 0
//   (ties split the gradient equally between the maximal elements)
Grads ReduceRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>&) {
  Instruction* x = y.operand(0);
  const Shape& xs = x->shape();
  const std::vector<int64_t>& reduced = y.attrs().dimensions;
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < xs.rank(); ++d) {
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) kept.push_back(d);
  }
  Instruction* dyx = c.g.Convert(dy, xs.dtype());
  if (y.attrs().reduce_kind == ir::ReduceKind::kSum) {
    return std::vector<Instruction*>{c.g.Broadcast(dyx, xs.dims(), kept)};
  }
  Instruction* max =
      c.g.Broadcast(c.g.Convert(const_cast<Instruction*>(&y), xs.dtype()), xs.dims(), kept);
  Instruction* is_max = c.g.Compare(x, max, CompareDirection::kEq);
  Instruction* zero = c.g.Zeros(xs);
  Instruction* count = c.g.Reduce(c.g.Select(is_max, c.g.Full(xs, 1.0), zero), reduced,
                                  ir::ReduceKind::kSum, xs.dtype());
  Instruction* share = c.g.Broadcast(c.g.Div(dyx, count), xs.dims(), kept);
  return std::vector<Instruction*>{c.g.Select(is_max, share, zero)};
}

// y = dot(a, b), y = [batch..., a free..., b free...]:
//   da = transpose(dot(dy, b)) contracting dy's b-free dims with b's free dims;
//   db = transpose(dot(a, dy)) contracting a's free dims with dy's a-free dims.
Grads DotRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>& w) {
  Instruction *a = y.operand(0), *b = y.operand(1);
  const ir::DotDimensions& dn = y.attrs().dot;
  auto free_dims = [](const Shape& s, const std::vector<int64_t>& batch,
                      const std::vector<int64_t>& contracting) {
    std::vector<int64_t> free;
    for (int64_t d = 0; d < s.rank(); ++d) {
      if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
          std::find(contracting.begin(), contracting.end(), d) == contracting.end()) {
        free.push_back(d);
      }
    }
    return free;
  };
  std::vector<int64_t> a_free = free_dims(a->shape(), dn.lhs_batch, dn.lhs_contracting);
  std::vector<int64_t> b_free = free_dims(b->shape(), dn.rhs_batch, dn.rhs_contracting);
  int64_t nb = static_cast<int64_t>(dn.lhs_batch.size());
  int64_t na = static_cast<int64_t>(a_free.size());
  int64_t nc = static_cast<int64_t>(dn.lhs_contracting.size());
  std::vector<int64_t> dy_batch(nb);
  std::iota(dy_batch.begin(), dy_batch.end(), 0);
  Instruction* da = nullptr;
  Instruction* db = nullptr;
  if (w[0]) {
    Instruction* g = c.g.Convert(dy, b->shape().dtype());
    ir::DotDimensions d;
    d.lhs_batch = dy_batch;
    d.rhs_batch = dn.rhs_batch;
    for (int64_t i = 0; i < static_cast<int64_t>(b_free.size()); ++i) {
      d.lhs_contracting.push_back(nb + na + i);
      d.rhs_contracting.push_back(b_free[i]);
    }
    // Result: [batch, a free, b contracting in increasing b order].
    Instruction* r = c.g.Dot(g, b, d, a->shape().dtype());
    std::vector<int64_t> perm(a->shape().rank());
    for (int64_t i = 0; i < nb; ++i) perm[dn.lhs_batch[i]] = i;
    for (int64_t i = 0; i < na; ++i) perm[a_free[i]] = nb + i;
    for (int64_t j = 0; j < nc; ++j) {
      perm[dn.lhs_contracting[j]] = nb + na + RankIn(dn.rhs_contracting, dn.rhs_contracting[j]);
    }
    // perm maps a's dim -> position in r; transpose wants result dim -> operand dim.
    da = c.g.Transpose(r, perm);
  }
  if (w[1]) {
    Instruction* g = c.g.Convert(dy, a->shape().dtype());
    ir::DotDimensions d;
    d.lhs_batch = dn.lhs_batch;
    d.rhs_batch = dy_batch;
    for (int64_t i = 0; i < na; ++i) {
      d.lhs_contracting.push_back(a_free[i]);
      d.rhs_contracting.push_back(nb + i);
    }
    // Result: [batch, a contracting in increasing a order, b free].
    Instruction* r = c.g.Dot(a, g, d, b->shape().dtype());
    std::vector<int64_t> perm(b->shape().rank());
    for (int64_t i = 0; i < nb; ++i) perm[dn.rhs_batch[i]] = i;
    for (int64_t j = 0; j < nc; ++j) {
      perm[dn.rhs_contracting[j]] = nb + RankIn(dn.lhs_contracting, dn.lhs_contracting[j]);
    }
    for (int64_t i = 0; i < static_cast<int64_t>(b_free.size()); ++i) perm[b_free[i]] = nb + nc + i;
    db = c.g.Transpose(r, perm);
  }
  return std::vector<Instruction*>{da, db};
}

// y = gather(table, idx, axis)  =>  dtable = scatter_add(zeros, idx, dy); no gradient for idx
Grads GatherRule(RuleContext& c, const Instruction& y, Instruction* dy, const std::vector<bool>&) {
  Instruction* table = y.operand(0);
  return std::vector<Instruction*>{
      c.g.ScatterAdd(c.g.Zeros(table->shape()), y.operand(1), dy, y.attrs().index), nullptr};
}

// y = scatter_add(x, idx, u, axis)  =>  dx = dy, du = gather(dy, idx, axis)
Grads ScatterAddRule(RuleContext& c, const Instruction& y, Instruction* dy,
                     const std::vector<bool>& w) {
  return std::vector<Instruction*>{w[0] ? dy : nullptr, nullptr,
                                   w[2] ? c.g.Gather(dy, y.operand(1), y.attrs().index) : nullptr};
}

// ---------------------------------------------------------------------------
// Composites.

// y = softmax_cross_entropy(logits, targets) per row =>
//   dlogits = (softmax(logits masked to num_classes) - onehot(targets)) * dy
//           = exp(x - max) * (dy / sum) - onehot(targets) * dy
// The one-hot is the predicate compare(iota, broadcast(targets)) inside the
// same elementwise expression; padded classes get probability 0, hence zero gradient.
Grads SoftmaxCrossEntropyRule(RuleContext& c, const Instruction& y, Instruction* dy,
                              const std::vector<bool>&) {
  Instruction *logits = y.operand(0), *targets = y.operand(1);
  Shape xs = logits->shape().WithDType(DType::kF32);  // (..., V)
  int64_t last = xs.rank() - 1;
  std::vector<int64_t> rows(xs.rank() - 1);
  std::iota(rows.begin(), rows.end(), 0);
  Instruction* x = c.g.Convert(logits, DType::kF32);
  Instruction* classes = c.g.Iota(xs.WithDType(DType::kS32), last);
  int64_t n = y.attrs().num_classes;
  if (n > 0 && n < xs.dim(last)) {
    ir::Attrs n_attrs;
    n_attrs.literal = {static_cast<double>(n)};
    Instruction* limit = c.g.Broadcast(
        c.g.Build(ir::Opcode::kConstant, {}, n_attrs, Shape::Scalar(DType::kS32)), xs.dims(), {});
    x = c.g.Select(c.g.Compare(classes, limit, CompareDirection::kLt), x, c.g.Full(xs, -INFINITY));
  }
  Instruction* max = c.g.Reduce(x, {last}, ir::ReduceKind::kMax, DType::kF32);  // (...)
  Instruction* e = c.g.Unary(Opcode::kExp, c.g.Sub(x, c.g.Broadcast(max, xs.dims(), rows)));
  Instruction* sum = c.g.Reduce(e, {last}, ir::ReduceKind::kSum, DType::kF32);  // (...)
  // softmax * dy = e * (dy / sum): one division a row, not one a class (an
  // f32 division is a sequence of eight instructions: Note [IEEE division
  // sequences] in compiler/codegen/instruction_mix.cc).
  Instruction* dy32 = c.g.Convert(dy, DType::kF32);
  Instruction* scaled = c.g.Mul(e, c.g.Broadcast(c.g.Div(dy32, sum), xs.dims(), rows));
  Instruction* is_target =
      c.g.Compare(classes, c.g.Broadcast(targets, xs.dims(), rows), CompareDirection::kEq);
  Instruction* dx =
      c.g.Select(is_target, c.g.Sub(scaled, c.g.Broadcast(dy32, xs.dims(), rows)), scaled);
  return std::vector<Instruction*>{c.g.Convert(dx, logits->shape().dtype()), nullptr};
}

// fusion: differentiate through the called computation (a recomputed
// copy of it is inlined for the backward; the forward op stays as it is).
Grads ThroughCalledRule(RuleContext& c, const Instruction& y, Instruction* dy,
                        const std::vector<bool>& w) {
  return c.through_called(y, dy, w);
}

// ---------------------------------------------------------------------------
// The table.

struct RuleTable {
  std::array<VjpRule, ir::kNumOpcodes> rules{};
  void Set(Opcode op, VjpRule rule) { rules[static_cast<int>(op)] = rule; }
};

const RuleTable& Rules() {
  static const RuleTable table = [] {
    RuleTable t;
    t.Set(Opcode::kAdd, AddRule);
    t.Set(Opcode::kSub, SubRule);
    t.Set(Opcode::kMul, MulRule);
    t.Set(Opcode::kDiv, DivRule);
    t.Set(Opcode::kNeg, NegRule);
    t.Set(Opcode::kExp, ExpRule);
    t.Set(Opcode::kLog, LogRule);
    t.Set(Opcode::kTanh, TanhRule);
    t.Set(Opcode::kSqrt, SqrtRule);
    t.Set(Opcode::kRsqrt, RsqrtRule);
    t.Set(Opcode::kErf, ErfRule);
    t.Set(Opcode::kAbs, AbsRule);
    t.Set(Opcode::kMax, MaxMinRule);
    t.Set(Opcode::kMin, MaxMinRule);
    t.Set(Opcode::kPow, PowRule);
    t.Set(Opcode::kConvert, ConvertRule);
    t.Set(Opcode::kCopy, CopyRule);
    t.Set(Opcode::kSelect, SelectRule);
    t.Set(Opcode::kBroadcast, BroadcastRule);
    t.Set(Opcode::kReshape, ReshapeRule);
    t.Set(Opcode::kTranspose, TransposeRule);
    t.Set(Opcode::kSlice, SliceRule);
    t.Set(Opcode::kPad, PadRule);
    t.Set(Opcode::kConcatenate, ConcatenateRule);
    t.Set(Opcode::kReduce, ReduceRule);
    t.Set(Opcode::kDot, DotRule);
    t.Set(Opcode::kGather, GatherRule);
    t.Set(Opcode::kScatterAdd, ScatterAddRule);
    t.Set(Opcode::kSoftmaxCrossEntropy, SoftmaxCrossEntropyRule);
    t.Set(Opcode::kFusion, ThroughCalledRule);
    t.Set(Opcode::kAttention, AttentionRule);
    return t;
  }();
  return table;
}

}  // namespace

VjpRule FindRule(Opcode opcode) { return Rules().rules[static_cast<int>(opcode)]; }

}  // namespace gptc::passes::autodiff
