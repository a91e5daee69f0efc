// The rule phases of the fusion pass (see passes/fusion.h for the rules).
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/analysis/gemm_activations.h"
#include "compiler/ir/patterns.h"
#include "compiler/program/plan.h"
#include "passes/fusion_planner.h"

namespace gptc::passes::fusion_internal {

namespace {

using ir::FusionKind;
using ir::Instruction;
using ir::Opcode;

// Whether every non-free operand of `inst` is in `s`.
bool AllOperandsIn(const Planner& p, const Instruction* inst, const InstSet& s) {
  std::vector<const Instruction*> sources;
  for (const Instruction* op : inst->operands()) p.NonFreeSources(op, sources);
  return std::all_of(sources.begin(), sources.end(), [&](auto* x) { return s.contains(x); });
}

// Whether `x` is a claimable row-local backward op of `role` (the
// cross-entropy's backward is elementwise ops, broadcasts and row
// reductions; a dot ends it).
bool IsRowwiseGradient(const Planner& p, const Instruction* x, const ir::Role& role) {
  const Opcode o = x->opcode();
  return x->role() == role && p.Claimable(x) &&
         (ir::IsElementwise(o) || o == Opcode::kBroadcast || o == Opcode::kReduce ||
          o == Opcode::kIota || o == Opcode::kConstant);
}

// Grows `s` with the row-local backward ops of `role` whose uses all lie in
// `s` (masks, the loss gradient feeding only the region).
void AddOwnedProducers(const Planner& p, InstSet& s, const ir::Role& role) {
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<const Instruction*> sources;
    for (const Instruction* m : s) {
      for (const Instruction* op : m->operands()) p.NonFreeSources(op, sources);
    }
    for (const Instruction* x : sources) {
      if (s.contains(x) || !IsRowwiseGradient(p, x, role)) continue;
      if (!AllUsesIn(p, x, s)) continue;
      s.insert(x);
      changed = true;
    }
  }
}

// The row-local backward ops of `role` reachable from `from` through their
// users, passing through free ops.
InstSet ReachGradient(const Planner& p, const std::vector<const Instruction*>& from,
                      const ir::Role& role) {
  InstSet out;
  std::vector<const Instruction*> stack(from.begin(), from.end());
  while (!stack.empty()) {
    const Instruction* x = stack.back();
    stack.pop_back();
    std::vector<const Instruction*> next;
    p.NonFreeUsers(x, next);
    for (const Instruction* n : next) {
      if (!IsRowwiseGradient(p, n, role) || !out.insert(n).second) continue;
      stack.push_back(n);
    }
  }
  return out;
}

// Whether `c` is remat's copy of `x`: a remat op computing what `x`
// computes (its opcode, attributes and shape, each operand x's own or its
// copy). Only the copies' chain is walked, back to the values remat kept.
bool IsRematCopy(const Instruction* c, const Instruction* x) {
  if (c->role().phase != ir::Phase::kRemat || c->opcode() != x->opcode() ||
      c->shape() != x->shape() || c->operand_count() != x->operand_count() ||
      c->attrs() != x->attrs() || c->called_computation() != x->called_computation()) {
    return false;
  }
  for (int64_t i = 0; i < x->operand_count(); ++i) {
    if (c->operand(i) != x->operand(i) && !IsRematCopy(c->operand(i), x->operand(i))) return false;
  }
  return true;
}

// Remat's copy of `x`, or nullptr.
const Instruction* RematCopy(const Planner& p, const Instruction* x) {
  for (const Instruction* c : p.WithOpcode(x->opcode())) {
    if (IsRematCopy(c, x)) return c;
  }
  return nullptr;
}

bool IsLastTwoTranspose(const Instruction* t) {
  if (t->opcode() != Opcode::kTranspose) return false;
  const auto& perm = t->attrs().dimensions;
  int64_t r = static_cast<int64_t>(perm.size());
  if (r < 2) return false;
  for (int64_t i = 0; i < r - 2; ++i) {
    if (perm[i] != i) return false;
  }
  return perm[r - 2] == r - 1 && perm[r - 1] == r - 2;
}

// Absorbs a chain of single-use converts after `cur`; returns the new end.
const Instruction* AbsorbConverts(Planner& p, int g, const Instruction* cur) {
  for (const Instruction* u = SingleUser(p, cur);
       u != nullptr && u->opcode() == Opcode::kConvert && p.Claimable(u) && p.TryAdd(g, u);
       u = SingleUser(p, cur)) {
    cur = u;
  }
  return cur;
}

// The other operand of a binary `user` of `value`.
const Instruction* OtherOperand(const Instruction* user, const Instruction* value) {
  return user->operand(0) == value ? user->operand(1) : user->operand(0);
}

}  // namespace

// Whether every use of `inst` is by a member of `s`, looking through free ops.
bool AllUsesIn(const Planner& p, const Instruction* inst, const InstSet& s) {
  std::vector<const Instruction*> users;
  p.NonFreeUsers(inst, users);
  if (p.computation()->root() == inst) return false;
  return std::all_of(users.begin(), users.end(), [&](auto* u) { return s.contains(u); });
}

// The single user of `inst`, or nullptr.
const Instruction* SingleUser(const Planner& p, const Instruction* inst) {
  if (inst->users().size() != 1 || p.computation()->root() == inst) return nullptr;
  return inst->users().front();
}

void FuseOptimizer(Planner& p) {
  InstSet s;
  const Instruction* hero = nullptr;
  for (const Instruction* inst : p.optimizer_ops()) {
    if (p.Claimable(inst)) s.insert(inst);
  }
  p.MakeConvex(s);
  for (const Instruction* inst : s) {  // the last in entry order
    if (hero == nullptr || p.pos(inst) > p.pos(hero)) hero = inst;
  }
  if (!s.empty()) p.NewGroup(FusionKind::kOptimizer, hero, s);
}

void FuseGradNorm(Planner& p) {
  // sum_i sum(g_i * g_i) over every parameter gradient: the squares-sums
  // are full reductions of `optimizer.*` ops the optimizer fusion had to
  // leave out (every update depends on the global norm); one horizontal
  // multi-output reduction computes them all, with the norm and clip scale.
  InstSet s;
  for (const Instruction* r : p.WithOpcode(Opcode::kReduce)) {
    if (!p.Claimable(r) || r->role().phase != ir::Phase::kUpdate) {
      continue;
    }
    s.insert(r);
    for (const Instruction* op : r->operands()) {
      if (p.Claimable(op) && ir::IsElementwise(op->opcode()) &&
          op->role().phase == ir::Phase::kUpdate && AllUsesIn(p, op, {r})) {
        s.insert(op);
      }
    }
  }
  if (s.empty()) return;
  // The scalar epilogue (sum of the sums, sqrt, clip scale).
  for (bool grew = true; grew;) {
    grew = false;
    std::vector<const Instruction*> users;
    for (const Instruction* m : s) p.NonFreeUsers(m, users);
    for (const Instruction* u : users) {
      if (s.contains(u) || !p.Claimable(u) || !ir::IsElementwise(u->opcode()) ||
          u->shape().rank() != 0 || !AllOperandsIn(p, u, s)) {
        continue;
      }
      s.insert(u);
      grew = true;
    }
  }
  p.MakeConvex(s);
  if (s.empty()) return;
  const Instruction* hero = *std::min_element(
      s.begin(), s.end(), [&](auto* x, auto* y) { return p.pos(x) < p.pos(y); });
  int g = p.NewGroup(FusionKind::kReduction, hero, s);
  p.groups()[g].name = "optimizer.grad_norm";
  p.groups()[g].metadata = "optimizer.grad_norm";
  p.groups()[g].role = ir::Role{ir::Phase::kOptimizer};
}

void FuseParameterConverts(Planner& p) {
  // Every convert of a master weight (f32 -> bf16) in one horizontal loop
  // kernel at the start of the step, instead of one kernel per use.
  InstSet s;
  for (const Instruction* c : p.WithOpcode(Opcode::kConvert)) {
    if (p.Claimable(c) && c->operand(0)->opcode() == Opcode::kParameter) {
      s.insert(c);
    }
  }
  if (s.size() < 2) return;
  const Instruction* hero = *std::min_element(
      s.begin(), s.end(), [&](auto* x, auto* y) { return p.pos(x) < p.pos(y); });
  int g = p.NewGroup(FusionKind::kLoop, hero, s);
  p.groups()[g].name = "parameters.bf16";
  p.groups()[g].metadata = "parameters.bf16";
  p.groups()[g].role = ir::Role{ir::Phase::kParamCast};
}

void FuseConvertsIntoProducers(Planner& p) {
  // x = <group g>; c = convert(x)  =>  c joins g as one more output (or
  // replaces x's output when c is x's only user). Not into gemms: cuBLASLt
  // writes one result (their epilogue converts are absorbed by FuseGemms).
  for (const Instruction* c : p.WithOpcode(Opcode::kConvert)) {
    if (!p.Claimable(c)) continue;
    std::vector<const Instruction*> sources;
    p.NonFreeSources(c->operand(0), sources);
    if (sources.size() != 1) continue;
    int g = p.group_of(sources.front());
    if (g < 0 || p.groups()[g].kind == FusionKind::kGemm ||
        p.groups()[g].kind == FusionKind::kOptimizer) {
      continue;
    }
    p.TryAdd(g, c);
  }
}

void FuseCrossEntropy(Planner& p) {
  for (const Instruction* ce : p.WithOpcode(Opcode::kSoftmaxCrossEntropy)) {
    if (!p.Claimable(ce)) continue;
    // dlogits: the row-local backward ops computed from its logits.
    const ir::Role role{ir::Phase::kGradient, ce->role().layer};
    // The logits, and their copy when remat recomputes them for the backward.
    std::vector<const Instruction*> logits = {ce->operand(0)};
    if (const Instruction* clone = RematCopy(p, ce->operand(0))) logits.push_back(clone);
    InstSet s = ReachGradient(p, logits, role);
    s.insert(ce);
    // bf16 logits are widened in the kernel (Note [bf16 logits] in
    // mixed_precision.cc): the f32 [B, T, V] copy is never stored.
    for (const Instruction* l : logits) {
      for (const Instruction* x = l;
           x->opcode() == Opcode::kConvert && p.Claimable(x) && AllUsesIn(p, x, s);
           x = x->operand(0)) {
        s.insert(x);
      }
    }
    AddOwnedProducers(p, s, role);
    // dlogits leave the kernel in the dtype the backward dots read.
    for (bool grew = true; grew;) {
      grew = false;
      std::vector<const Instruction*> users;
      for (const Instruction* m : s) p.NonFreeUsers(m, users);
      for (const Instruction* u : users) {
        if (u->opcode() != Opcode::kConvert || s.contains(u) || !p.Claimable(u)) continue;
        s.insert(u);
        grew = true;
      }
    }
    p.MakeConvex(s);
    if (!s.contains(ce)) s = {ce};
    p.NewGroup(FusionKind::kCrossEntropy, ce, s);
  }
}


namespace {

// Note [narrow gemm results]: a bf16 dot whose f32 widening only feeds
// kernels fused later (a layer-norm backward's rows, a loop: not a gemm, the
// optimizer, an attention kernel or the entry's outputs) leaves the widening
// to them. cuBLASLt then writes bf16, half the bytes, and the consumer reads
// half; the value is the same (the widening of a bf16 is exact). The
// buffer between them halves too: at gpt2-124m's peak the lm_head weight
// gradient (f32 [V, C], 147 MiB) lives from its gemm to the end of the
// backward, where the embedding's gradient is added to it.
bool WidenedByConsumers(const Planner& p, const Instruction* convert) {
  if (p.computation()->root() == convert) return false;
  std::vector<const Instruction*> users;
  p.NonFreeUsers(convert, users);
  return !users.empty() && std::all_of(users.begin(), users.end(), [&](const Instruction* u) {
    const Opcode o = u->opcode();
    return p.group_of(u) < 0 && !u->role().optimizer() &&
           (ir::IsElementwise(o) || o == Opcode::kReduce || o == Opcode::kReshape ||
            o == Opcode::kTranspose);
  });
}

// Note [GELU epilogues]: the GELU (with the pre-activation as aux), or,
// after a bare dot, the GELU backward reading that aux; or a one-op
// activation (Note [gemm activations]) where cuBLASLt has an epilogue for it
// after this bias: none keeps its input as aux, so the activation must be
// the pre-activation's only user. Returns D's value so far; `absorbed` says
// whether an activation joined group `g`.
const Instruction* AbsorbActivation(Planner& p, int g, const Instruction* cur, bool after_bias,
                                    bool& absorbed) {
  std::vector<const Instruction*> gelu = MatchGeluEpilogue(p, cur, p.groups()[g].members);
  if (gelu.empty() && !after_bias) gelu = MatchGeluGradEpilogue(p, cur);
  if (!gelu.empty()) {
    InstSet s = p.groups()[g].members;
    s.insert(gelu.begin(), gelu.end());
    if (!p.CreatesCycle(s)) {
      for (const Instruction* x : gelu) p.TryAdd(g, x);
      absorbed = true;
      return AbsorbConverts(p, g, gelu.back());
    }
    return cur;
  }
  const Instruction* a = SingleUser(p, cur);
  if (a == nullptr || !p.Claimable(a)) return cur;
  const std::optional<ir::GemmActivation> kind = analysis::MatchOneOpActivation(*a, cur);
  const program::EpilogueBias bias =
      after_bias ? program::EpilogueBias::kRead : program::EpilogueBias::kNone;
  if (!kind || !program::FindGemmEpilogue(*kind, bias, program::EpilogueAux::kNone) ||
      !p.TryAdd(g, a)) {
    return cur;
  }
  absorbed = true;
  return AbsorbConverts(p, g, a);
}

}  // namespace

void FuseGemms(Planner& p) {
  for (const Instruction* d : p.WithOpcode(Opcode::kDot)) {
    if (!p.Claimable(d)) continue;
    int g = p.NewGroup(FusionKind::kGemm, d, {d});
    // Operand layouts cuBLASLt expresses: reshapes and last-two-dims transposes.
    for (const Instruction* op : d->operands()) {
      for (const Instruction* x = op;; x = x->operand(0)) {
        if (x->opcode() != Opcode::kReshape && !IsLastTwoTranspose(x)) break;
        if (!p.Claimable(x) || !AllUsesIn(p, x, p.groups()[g].members) || !p.TryAdd(g, x)) break;
      }
    }
    // Bias gradient: a column sum of an operand over its contracting dims.
    if (d->attrs().dot.lhs_batch.empty()) FuseBiasGradients(p, g, d);
    // Epilogue: converts, bias, GELU, residual, converts; or a 2-D transpose.
    const Instruction* cur = AbsorbConverts(p, g, d);
    const Instruction* u = SingleUser(p, cur);
    // Note [bias of D's type]: the group before the bias, and the bias's type.
    std::optional<InstSet> before_bias;
    ir::DType bias_dtype = ir::DType::kF32;
    if (u != nullptr && u->opcode() == Opcode::kAdd && p.Claimable(u)) {
      const Instruction* b = OtherOperand(u, cur);
      int64_t rank = cur->shape().rank();
      if (b->opcode() == Opcode::kBroadcast && b->operand(0)->shape().rank() == 1 &&
          b->attrs().dimensions == std::vector<int64_t>{rank - 1}) {
        InstSet members = p.groups()[g].members;
        if (p.TryAdd(g, u)) {
          before_bias = std::move(members);
          // A bias widened from D's type is widened by cuBLASLt: the convert
          // joins the gemm (Note [bf16 GELU epilogue] in mixed_precision.h).
          const Instruction* bias = b->operand(0);
          if (ir::IsWideningConvert(bias) && p.Claimable(bias) &&
              AllUsesIn(p, bias, p.groups()[g].members) && p.TryAdd(g, bias)) {
            bias = bias->operand(0);
          }
          bias_dtype = bias->shape().dtype();
          cur = AbsorbConverts(p, g, u);
        }
      }
    }
    bool activation = false;
    cur = AbsorbActivation(p, g, cur, before_bias.has_value(), activation);
    // A residual, not after an activation (cuBLASLt adds C before it).
    u = SingleUser(p, cur);
    if (!activation && u != nullptr && u->opcode() == Opcode::kAdd && p.Claimable(u) &&
        OtherOperand(u, cur)->shape() == cur->shape() && OtherOperand(u, cur) != cur &&
        p.TryAdd(g, u)) {
      cur = AbsorbConverts(p, g, u);
    }
    // Note [bias of D's type]: cuBLASLt's bias has D's type (cublasLt.h,
    // BIAS_DATA_TYPE); an f32 bias before a bf16 result (GELU then a bf16
    // store) stays out of the gemm, with the rest of the epilogue after it.
    if (before_bias && bias_dtype != cur->shape().dtype()) {
      p.ShrinkTo(g, *before_bias);
      continue;
    }
    u = SingleUser(p, cur);
    if (cur == d && d->shape().rank() == 2 && u != nullptr && u->opcode() == Opcode::kTranspose &&
        p.Claimable(u) && p.TryAdd(g, u)) {
      AbsorbConverts(p, g, u);
    }
    if (ir::IsWideningConvert(cur) && cur->operand(0) == d && WidenedByConsumers(p, cur)) {
      InstSet members = p.groups()[g].members;
      members.erase(cur);
      p.ShrinkTo(g, members);
    }
  }
}

namespace {

// Whether `inst` is one of the forward's own ops: not the backward's, nor a
// recomputation remat made for it.
bool IsForwardOp(const Instruction* inst) { return !inst->role().backward(); }

// Grows a row-reduction group over the row-local region: elementwise ops of
// the input or row shape, and other row reductions of the same input shape.
// A forward group takes no remat clone: remat made it so that the backward
// computes the value instead of storing it (the layer norm's x-hat from
// x - mean and rstd), and the forward kernel would store it again.
void GrowRowGroup(Planner& p, int g, const std::vector<int64_t>& in_dims,
                  const std::vector<int64_t>& row_dims) {
  const bool forward = IsForwardOp(p.groups()[g].hero);
  // By position (Note [adjacency by position]): only reductions are read.
  const int32_t in_class = p.FindDimsClass(in_dims), row_class = p.FindDimsClass(row_dims);
  auto admissible = [&](int32_t i) {
    if (forward && p.remat_at(i)) return false;
    if (p.opcode_at(i) == Opcode::kReduce) {
      const Instruction* x = p.order()[i];
      return ir::IsRowReduce(*x) && x->operand(0)->shape().dims() == in_dims;
    }
    const int32_t c = p.dims_class_at(i);
    return ir::IsElementwise(p.opcode_at(i)) && c >= 0 && (c == in_class || c == row_class);
  };
  // Rounds over the neighbours of what the last round added, and the
  // candidates refused so far (a later member may make them acyclic; a round
  // that adds nothing ends the growth): each
  // member's neighbours are gathered once, so a region grows in time linear
  // in its size, not quadratic (a 4000-op row-local chain took 13.5 s).
  // By position (Note [adjacency by position]), in entry order (the
  // neighbours are sorted below anyway): growing again after the merges
  // starts from every member of the group.
  std::vector<int32_t> fresh = p.MemberPositions(g);
  std::vector<int32_t> refused;
  while (!fresh.empty()) {
    std::vector<int32_t> near = std::move(refused);
    refused.clear();
    for (int32_t m : fresh) {
      for (std::span<const int32_t> next : {p.sources_at(m), p.users_at(m)}) {
        near.insert(near.end(), next.begin(), next.end());
      }
    }
    fresh.clear();
    p.Count(static_cast<int64_t>(near.size()));
    std::sort(near.begin(), near.end());
    near.erase(std::unique(near.begin(), near.end()), near.end());
    for (int32_t i : near) {
      // Members first: growing again after the merges (in FuseReductions)
      // finds most neighbours inside already.
      int other = p.group_at(i);
      if (other == g || !admissible(i)) continue;
      if (other >= 0) {
        const Group& o = p.groups()[other];
        if (o.kind == FusionKind::kReduction && ir::IsRowReduce(*o.hero) &&
            o.hero->operand(0)->shape().dims() == in_dims) {
          std::vector<int32_t> joining = p.MemberPositions(other);
          if (p.TryMerge(g, other)) {
            fresh.insert(fresh.end(), joining.begin(), joining.end());
          } else {
            refused.push_back(i);
          }
        }
        continue;
      }
      if (!p.ClaimableAt(i)) continue;
      if (p.TryAddAt(g, i)) {
        fresh.push_back(i);
      } else {
        refused.push_back(i);
      }
    }
  }
}

// Adds the elementwise producers of the reduction input's shape.
void GrowProducers(Planner& p, int g, const std::vector<int64_t>& in_dims) {
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<const Instruction*> near;
    for (const Instruction* m : p.groups()[g].members) {
      for (const Instruction* op : m->operands()) p.NonFreeSources(op, near);
    }
    for (const Instruction* x : near) {
      if (!p.Claimable(x) || !ir::IsElementwise(x->opcode()) || x->shape().dims() != in_dims) {
        continue;
      }
      if (p.TryAdd(g, x)) changed = true;
    }
  }
}

// The values group `g` reads from outside.
InstSet Inputs(Planner& p, int g) {
  InstSet in;
  const InstSet& members = p.groups()[g].members;
  for (const Instruction* m : members) {
    std::vector<const Instruction*> sources;
    for (const Instruction* op : m->operands()) p.NonFreeSources(op, sources);
    for (const Instruction* s : sources) {
      if (!members.contains(s)) in.insert(s);
    }
  }
  return in;
}

}  // namespace

namespace {

// Whether `r` sums over every dim but the last (a per-channel column sum of
// a [..., C] value: dgamma, dbeta).
bool IsChannelSum(const Instruction* r) {
  int64_t rank = r->operand(0)->shape().rank();
  if (rank < 2 || r->shape().rank() != 1) return false;
  std::vector<int64_t> dims = r->attrs().dimensions;
  std::sort(dims.begin(), dims.end());
  for (int64_t i = 0; i < rank - 1; ++i) {
    if (i >= static_cast<int64_t>(dims.size()) || dims[i] != i) return false;
  }
  return static_cast<int64_t>(dims.size()) == rank - 1;
}

// Whether `x`, a member of `members`, is computed from a reduction among them.
bool ReadsReductionIn(const Planner& p, const Instruction* x, const InstSet& members) {
  std::vector<const Instruction*> stack = {x};
  InstSet seen;
  while (!stack.empty()) {
    const Instruction* y = stack.back();
    stack.pop_back();
    if (!members.contains(y) || !seen.insert(y).second) continue;
    if (y->opcode() == Opcode::kReduce) return true;
    for (const Instruction* op : y->operands()) p.NonFreeSources(op, stack);
  }
  return false;
}

// Layer-norm backward as one kernel (llm.c's layernorm_backward): the
// channel sums (dgamma, dbeta) join the row reduction computing dx from
// the same [..., C] values; each block adds its partial sums. Not when the
// column sums would read a row statistic computed in the same kernel (a
// rematerialized layer-norm forward merged with its backward): the column
// part runs after the row part and cannot see per-row values that are not
// stored, so such a column sum stays a kernel of its own.
void MergeChannelSumsIntoRows(Planner& p) {
  int n = static_cast<int>(p.groups().size());
  // To a fixed point: a merge can remove the cycle that kept another column
  // sum out (dbeta read the widened dy that dgamma's group reads, and the rows
  // read dgamma's x-hat: with dgamma merged, dbeta can join).
  for (bool merged = true; merged;) {
    merged = false;
    for (int c = 0; c < n; ++c) {
      const Group& col = p.groups()[c];
      if (!col.live || col.kind != FusionKind::kReduction || !IsChannelSum(col.hero)) continue;
      const std::vector<int64_t>& in_dims = col.hero->operand(0)->shape().dims();
      InstSet col_in = Inputs(p, c);
      for (int r = 0; r < n; ++r) {
        const Group& row = p.groups()[r];
        if (!row.live || r == c || row.kind != FusionKind::kReduction ||
            !ir::IsRowReduce(*row.hero) || row.hero->operand(0)->shape().dims() != in_dims) {
          continue;
        }
        InstSet row_in = Inputs(p, r);
        // They read a common input, or the rows read what the column sums
        // computed from it (the widening of a bf16 gemm result both read:
        // Note [narrow gemm results]).
        bool shared =
            std::any_of(col_in.begin(), col_in.end(),
                        [&](auto* x) { return row_in.contains(x) || row.members.contains(x); }) ||
            std::any_of(row_in.begin(), row_in.end(),
                        [&](auto* x) { return col.members.contains(x); });
        bool reads_row_stats = std::any_of(col_in.begin(), col_in.end(), [&](auto* x) {
          return row.members.contains(x) && ReadsReductionIn(p, x, row.members);
        });
        if (shared && !reads_row_stats && p.TryMerge(r, c)) {
          merged = true;
          break;
        }
      }
    }
  }
}

}  // namespace

void FuseReductions(Planner& p) {
  std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>, std::vector<int>> siblings;
  for (const Instruction* r : p.WithOpcode(Opcode::kReduce)) {
    if (!p.Claimable(r)) continue;
    const std::vector<int64_t>& in_dims = r->operand(0)->shape().dims();
    int g = p.NewGroup(FusionKind::kReduction, r, {r});
    if (ir::IsRowReduce(*r)) {
      GrowRowGroup(p, g, in_dims, r->shape().dims());
    } else {
      GrowProducers(p, g, in_dims);
      // Elementwise epilogue on the reduced values (the mean's division).
      for (bool grew = true; grew;) {
        grew = false;
        std::vector<const Instruction*> users;
        for (const Instruction* m : p.groups()[g].members) p.NonFreeUsers(m, users);
        for (const Instruction* u : users) {
          if (p.Claimable(u) && ir::IsElementwise(u->opcode()) &&
              u->shape().dims() == r->shape().dims() && p.TryAdd(g, u)) {
            grew = true;
          }
        }
      }
      siblings[{in_dims, r->attrs().dimensions}].push_back(g);
    }
  }
  // Column sums of the same shape reading a common input share a kernel.
  for (auto& [key, groups] : siblings) {
    for (size_t i = 0; i < groups.size(); ++i) {
      if (!p.groups()[groups[i]].live) continue;
      for (size_t j = i + 1; j < groups.size(); ++j) {
        if (!p.groups()[groups[j]].live) continue;
        InstSet a = Inputs(p, groups[i]), b = Inputs(p, groups[j]);
        bool shared = std::any_of(b.begin(), b.end(), [&](auto* x) { return a.contains(x); });
        if (shared) p.TryMerge(groups[i], groups[j]);
      }
    }
  }
  MergeChannelSumsIntoRows(p);
  // The channel sums may have taken producers the rows read too (x-hat,
  // recomputed from x - mean and rstd); merged, the rows can now take the
  // row-shaped values between (rstd's remat clone).
  for (int g = 0; g < static_cast<int>(p.groups().size()); ++g) {
    const Group& row = p.groups()[g];
    if (row.live && row.kind == FusionKind::kReduction && ir::IsRowReduce(*row.hero)) {
      GrowRowGroup(p, g, row.hero->operand(0)->shape().dims(), row.hero->shape().dims());
    }
  }
}

void FuseLoops(Planner& p) {
  for (size_t i = 0; i < p.order().size(); ++i) {
    // Grouped and free ops are passed over by position, without reading the
    // instruction: on 40k-instruction graphs most are grouped by now, and
    // each read missed the caches.
    if (p.group_at(i) >= 0 || p.free_at(i)) continue;
    const Instruction* x = p.order()[i];
    if (!IsLoopOp(*x) || !p.Claimable(x)) continue;
    std::vector<const Instruction*> sources;
    for (const Instruction* op : x->operands()) p.NonFreeSources(op, sources);
    int joined = -1;
    for (const Instruction* s : sources) {
      int g = p.group_of(s);
      if (g < 0 || p.groups()[g].kind != FusionKind::kLoop || g == joined) continue;
      if (joined < 0) {
        if (p.TryAdd(g, x)) joined = g;
      } else {
        p.TryMerge(joined, g);
      }
    }
    // A reshape no loop kernel computes is a view of its operand: left
    // unfused, it costs nothing, where a kernel of its own would copy it.
    if (joined < 0 && x->opcode() != Opcode::kReshape) p.NewGroup(FusionKind::kLoop, x, {x});
  }
  // Free ops (other than constants) an unfused op reads must be materialized.
  // By position: the instruction is read only when it is needed.
  for (size_t i = 0; i < p.order().size(); ++i) {
    if (!p.free_at(i)) continue;
    const Instruction* x = p.order()[i];
    bool needed = p.computation()->root() == x;
    for (int32_t u : p.readers_at(i)) needed |= !p.free_at(u) && p.group_at(u) < 0;
    if (needed && x->opcode() != Opcode::kConstant) p.NewGroup(FusionKind::kLoop, x, {x});
  }
}

}  // namespace gptc::passes::fusion_internal
