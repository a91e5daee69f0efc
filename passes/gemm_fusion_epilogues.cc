// The epilogues of the gemm fusion rule (passes/gemm_fusion.h) that
// are more than a chain after the dot: the GELU and its backward (Note [GELU
// epilogues] in gelu_epilogue.h) and the bias gradients. Found on the
// planner's view of the entry (free ops are copied into every group, so
// regions look through them).
#include <algorithm>
#include <set>
#include <vector>

#include "compiler/analysis/gelu_epilogue.h"
#include "compiler/analysis/gemm_epilogue.h"
#include "compiler/ir/patterns.h"
#include "passes/fusion_planner.h"
#include "passes/gemm_fusion.h"

namespace gptc::passes::fusion_internal {

namespace {

using ir::Instruction;
using ir::Opcode;

// Whether an aux laid out as `x` (D's layout, its leading dim the row-major
// last dim) keeps cuBLASLt's limits (Note [cuBLASLt epilogue limits]).
bool AuxLdOk(const Instruction* x) {
  return !analysis::BrokenGemmEpilogueLimit(
              {.d = x->shape(), .d_ld = x->shape().dims().back(), .aux = x})
              .has_value();
}

// Whether every use of `x` is by a member of `s` (looking through free ops).
bool UsedOnlyBy(const Planner& p, const Instruction* x, const InstSet& s) {
  if (p.computation()->root() == x) return false;
  std::vector<const Instruction*> users;
  p.NonFreeUsers(x, users);
  return std::all_of(users.begin(), users.end(), [&](auto* u) { return s.contains(u); });
}

// The planner's view of the entry for the GELU matcher (Note [GELU
// epilogues]): free ops looked through, grouped instructions taken.
class PlannerGeluGraph : public analysis::GeluGraph {
 public:
  explicit PlannerGeluGraph(const Planner& p) : p_(p) {}

  void Users(const Instruction* x, std::vector<const Instruction*>& out) const override {
    p_.NonFreeUsers(x, out);
  }
  void Sources(const Instruction* op, std::vector<const Instruction*>& out) const override {
    p_.NonFreeSources(op, out);
  }
  bool Available(const Instruction* u) const override { return p_.Claimable(u); }
  bool UsedOnlyBy(const Instruction* x, const InstSet& s) const override {
    return fusion_internal::UsedOnlyBy(p_, x, s);
  }
  void Sort(std::vector<const Instruction*>& v) const override { p_.SortByPosition(v); }

 private:
  const Planner& p_;
};

// The GELU of `x` (analysis::MatchGeluRegion) on the planner's view.
std::vector<const Instruction*> MatchGeluOf(const Planner& p, const Instruction* x) {
  return analysis::MatchGeluRegion(PlannerGeluGraph(p), x);
}

}  // namespace

GeluEpilogueOps MatchGeluEpilogue(const Planner& p, const Instruction* x, const InstSet& group) {
  std::vector<const Instruction*> gelu = MatchGeluOf(p, x);
  if (gelu.empty()) {
    // The GELU of the widened copy of x, the bf16 pre-activation the
    // backward keeps (Note [bf16 GELU epilogue] in mixed_precision.h).
    std::vector<const Instruction*> users;
    p.NonFreeUsers(x, users);
    for (const Instruction* w : users) {
      if (!ir::IsWideningConvert(w) || !p.Claimable(w)) continue;
      gelu = MatchGeluOf(p, w);
      if (gelu.empty()) continue;
      gelu.insert(gelu.begin(), w);
      break;
    }
  }
  if (gelu.empty()) return {};
  // x leaves the gemm as cuBLASLt's aux when anything else reads it.
  InstSet s = group;
  s.insert(gelu.begin(), gelu.end());
  if (!UsedOnlyBy(p, x, s) && !AuxLdOk(x)) return {};
  return {std::move(gelu), x};
}

GeluEpilogueOps MatchGeluGradEpilogue(const Planner& p, const Instruction* dy) {
  if (!AuxLdOk(dy)) return {};
  // The ops computed from dy: its products with GELU' and their sum.
  InstSet from_dy;
  std::vector<const Instruction*> ops;
  for (bool changed = true; changed && ops.size() <= 48;) {
    changed = false;
    std::vector<const Instruction*> users;
    p.NonFreeUsers(dy, users);
    for (const Instruction* m : ops) p.NonFreeUsers(m, users);
    for (const Instruction* u : users) {
      if (from_dy.contains(u) || !p.Claimable(u) || !ir::IsElementwise(u->opcode()) ||
          u->opcode() == Opcode::kConvert || u->shape().dims() != dy->shape().dims()) {
        continue;
      }
      from_dy.insert(u);
      ops.push_back(u);
      changed = true;
    }
  }
  if (ops.empty() || ops.size() > 48) return {};
  const Instruction* sink = nullptr;
  for (const Instruction* m : ops) {
    if (UsedOnlyBy(p, m, from_dy)) continue;
    if (sink != nullptr) return {};
    sink = m;
  }
  if (sink == nullptr) return {};
  // D's dtype: the sink's, or that of the converts after it the gemm takes.
  const Instruction* d = sink;
  for (const Instruction* u = sink; u->users().size() == 1 && p.computation()->root() != u;) {
    u = u->users()[0];
    if (u->opcode() != Opcode::kConvert || !p.Claimable(u)) break;
    d = u;
  }
  // The recomputed GELU intermediates they read, expanded latest first down
  // to one value of D's dtype and dims: the aux.
  auto later = [&](const Instruction* a, const Instruction* b) { return p.pos(a) > p.pos(b); };
  std::set<const Instruction*, decltype(later)> frontier(later);
  for (const Instruction* m : ops) {
    std::vector<const Instruction*> sources;
    for (const Instruction* op : m->operands()) p.NonFreeSources(op, sources);
    for (const Instruction* s : sources) {
      if (s != dy && !from_dy.contains(s) && s->opcode() != Opcode::kConstant) frontier.insert(s);
    }
  }
  InstSet members = from_dy;
  auto is_aux = [&](const Instruction* x) {
    return x->shape().dtype() == d->shape().dtype() && x->shape().dims() == dy->shape().dims();
  };
  while (!frontier.empty() && !(frontier.size() == 1 && is_aux(*frontier.begin()))) {
    const Instruction* v = *frontier.begin();
    frontier.erase(frontier.begin());
    if (!p.Claimable(v) || !ir::IsElementwise(v->opcode()) ||
        v->shape().dims() != dy->shape().dims() || ops.size() > 64) {
      return {};
    }
    members.insert(v);
    ops.push_back(v);
    std::vector<const Instruction*> sources;
    for (const Instruction* op : v->operands()) p.NonFreeSources(op, sources);
    for (const Instruction* s : sources) {
      if (s == dy || from_dy.contains(s)) return {};
      if (s->opcode() != Opcode::kConstant && !members.contains(s)) frontier.insert(s);
    }
  }
  if (frontier.size() != 1) return {};
  // Only the result leaves the gemm: the recomputed intermediates stay inside.
  for (const Instruction* m : ops) {
    if (!from_dy.contains(m) && !UsedOnlyBy(p, m, members)) return {};
  }
  if (!analysis::ComputesGeluGrad(sink, dy, *frontier.begin())) return {};
  p.SortByPosition(ops);
  std::erase(ops, sink);
  ops.push_back(sink);
  return {std::move(ops), *frontier.begin()};
}

namespace {

// The converts after bias gradient `r` in gemm group `g` when they lead back
// to r's dtype: autodiff's bf16 round trip of the gradient of a bf16 bias
// copy (Note [bf16 GELU epilogue] in mixed_precision.h), whose rounding
// cuBLASLt skips (the plan notes it).
// Returns the last value taken: the gradient's output.
const Instruction* AbsorbRoundTrip(Planner& p, int g, const Instruction* r) {
  std::vector<const Instruction*> chain;
  for (const Instruction* u = SingleUser(p, r);
       u != nullptr && u->opcode() == Opcode::kConvert && p.Claimable(u); u = SingleUser(p, u)) {
    chain.push_back(u);
  }
  while (!chain.empty() && chain.back()->shape().dtype() != r->shape().dtype()) chain.pop_back();
  InstSet s = p.groups()[g].members;
  s.insert(chain.begin(), chain.end());
  if (p.CreatesCycle(s)) return r;
  const Instruction* out = r;
  for (const Instruction* c : chain) {
    if (p.TryAdd(g, c)) out = c;
  }
  return out;
}

}  // namespace

void FuseBiasGradients(Planner& p, int g, const Instruction* d, GemmEpilogueValues& e) {
  const ir::DotDimensions& dims = d->attrs().dot;
  for (int i = 0; i < 2; ++i) {
    std::vector<int64_t> contracting = i == 0 ? dims.lhs_contracting : dims.rhs_contracting;
    std::sort(contracting.begin(), contracting.end());
    // The column sum may read the f32 value whose bf16 convert the dot
    // takes, or the f32 widening of the bf16 operand (the gradient DGELU
    // writes, Note [GELU epilogues]): the kernel sums the operand it loads
    // (tolerance of bf16).
    const Instruction* operand = d->operand(i);
    if (p.IsFree(operand)) continue;
    std::vector<const Instruction*> summed = {operand};
    if (operand->opcode() == Opcode::kConvert) summed.push_back(operand->operand(0));
    for (const Instruction* w : operand->users()) {
      if (ir::IsWideningConvert(w) && p.Claimable(w)) summed.push_back(w);
    }
    std::vector<const Instruction*> candidates;
    for (const Instruction* x : summed) {
      candidates.insert(candidates.end(), x->users().begin(), x->users().end());
    }
    for (const Instruction* r : candidates) {
      if (r->opcode() != Opcode::kReduce || !p.Claimable(r) ||
          r->attrs().reduce_kind != ir::ReduceKind::kSum || r->shape().rank() != 1) {
        continue;
      }
      std::vector<int64_t> reduced = r->attrs().dimensions;
      std::sort(reduced.begin(), reduced.end());
      if (reduced != contracting) continue;
      const Instruction* w = r->operand(0);
      if (w != operand && ir::IsWideningConvert(w) && w->operand(0) == operand) {
        // The widening is only the sum's: it joins the gemm with it.
        InstSet s = p.groups()[g].members;
        s.insert({w, r});
        if (!UsedOnlyBy(p, w, {r}) || p.CreatesCycle(s)) continue;
        p.TryAdd(g, w);
      }
      if (!p.TryAdd(g, r)) continue;
      // One bias gradient per gemm: cuBLASLt writes one bias vector.
      e.bias_grad_out = AbsorbRoundTrip(p, g, r);
      e.bias_grad_of = operand;
      return;
    }
  }
}

}  // namespace gptc::passes::fusion_internal
