// The attention VJP rule: Note [flash attention ops] (autodiff_attention.h).
#include "passes/autodiff_attention.h"

#include <fmt/format.h>

#include <bit>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "compiler/ir/module.h"

namespace gptc::passes::autodiff {
namespace {

using ir::CompareDirection;
using ir::DType;
using ir::Opcode;
using ir::Shape;

ir::DotDimensions Batched(int64_t lhs_contracting, int64_t rhs_contracting) {
  ir::DotDimensions d;
  d.lhs_batch = d.rhs_batch = {0, 1};
  d.lhs_contracting = {lhs_contracting};
  d.rhs_contracting = {rhs_contracting};
  return d;
}

// s = scale * q k^T in f32 of q, k rounded to `operands`, -inf where key >
// query when causal.   (B, H, T, S)
Instruction* Scores(GradBuilder& g, Instruction* q, Instruction* k, bool causal, double scale,
                    DType operands) {
  const Shape& qs = q->shape();
  const int64_t t = qs.dim(2), s_len = k->shape().dim(2);
  const std::vector<int64_t> dims = {qs.dim(0), qs.dim(1), t, s_len};
  Instruction* s = g.Scale(
      g.Dot(g.Convert(q, operands), g.Convert(k, operands), Batched(3, 3), DType::kF32), scale);
  if (!causal) return s;
  Shape square(DType::kS32, {t, s_len});
  Instruction* visible = g.Compare(g.Iota(square, 1), g.Iota(square, 0), CompareDirection::kLe);
  return g.Select(g.Broadcast(visible, dims, {2, 3}), s,
                  g.Full(Shape(DType::kF32, dims), -INFINITY));
}

// x[b, h, t] broadcast along the key (or head) dim of `dims`.
Instruction* PerRow(GradBuilder& g, Instruction* x, const std::vector<int64_t>& dims) {
  return g.Broadcast(x, dims, {0, 1, 2});
}

// The softmax statistics of scores s (B, H, T, S): the row maxima m, e =
// exp(s - m) and the row sums l of e.
struct RowSoftmax {
  Instruction *m, *e, *l;
};
RowSoftmax SoftmaxOf(GradBuilder& g, Instruction* s) {
  const std::vector<int64_t>& dims = s->shape().dims();
  Instruction* m = g.Reduce(s, {3}, ir::ReduceKind::kMax, DType::kF32);
  Instruction* e = g.Unary(Opcode::kExp, g.Sub(s, PerRow(g, m, dims)));
  return {m, e, g.Reduce(e, {3}, ir::ReduceKind::kSum, DType::kF32)};
}

std::string ShapeKey(const Shape& s) {
  std::string key(ir::DTypeName(s.dtype()));
  for (int64_t d : s.dims()) key += fmt::format("_{}", d);
  return key;
}

// The decomposition `name` (shared by every op of the same shapes and
// attributes), built by `body` from its parameters of `params` shapes before
// `caller` in the module.
StatusOr<ir::Computation*> Decomposition(
    ir::Computation* caller, const std::string& name, const std::vector<Shape>& params,
    const std::function<Instruction*(GradBuilder&, const std::vector<Instruction*>&)>& body) {
  ir::Module* module = caller->parent();
  if (module == nullptr) return Error("autodiff: {} outside a module", caller->name());
  if (ir::Computation* found = module->FindComputation(name)) return found;
  ir::Computation* c =
      module->AddComputationBefore(std::make_unique<ir::Computation>(name), caller);
  GradBuilder g(c);
  std::vector<Instruction*> args;
  for (size_t i = 0; i < params.size(); ++i) {
    ir::Attrs attrs;
    attrs.index = static_cast<int64_t>(i);
    args.push_back(g.Build(Opcode::kParameter, {}, attrs, params[i]));
  }
  Instruction* root = body(g, args);
  RETURN_IF_ERROR(g.status());
  c->set_root(root);
  return c;
}

std::string AttrsKey(const ir::Attrs& a) {
  return fmt::format("{}_{:x}", a.causal ? "causal" : "full", std::bit_cast<uint64_t>(a.scale));
}

// The suffix of a decomposition whose matmul operands are rounded to `operands`
// (Note [bf16 attention]): empty when they are not.
std::string RoundingKey(const Shape& q, DType operands) {
  return operands == q.dtype() ? "" : fmt::format(".{}", ir::DTypeName(operands));
}

// lse = log(sum_j exp(s_j - m)) + m, m = max_j s_j.
StatusOr<ir::Computation*> LseDecomposition(ir::Computation* caller, const Instruction& q,
                                            const Instruction& k, const ir::Attrs& attrs,
                                            DType operands) {
  const std::string name =
      fmt::format("attention_lse.{}.{}.{}{}", ShapeKey(q.shape()), ShapeKey(k.shape()),
                  AttrsKey(attrs), RoundingKey(q.shape(), operands));
  return Decomposition(caller, name, {q.shape(), k.shape()}, [&](GradBuilder& g, const auto& p) {
    const RowSoftmax sm = SoftmaxOf(g, Scores(g, p[0], p[1], attrs.causal, attrs.scale, operands));
    return g.Add(g.Unary(Opcode::kLog, sm.l), sm.m);
  });
}

// dX of Note [flash attention ops], X = "qkv"[wrt], in `result` dtype.
StatusOr<ir::Computation*> GradDecomposition(ir::Computation* caller,
                                             const std::vector<Instruction*>& ops,
                                             const ir::Attrs& attrs, DType result) {
  std::vector<Shape> shapes;
  std::string name = fmt::format("attention_grad.{}.{}", "qkv"[attrs.index], ir::DTypeName(result));
  for (const Instruction* op : ops) shapes.push_back(op->shape());
  name += fmt::format(".{}.{}.{}", ShapeKey(shapes[0]), ShapeKey(shapes[1]), AttrsKey(attrs));
  return Decomposition(caller, name, shapes, [&](GradBuilder& g, const auto& p) -> Instruction* {
    Instruction *q = p[0], *k = p[1], *v = p[2], *d_out = p[3], *lse = p[4], *delta = p[5];
    const DType operands = q->shape().dtype();
    Instruction* s = Scores(g, q, k, attrs.causal, attrs.scale, operands);
    const std::vector<int64_t>& dims = s->shape().dims();
    Instruction* prob = g.Unary(Opcode::kExp, g.Sub(s, PerRow(g, lse, dims)));  // (B, H, T, S)
    if (attrs.index == 2) return g.Dot(g.Convert(prob, operands), d_out, Batched(2, 2), result);
    Instruction* dp = g.Dot(d_out, v, Batched(3, 3), DType::kF32);  // (B, H, T, S)
    Instruction* ds =
        g.Convert(g.Scale(g.Mul(prob, g.Sub(dp, PerRow(g, delta, dims))), attrs.scale), operands);
    return attrs.index == 0 ? g.Dot(ds, k, Batched(3, 2), result)
                            : g.Dot(ds, q, Batched(2, 2), result);
  });
}

// Note [delta in the stored layout]: x = transpose(reshape(flat, dims), perm)
// with the head dim last in both, e.g. o and do in [B, H, T, D] read out of
// [B, T, H*D] values (the stored copy of o, the output projection's dx).
struct FlatLayout {
  Instruction* flat = nullptr;
  std::vector<int64_t> dims;  // of reshape(flat): [B, T, H, D]
  std::vector<int64_t> perm;  // of the transpose to [B, H, T, D]
};
std::optional<FlatLayout> FlatSource(Instruction* x) {
  if (x->opcode() != Opcode::kTranspose || x->operand(0)->opcode() != Opcode::kReshape) {
    return std::nullopt;
  }
  const std::vector<int64_t>& perm = x->attrs().dimensions;
  const int64_t last = static_cast<int64_t>(perm.size()) - 1;
  if (perm.empty() || perm.back() != last) return std::nullopt;
  Instruction* flat = x->operand(0)->operand(0);
  // dx of a bf16 dot arrives widened: read the 16-bit value itself (the
  // widening is exact).
  if (flat->opcode() == Opcode::kConvert &&
      ir::DTypeBytes(flat->operand(0)->shape().dtype()) < ir::DTypeBytes(flat->shape().dtype())) {
    flat = flat->operand(0);
  }
  return FlatLayout{flat, x->operand(0)->shape().dims(), perm};
}

// The attention output as it is stored anyway: mixed precision writes o as a
// 16-bit [B, T, H*D] copy for the output projection (transpose, reshape,
// convert); delta reads that copy back through the inverse layout instead of
// keeping the f32 [B, H, T, D] o alive for the backward.
std::optional<FlatLayout> StoredLayout(const Instruction& y) {
  for (Instruction* t : y.users()) {
    if (t->opcode() != Opcode::kTranspose) continue;
    for (Instruction* r : t->users()) {
      if (r->opcode() != Opcode::kReshape) continue;
      for (Instruction* cv : r->users()) {
        if (cv->opcode() != Opcode::kConvert || ir::DTypeBytes(cv->shape().dtype()) != 2) continue;
        const std::vector<int64_t>& perm = t->attrs().dimensions;
        std::vector<int64_t> inverse(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
        return FlatLayout{cv, t->shape().dims(), inverse};
      }
    }
  }
  return std::nullopt;
}

}  // namespace

StatusOr<ir::Computation*> RoundedAttentionDecomposition(ir::Computation* caller,
                                                         const Instruction& attention,
                                                         DType operands) {
  const Shape &qs = attention.operand(0)->shape(), &ks = attention.operand(1)->shape(),
              &vs = attention.operand(2)->shape();
  const ir::Attrs& attrs = attention.attrs();
  const std::string name = fmt::format("attention.{}.{}.{}{}", ShapeKey(qs), ShapeKey(ks),
                                       AttrsKey(attrs), RoundingKey(qs, operands));
  return Decomposition(caller, name, {qs, ks, vs}, [&](GradBuilder& g, const auto& p) {
    const RowSoftmax sm = SoftmaxOf(g, Scores(g, p[0], p[1], attrs.causal, attrs.scale, operands));
    Instruction* prob = g.Convert(g.Div(sm.e, PerRow(g, sm.l, sm.e->shape().dims())), operands);
    return g.Dot(prob, g.Convert(p[2], operands), Batched(3, 2), qs.dtype());
  });
}

StatusOr<std::vector<Instruction*>> AttentionRule(RuleContext& c, const Instruction& y,
                                                  Instruction* dy, const std::vector<bool>& w) {
  Instruction *q = y.operand(0), *k = y.operand(1), *v = y.operand(2);
  const DType operands = y.attrs().grad_dtype.value_or(q->shape().dtype());
  ir::Attrs attrs;
  attrs.causal = y.attrs().causal;
  attrs.scale = y.attrs().scale;
  ir::Computation* caller = c.g.computation();

  ASSIGN_OR_RETURN(ir::Computation * lse_decomposition,
                   LseDecomposition(caller, *q, *k, attrs, operands));
  ir::Attrs lse_attrs = attrs;
  if (operands != q->shape().dtype()) lse_attrs.grad_dtype = operands;
  Instruction* lse = c.g.Build(Opcode::kAttentionLse, {q, k}, lse_attrs, Shape::Scalar(DType::kF32),
                               lse_decomposition);
  // Forward state, as o is: remat (by its role) then keeps it or recomputes
  // it with the forward, and fusion puts it in the forward's kernel.
  if (lse != nullptr) {
    lse->set_metadata(y.metadata());
    lse->set_role(y.role());
  }
  Instruction* delta = nullptr;
  Instruction* d_out = nullptr;
  // Note [delta in the stored layout]: when do and o both come out of
  // [B, T, H*D] values, delta sums their rows there (a row reduction over
  // contiguous D, reading both through reshapes, which are free) and is
  // transposed after; no [B, H, T, D] copy of either is made. do is then the
  // 16-bit dx itself through the same layout, when it has the operands' type.
  const std::optional<FlatLayout> dl = FlatSource(dy), ol = StoredLayout(y);
  if (dl && ol && dl->dims == ol->dims && dl->perm == ol->perm) {
    Instruction* product = c.g.Mul(c.g.Convert(c.g.Reshape(dl->flat, dl->dims), DType::kF32),
                                   c.g.Convert(c.g.Reshape(ol->flat, ol->dims), DType::kF32));
    const int64_t last = static_cast<int64_t>(dl->dims.size()) - 1;
    std::vector<int64_t> row_perm(dl->perm.begin(), dl->perm.end() - 1);
    delta = c.g.Transpose(c.g.Reduce(product, {last}, ir::ReduceKind::kSum, DType::kF32), row_perm);
    if (dl->flat->shape().dtype() == operands) {
      d_out = c.g.Transpose(c.g.Reshape(dl->flat, dl->dims), dl->perm);
    }
  } else {
    Instruction* o = ol ? c.g.Transpose(c.g.Reshape(ol->flat, ol->dims), ol->perm)
                        : const_cast<Instruction*>(&y);
    delta = c.g.Reduce(c.g.Mul(c.g.Convert(dy, DType::kF32), c.g.Convert(o, DType::kF32)), {3},
                       ir::ReduceKind::kSum, DType::kF32);
  }
  if (d_out == nullptr) d_out = c.g.Convert(dy, operands);
  std::vector<Instruction*> grad_ops = {c.g.Convert(q, operands),
                                        c.g.Convert(k, operands),
                                        c.g.Convert(v, operands),
                                        d_out,
                                        lse,
                                        delta};
  std::vector<Instruction*> grads(3, nullptr);
  for (int64_t i = 0; i < 3; ++i) {
    if (!w[i] || !c.g.status().ok()) continue;
    attrs.index = i;
    const DType result = y.operand(i)->shape().dtype();
    ASSIGN_OR_RETURN(ir::Computation * decomposition,
                     GradDecomposition(caller, grad_ops, attrs, result));
    grads[i] =
        c.g.Build(Opcode::kAttentionGrad, grad_ops, attrs, Shape::Scalar(result), decomposition);
  }
  return grads;
}

}  // namespace gptc::passes::autodiff
