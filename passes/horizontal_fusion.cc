// The horizontal rules of fusion (passes/horizontal_fusion.h).
#include "passes/horizontal_fusion.h"

#include <algorithm>
#include <vector>

#include "passes/fusion_planner.h"

namespace gptc::passes::fusion_internal {

using ir::FusionKind;
using ir::Instruction;
using ir::Opcode;

namespace {

// Whether every non-free operand of `inst` is in `s`.
bool AllOperandsIn(const Planner& p, const Instruction* inst, const InstSet& s) {
  std::vector<const Instruction*> sources;
  for (const Instruction* op : inst->operands()) p.NonFreeSources(op, sources);
  return std::all_of(sources.begin(), sources.end(), [&](auto* x) { return s.contains(x); });
}

}  // namespace

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
  const Instruction* hero =
      *std::min_element(s.begin(), s.end(), [&](auto* x, auto* y) { return p.pos(x) < p.pos(y); });
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
  const Instruction* hero =
      *std::min_element(s.begin(), s.end(), [&](auto* x, auto* y) { return p.pos(x) < p.pos(y); });
  int g = p.NewGroup(FusionKind::kLoop, hero, s);
  p.groups()[g].name = "parameters.bf16";
  p.groups()[g].metadata = "parameters.bf16";
  p.groups()[g].role = ir::Role{ir::Phase::kParamCast};
}

}  // namespace gptc::passes::fusion_internal
