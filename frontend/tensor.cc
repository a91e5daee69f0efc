#include "frontend/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cassert>
#include <initializer_list>
#include <numeric>

#include "compiler/support/float_bits.h"
#include "frontend/tracer.h"

namespace gptc::frontend {

using ir::DType;
using ir::Instruction;
using ir::Opcode;
using ir::Shape;

namespace {

const Shape& InvalidShape() {
  static const Shape* shape = new Shape();
  return *shape;
}

std::string DimsText(const std::vector<int64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ","));
}

Tensor Invalid(Tracer* tracer) { return Tensor(tracer, nullptr); }

// Returns the tracer an op builds with, or nullptr when the op must return an
// invalid tensor: an earlier op failed, or an operand is unusable (recorded
// as the first error when there is a tracer to hold it).
Tracer* Begin(std::string_view op, std::initializer_list<const Tensor*> operands) {
  Tracer* tracer = nullptr;
  for (const Tensor* t : operands) {
    if (t->tracer() != nullptr) {
      tracer = t->tracer();
      break;
    }
  }
  if (tracer == nullptr || tracer->failed()) return nullptr;
  int i = 0;
  for (const Tensor* t : operands) {
    if (!t->valid()) {
      tracer->Fail(Error("{}: operand {} is an uninitialized Tensor", op, i));
      return nullptr;
    }
    if (t->tracer() != tracer) {
      tracer->Fail(Error("{}: operand {} comes from another tracer", op, i));
      return nullptr;
    }
    if (t->instruction()->parent() != tracer->computation()) {
      tracer->Fail(
          Error("{}: operand {} (%{}) belongs to another computation than the one "
                "being traced",
                op, i, t->instruction()->name()));
      return nullptr;
    }
    ++i;
  }
  return tracer;
}

int64_t NormalizeAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// The NumPy broadcast of several shapes' dims (trailing dimensions aligned).
StatusOr<std::vector<int64_t>> BroadcastDims(std::initializer_list<const Tensor*> xs) {
  size_t rank = 0;
  for (const Tensor* x : xs) rank = std::max(rank, x->dims().size());
  std::vector<int64_t> out(rank, 1);
  for (const Tensor* x : xs) {
    size_t offset = rank - x->dims().size();
    for (size_t i = 0; i < x->dims().size(); ++i) {
      int64_t d = x->dims()[i];
      int64_t& o = out[offset + i];
      if (d == o || d == 1) continue;
      if (o != 1) return Error("shapes do not broadcast (size {} against {})", d, o);
      o = d;
    }
  }
  return out;
}

// A scalar constant rounded to `dtype` (integer types must get exact values;
// the builder rejects the others).
double RoundTo(double value, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<float>(value);
    case DType::kBF16:
      return RoundToBF16(static_cast<float>(value));
    case DType::kF16:
      return RoundToF16(static_cast<float>(value));
    default:
      return value;
  }
}

// Both operands broadcast to their NumPy common shape; invalid tensors (and
// the tracer's error set, naming `what`) when dtypes or shapes do not agree.
std::pair<Tensor, Tensor> BroadcastPair(Tracer* t, const Tensor& a, const Tensor& b,
                                        const std::string& what) {
  if (a.dtype() != b.dtype()) {
    t->Fail(Error("{}: dtypes differ", what));
    return {Invalid(t), Invalid(t)};
  }
  StatusOr<std::vector<int64_t>> dims = BroadcastDims({&a, &b});
  if (!dims.ok()) {
    t->Fail(dims.status().WithPrefix(what));
    return {Invalid(t), Invalid(t)};
  }
  return {a.BroadcastTo(*dims), b.BroadcastTo(*dims)};
}

Tensor Binary(Opcode opcode, const Tensor& a, const Tensor& b) {
  std::string_view op = ir::OpcodeName(opcode);
  Tracer* t = Begin(op, {&a, &b});
  if (t == nullptr) return Invalid(a.tracer() ? a.tracer() : b.tracer());
  auto describe = [&] {
    return fmt::format("{} of {} and {}", op, a.shape().ToString(), b.shape().ToString());
  };
  auto [x, y] = BroadcastPair(t, a, b, describe());
  if (!x.valid() || !y.valid()) return Invalid(t);
  return t->Adopt(t->builder().Binary(opcode, x.instruction(), y.instruction()), describe);
}

Tensor Unary(Opcode opcode, const Tensor& x) {
  Tracer* t = Begin(ir::OpcodeName(opcode), {&x});
  if (t == nullptr) return Invalid(x.tracer());
  return t->Adopt(t->builder().Unary(opcode, x.instruction()), [&] {
    return fmt::format("{} of {}", ir::OpcodeName(opcode), x.shape().ToString());
  });
}

Tensor Reduce(const Tensor& x, std::vector<int64_t> axes, bool keep_dims, ir::ReduceKind kind) {
  std::string op = fmt::format("reduce-{}", ir::ReduceKindName(kind));
  Tracer* t = Begin(op, {&x});
  if (t == nullptr) return Invalid(x.tracer());
  auto describe = [&] {
    return fmt::format("{} of {} over axes {}", op, x.shape().ToString(), DimsText(axes));
  };
  for (int64_t& a : axes) {
    a = NormalizeAxis(a, x.rank());
    if (a < 0 || a >= x.rank()) {
      t->Fail(Error("{}: axis out of range", describe()));
      return Invalid(t);
    }
  }
  std::sort(axes.begin(), axes.end());
  Tensor r = t->Adopt(t->builder().Reduce(x.instruction(), axes, kind, x.dtype()), describe);
  if (!keep_dims || !r.valid()) return r;
  std::vector<int64_t> kept = x.dims();
  for (int64_t a : axes) kept[a] = 1;
  return r.Reshape(kept);
}

// lhs [..., M, K] against rhs [..., K, N] (or [..., N, K] when transposed).
Tensor MatmulImpl(const Tensor& a, const Tensor& b, bool transpose_b) {
  std::string_view op = transpose_b ? "matmul-transpose-b" : "matmul";
  Tracer* t = Begin(op, {&a, &b});
  if (t == nullptr) return Invalid(a.tracer() ? a.tracer() : b.tracer());
  auto describe = [&] {
    return fmt::format("{} of {} and {}", op, a.shape().ToString(), b.shape().ToString());
  };
  auto fail = [&](std::string_view why) {
    t->Fail(Error("{}: {}", describe(), why));
    return Invalid(t);
  };
  if (a.rank() < 2 || b.rank() < 2) return fail("operands need rank >= 2");
  if (a.dtype() != b.dtype()) return fail("dtypes differ");
  int64_t k_axis_b = transpose_b ? b.rank() - 1 : b.rank() - 2;
  if (a.dim(-1) != b.dims()[k_axis_b]) {
    return fail(fmt::format("contracting dims differ ({} vs {})", a.dim(-1), b.dims()[k_axis_b]));
  }
  ir::DotDimensions dn;
  if (b.rank() == 2) {
    // [..., K] x [K, N]: no batch dims; the dot's result is already [..., N].
    dn.lhs_contracting = {a.rank() - 1};
    dn.rhs_contracting = {k_axis_b};
    return t->Adopt(t->builder().Dot(a.instruction(), b.instruction(), dn, a.dtype()), describe);
  }
  // Batched: broadcast the leading dims of both to one batch shape.
  std::vector<int64_t> a_lead(a.dims().begin(), a.dims().end() - 2);
  std::vector<int64_t> b_lead(b.dims().begin(), b.dims().end() - 2);
  std::vector<int64_t> batch(std::max(a_lead.size(), b_lead.size()), 1);
  for (const auto* lead : {&a_lead, &b_lead}) {
    size_t offset = batch.size() - lead->size();
    for (size_t i = 0; i < lead->size(); ++i) {
      int64_t d = (*lead)[i];
      int64_t& o = batch[offset + i];
      if (d == o || d == 1) continue;
      if (o != 1) return fail("batch dims do not broadcast");
      o = d;
    }
  }
  auto with_batch = [&](const Tensor& x) {
    std::vector<int64_t> dims = batch;
    dims.push_back(x.dim(-2));
    dims.push_back(x.dim(-1));
    return x.BroadcastTo(dims);
  };
  Tensor x = with_batch(a), y = with_batch(b);
  if (!x.valid() || !y.valid()) return Invalid(t);
  int64_t nb = static_cast<int64_t>(batch.size());
  for (int64_t i = 0; i < nb; ++i) {
    dn.lhs_batch.push_back(i);
    dn.rhs_batch.push_back(i);
  }
  dn.lhs_contracting = {nb + 1};
  dn.rhs_contracting = {transpose_b ? nb + 1 : nb};
  return t->Adopt(t->builder().Dot(x.instruction(), y.instruction(), dn, a.dtype()), describe);
}

}  // namespace

const Shape& Tensor::shape() const {
  return instruction_ == nullptr ? InvalidShape() : instruction_->shape();
}

int64_t Tensor::dim(int64_t axis) const {
  if (!valid()) return 0;  // the failed op that made it has been reported
  int64_t a = NormalizeAxis(axis, rank());
  assert(a >= 0 && a < rank() && "Tensor::dim axis out of range");
  return dims()[a];
}

Tensor Tensor::Reshape(std::vector<int64_t> new_dims) const {
  Tracer* t = Begin("reshape", {this});
  if (t == nullptr) return Invalid(tracer_);
  auto describe = [&] {
    return fmt::format("reshape of {} to {}", shape().ToString(), DimsText(new_dims));
  };
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < new_dims.size(); ++i) {
    if (new_dims[i] == -1 && inferred < 0) {
      inferred = static_cast<int64_t>(i);
    } else if (new_dims[i] < 0) {
      t->Fail(Error("{}: negative dimension", describe()));
      return Invalid(t);
    } else {
      known *= new_dims[i];
    }
  }
  int64_t count = shape().num_elements();
  if (inferred >= 0) {
    if (known == 0 || count % known != 0) {
      t->Fail(Error("{}: cannot infer the -1 dimension", describe()));
      return Invalid(t);
    }
    new_dims[inferred] = count / known;
  } else if (known != count) {
    t->Fail(Error("{}: the element count changes ({} vs {})", describe(), count, known));
    return Invalid(t);
  }
  if (new_dims == dims()) return *this;
  // reshape(reshape(x)) is one reshape of x, and no reshape at all when it
  // restores x's dims (as a keep_dims reduction meeting a broadcast does).
  Instruction* source = instruction_;
  if (source->opcode() == Opcode::kReshape) {
    source = source->operand(0);
    if (source->shape().dims() == new_dims) return Tensor(t, source);
  }
  return t->Adopt(t->builder().Reshape(source, new_dims), describe);
}

Tensor Tensor::ExpandDims(int64_t axis) const {
  if (!valid()) return *this;
  int64_t a = axis < 0 ? axis + rank() + 1 : axis;
  if (a < 0 || a > rank()) {
    if (!tracer_->failed()) {
      tracer_->Fail(
          Error("expand_dims of {} at axis {}: axis out of range", shape().ToString(), axis));
    }
    return Invalid(tracer_);
  }
  std::vector<int64_t> new_dims = dims();
  new_dims.insert(new_dims.begin() + a, 1);
  return Reshape(new_dims);
}

Tensor Tensor::Transpose(std::vector<int64_t> permutation) const {
  Tracer* t = Begin("transpose", {this});
  if (t == nullptr) return Invalid(tracer_);
  for (int64_t& p : permutation) p = NormalizeAxis(p, rank());
  std::vector<int64_t> identity(rank());
  std::iota(identity.begin(), identity.end(), 0);
  if (permutation == identity) return *this;
  return t->Adopt(t->builder().Transpose(instruction_, permutation), [&] {
    return fmt::format("transpose of {} by {}", shape().ToString(), DimsText(permutation));
  });
}

Tensor Tensor::Slice(int64_t axis, int64_t start, int64_t limit) const {
  Tracer* t = Begin("slice", {this});
  if (t == nullptr) return Invalid(tracer_);
  auto describe = [&] {
    return fmt::format("slice [{}:{}] of axis {} of {}", start, limit, axis, shape().ToString());
  };
  int64_t a = NormalizeAxis(axis, rank());
  if (a < 0 || a >= rank()) {
    t->Fail(Error("{}: axis out of range", describe()));
    return Invalid(t);
  }
  std::vector<int64_t> starts(rank(), 0), limits = dims();
  starts[a] = start;
  limits[a] = limit;
  if (starts == std::vector<int64_t>(rank(), 0) && limits == dims()) return *this;
  return t->Adopt(t->builder().Slice(instruction_, starts, limits), describe);
}

Tensor Tensor::BroadcastTo(const std::vector<int64_t>& target) const {
  Tracer* t = Begin("broadcast", {this});
  if (t == nullptr) return Invalid(tracer_);
  if (target == dims()) return *this;
  auto describe = [&] {
    return fmt::format("broadcast of {} to {}", shape().ToString(), DimsText(target));
  };
  if (rank() > static_cast<int64_t>(target.size())) {
    t->Fail(Error("{}: the target has lower rank", describe()));
    return Invalid(t);
  }
  // Operand dims equal to the target's map through; size-1 dims that
  // stretch are reshaped away first (the IR's broadcast only adds dims).
  int64_t offset = static_cast<int64_t>(target.size()) - rank();
  std::vector<int64_t> kept, mapping;
  for (int64_t i = 0; i < rank(); ++i) {
    int64_t to = target[offset + i];
    if (dim(i) == to) {
      kept.push_back(dim(i));
      mapping.push_back(offset + i);
    } else if (dim(i) != 1) {
      t->Fail(Error("{}: dim {} (size {}) does not match {}", describe(), i, dim(i), to));
      return Invalid(t);
    }
  }
  Tensor source = Reshape(kept);
  if (!source.valid()) return source;
  return t->Adopt(t->builder().Broadcast(source.instruction(), target, mapping), describe);
}

Tensor Tensor::Convert(DType dtype) const {
  Tracer* t = Begin("convert", {this});
  if (t == nullptr) return Invalid(tracer_);
  if (dtype == this->dtype()) return *this;
  return t->Adopt(t->builder().Convert(instruction_, dtype), [&] {
    return fmt::format("convert of {} to {}", shape().ToString(), ir::DTypeName(dtype));
  });
}

Tensor Tensor::Sum(std::vector<int64_t> axes, bool keep_dims) const {
  return Reduce(*this, std::move(axes), keep_dims, ir::ReduceKind::kSum);
}

Tensor Tensor::Max(std::vector<int64_t> axes, bool keep_dims) const {
  return Reduce(*this, std::move(axes), keep_dims, ir::ReduceKind::kMax);
}

Tensor Tensor::Mean(std::vector<int64_t> axes, bool keep_dims) const {
  int64_t count = 1;
  std::vector<int64_t> kept = valid() ? dims() : std::vector<int64_t>{};
  for (int64_t a : axes) {
    int64_t n = NormalizeAxis(a, rank());
    if (n < 0 || n >= rank()) continue;  // Sum reports it
    count *= dims()[n];
    kept[n] = 1;
  }
  // Dividing by the count (exact in f32 up to 2^24) is closer than
  // multiplying by a rounded 1/count. The division happens before the
  // keep_dims reshape so that broadcasting the mean back looks through it.
  Tensor mean = Sum(std::move(axes)) / static_cast<double>(count);
  return keep_dims ? mean.Reshape(kept) : mean;
}

Tensor operator+(const Tensor& a, const Tensor& b) { return Binary(Opcode::kAdd, a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return Binary(Opcode::kSub, a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return Binary(Opcode::kMul, a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return Binary(Opcode::kDiv, a, b); }
Tensor Maximum(const Tensor& a, const Tensor& b) { return Binary(Opcode::kMax, a, b); }
Tensor Minimum(const Tensor& a, const Tensor& b) { return Binary(Opcode::kMin, a, b); }

namespace {

// A scalar of x's dtype, for tensor-scalar arithmetic.
Tensor ScalarLike(const Tensor& x, double value) {
  if (x.tracer() == nullptr || !x.valid()) return Invalid(x.tracer());
  return Scalar(*x.tracer(), value, x.dtype());
}

}  // namespace

Tensor operator+(const Tensor& a, double b) { return a + ScalarLike(a, b); }
Tensor operator-(const Tensor& a, double b) { return a - ScalarLike(a, b); }
Tensor operator*(const Tensor& a, double b) { return a * ScalarLike(a, b); }
Tensor operator/(const Tensor& a, double b) { return a / ScalarLike(a, b); }
Tensor operator+(double a, const Tensor& b) { return ScalarLike(b, a) + b; }
Tensor operator-(double a, const Tensor& b) { return ScalarLike(b, a) - b; }
Tensor operator*(double a, const Tensor& b) { return ScalarLike(b, a) * b; }
Tensor operator/(double a, const Tensor& b) { return ScalarLike(b, a) / b; }
Tensor operator-(const Tensor& x) { return Unary(Opcode::kNeg, x); }

Tensor Exp(const Tensor& x) { return Unary(Opcode::kExp, x); }
Tensor Log(const Tensor& x) { return Unary(Opcode::kLog, x); }
Tensor Tanh(const Tensor& x) { return Unary(Opcode::kTanh, x); }
Tensor Sqrt(const Tensor& x) { return Unary(Opcode::kSqrt, x); }
Tensor Rsqrt(const Tensor& x) { return Unary(Opcode::kRsqrt, x); }

Tensor Compare(const Tensor& a, const Tensor& b, ir::CompareDirection direction) {
  Tracer* t = Begin("compare", {&a, &b});
  if (t == nullptr) return Invalid(a.tracer() ? a.tracer() : b.tracer());
  auto describe = [&] {
    return fmt::format("compare {} of {} and {}", ir::CompareDirectionName(direction),
                       a.shape().ToString(), b.shape().ToString());
  };
  auto [x, y] = BroadcastPair(t, a, b, describe());
  if (!x.valid() || !y.valid()) return Invalid(t);
  return t->Adopt(t->builder().Compare(x.instruction(), y.instruction(), direction), describe);
}

Tensor Where(const Tensor& pred, const Tensor& on_true, const Tensor& on_false) {
  Tracer* t = Begin("select", {&pred, &on_true, &on_false});
  if (t == nullptr) return Invalid(pred.tracer() ? pred.tracer() : on_true.tracer());
  auto describe = [&] {
    return fmt::format("select of {}, {} and {}", pred.shape().ToString(),
                       on_true.shape().ToString(), on_false.shape().ToString());
  };
  if (pred.dtype() != DType::kPred || on_true.dtype() != on_false.dtype()) {
    t->Fail(Error("{}: needs a pred and two values of one dtype", describe()));
    return Invalid(t);
  }
  StatusOr<std::vector<int64_t>> dims = BroadcastDims({&pred, &on_true, &on_false});
  if (!dims.ok()) {
    t->Fail(dims.status().WithPrefix(describe()));
    return Invalid(t);
  }
  Tensor p = pred.BroadcastTo(*dims), x = on_true.BroadcastTo(*dims),
         y = on_false.BroadcastTo(*dims);
  if (!p.valid() || !x.valid() || !y.valid()) return Invalid(t);
  return t->Adopt(t->builder().Select(p.instruction(), x.instruction(), y.instruction()), describe);
}

Tensor Where(const Tensor& pred, const Tensor& on_true, double on_false) {
  return Where(pred, on_true, ScalarLike(on_true, on_false));
}

Tensor Matmul(const Tensor& a, const Tensor& b) { return MatmulImpl(a, b, false); }
Tensor MatmulTransposeB(const Tensor& a, const Tensor& b) { return MatmulImpl(a, b, true); }

Tensor Take(const Tensor& table, const Tensor& indices, int64_t axis) {
  Tracer* t = Begin("take", {&table, &indices});
  if (t == nullptr) return Invalid(table.tracer() ? table.tracer() : indices.tracer());
  int64_t a = NormalizeAxis(axis, table.rank());
  return t->Adopt(t->builder().Gather(table.instruction(), indices.instruction(), a), [&] {
    return fmt::format("take of {} by {} on axis {}", table.shape().ToString(),
                       indices.shape().ToString(), axis);
  });
}

Tensor Scalar(Tracer& tracer, double value, DType dtype) {
  if (tracer.failed()) return Invalid(&tracer);
  return tracer.Adopt(tracer.builder().ScalarConstant(dtype, RoundTo(value, dtype)), [&] {
    return fmt::format("constant {} of {}", value, ir::DTypeName(dtype));
  });
}

Tensor Iota(Tracer& tracer, DType dtype, std::vector<int64_t> dims, int64_t axis) {
  if (tracer.failed()) return Invalid(&tracer);
  int64_t a = NormalizeAxis(axis, static_cast<int64_t>(dims.size()));
  return tracer.Adopt(tracer.builder().Iota(Shape(dtype, dims), a), [&] {
    return fmt::format("iota {}{} on axis {}", ir::DTypeName(dtype), DimsText(dims), axis);
  });
}

}  // namespace gptc::frontend
