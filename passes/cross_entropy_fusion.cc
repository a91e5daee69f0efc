// The cross-entropy rule of fusion (passes/cross_entropy_fusion.h).
#include "passes/cross_entropy_fusion.h"

#include <algorithm>
#include <vector>

#include "passes/fusion_planner.h"

namespace gptc::passes::fusion_internal {

using ir::FusionKind;
using ir::Instruction;
using ir::Opcode;

namespace {

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
  AddOwnedSources(p, s, [&](const Instruction* x) { return IsRowwiseGradient(p, x, role); });
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

}  // namespace

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
}  // namespace gptc::passes::fusion_internal
