// The gemm rule of fusion (passes/gemm_fusion.h); its epilogues that are
// more than a chain after the dot are in gemm_fusion_epilogues.cc.
#include "passes/gemm_fusion.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "compiler/analysis/gemm_activations.h"
#include "compiler/analysis/gemm_epilogue.h"
#include "compiler/ir/patterns.h"
#include "compiler/program/plan.h"
#include "passes/fusion_planner.h"

namespace gptc::passes::fusion_internal {

using ir::FusionKind;
using ir::Instruction;
using ir::Opcode;

namespace {

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
  // A reshape that a collective reads (ZeRO-1's flattened gradient) would
  // become a widening kernel of its own: the gemm writes the wide value.
  auto feeds_collective = [](const Instruction* u) {
    return std::any_of(u->users().begin(), u->users().end(),
                       [](const Instruction* r) { return ir::IsCollective(r->opcode()); });
  };
  return !users.empty() && std::all_of(users.begin(), users.end(), [&](const Instruction* u) {
    const Opcode o = u->opcode();
    return p.group_of(u) < 0 && !u->role().optimizer() &&
           (ir::IsElementwise(o) || o == Opcode::kReduce ||
            (o == Opcode::kReshape && !feeds_collective(u)) || o == Opcode::kTranspose);
  });
}

// Note [GELU epilogues]: the GELU (the pre-activation its aux), or, after a
// bare dot, the GELU backward reading that aux; or a one-op activation (Note
// [gemm activations]) where cuBLASLt has an epilogue for it after this bias:
// none keeps its input as aux, so the activation must be the
// pre-activation's only user. Writes the activation into `e`; returns D's
// value so far.
const Instruction* AbsorbActivation(Planner& p, int g, const Instruction* cur, bool after_bias,
                                    GemmEpilogueValues& e) {
  GeluEpilogueOps gelu = MatchGeluEpilogue(p, cur, p.groups()[g].members);
  ir::GemmActivation activation = ir::GemmActivation::kGelu;
  if (gelu.ops.empty() && !after_bias) {
    gelu = MatchGeluGradEpilogue(p, cur);
    activation = ir::GemmActivation::kGeluGrad;
  }
  if (!gelu.ops.empty()) {
    InstSet s = p.groups()[g].members;
    s.insert(gelu.ops.begin(), gelu.ops.end());
    if (p.CreatesCycle(s)) return cur;
    for (const Instruction* x : gelu.ops) p.TryAdd(g, x);
    e.activation = activation;
    (activation == ir::GemmActivation::kGelu ? e.aux_out : e.aux_in) = gelu.aux;
    return AbsorbConverts(p, g, gelu.ops.back());
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
  e.activation = *kind;
  return AbsorbConverts(p, g, a);
}

// Operand layouts cuBLASLt expresses: reshapes and last-two-dims transposes.
void AbsorbOperandLayouts(Planner& p, int g, const Instruction* d) {
  for (const Instruction* op : d->operands()) {
    for (const Instruction* x = op;; x = x->operand(0)) {
      if (x->opcode() != Opcode::kReshape && !IsLastTwoTranspose(x)) break;
      if (!p.Claimable(x) || !AllUsesIn(p, x, p.groups()[g].members) || !p.TryAdd(g, x)) break;
    }
  }
}

// The group, D's value so far and the record at one point of the chain:
// what FuseGemms goes back to when what it took after breaks one of
// cuBLASLt's limits.
struct Checkpoint {
  InstSet members;
  const Instruction* cur = nullptr;
  GemmEpilogueValues e;
};

void Restore(Planner& p, int g, const Checkpoint& back, const Instruction*& cur,
             GemmEpilogueValues& e) {
  p.ShrinkTo(g, back.members);
  cur = back.cur;
  e = back.e;
}

// A bias add after `cur`: add(cur, broadcast(bias)) along the last dim,
// the bias a value read from outside (a widening convert of it joins too).
// Writes the bias into `e` and advances `cur`; returns the point before the
// add, or nullopt when no bias joined.
std::optional<Checkpoint> AbsorbBias(Planner& p, int g, const Instruction*& cur,
                                     GemmEpilogueValues& e) {
  const Instruction* u = SingleUser(p, cur);
  if (u == nullptr || u->opcode() != Opcode::kAdd || !p.Claimable(u)) return std::nullopt;
  const Instruction* b = OtherOperand(u, cur);
  const int64_t rank = cur->shape().rank();
  if (b->opcode() != Opcode::kBroadcast || b->operand(0)->shape().rank() != 1 ||
      b->attrs().dimensions != std::vector<int64_t>{rank - 1} || p.IsFree(b->operand(0))) {
    return std::nullopt;
  }
  Checkpoint before{p.groups()[g].members, cur, e};
  if (!p.TryAdd(g, u)) return std::nullopt;
  // A bias widened from D's type is widened by cuBLASLt: the convert joins
  // the gemm (Note [bf16 GELU epilogue] in mixed_precision.h).
  const Instruction* bias = b->operand(0);
  if (ir::IsWideningConvert(bias) && p.Claimable(bias) &&
      AllUsesIn(p, bias, p.groups()[g].members) && p.TryAdd(g, bias)) {
    bias = bias->operand(0);
  }
  e.bias = bias;
  cur = AbsorbConverts(p, g, u);
  return before;
}

// A residual after `cur`, not after an activation (cuBLASLt adds C before
// it): add(cur, r), r of cur's shape read from outside. Writes it into `e`
// and advances `cur`; returns the point before the add, or nullopt.
std::optional<Checkpoint> AbsorbResidual(Planner& p, int g, const Instruction*& cur,
                                         GemmEpilogueValues& e) {
  const Instruction* u = SingleUser(p, cur);
  if (e.activation != ir::GemmActivation::kNone || u == nullptr || u->opcode() != Opcode::kAdd ||
      !p.Claimable(u)) {
    return std::nullopt;
  }
  const Instruction* r = OtherOperand(u, cur);
  if (r->shape() != cur->shape() || r == cur || p.IsFree(r) || p.group_of(r) == g) {
    return std::nullopt;
  }
  Checkpoint before{p.groups()[g].members, cur, e};
  if (!p.TryAdd(g, u)) return std::nullopt;
  e.residual = r;
  cur = AbsorbConverts(p, g, u);
  return before;
}

// The rest of the epilogue after `cur`, D so far: a 2-D transpose of the
// bare dot `d`, or a widening of it left to its consumers. Writes D into `e`.
void AbsorbResultLayout(Planner& p, int g, const Instruction* d, const Instruction* cur,
                        GemmEpilogueValues& e) {
  e.d = cur;
  const Instruction* u = SingleUser(p, cur);
  if (cur == d && d->shape().rank() == 2 && u != nullptr && u->opcode() == Opcode::kTranspose &&
      p.Claimable(u) && p.TryAdd(g, u)) {
    e.transposed = true;
    e.d = AbsorbConverts(p, g, u);
  }
  if (ir::IsWideningConvert(cur) && cur->operand(0) == d && WidenedByConsumers(p, cur)) {
    InstSet members = p.groups()[g].members;
    members.erase(cur);
    p.ShrinkTo(g, members);
    e.d = d;
  }
}

// Whether D = `cur` with the bias and residual of `e` keeps cuBLASLt's
// limits (Note [cuBLASLt epilogue limits]).
bool KeepsLimits(const Instruction* cur, const GemmEpilogueValues& e) {
  analysis::GemmEpilogueBuffers buffers{.d = cur->shape()};
  if (e.bias != nullptr) buffers.bias = e.bias->shape().dtype();
  if (e.residual != nullptr) buffers.residual = e.residual->shape().dtype();
  return !analysis::BrokenGemmEpilogueLimit(buffers).has_value();
}

}  // namespace

void FuseGemms(Planner& p) {
  for (const Instruction* d : p.WithOpcode(Opcode::kDot)) {
    if (!p.Claimable(d)) continue;
    int g = p.NewGroup(FusionKind::kGemm, d, {d});
    AbsorbOperandLayouts(p, g, d);
    GemmEpilogueValues e;
    // Bias gradient: a column sum of an operand over its contracting dims.
    if (d->attrs().dot.lhs_batch.empty()) FuseBiasGradients(p, g, d, e);
    // Epilogue: converts, bias, activation, residual, converts; or a 2-D
    // transpose.
    const Instruction* cur = AbsorbConverts(p, g, d);
    const std::optional<Checkpoint> before_bias = AbsorbBias(p, g, cur, e);
    cur = AbsorbActivation(p, g, cur, before_bias.has_value(), e);
    const std::optional<Checkpoint> before_residual = AbsorbResidual(p, g, cur, e);
    // Note [bias of D's type]: cuBLASLt's bias and C have D's type (Note
    // [cuBLASLt epilogue limits]). A residual whose sum is stored in another
    // type stays outside; an f32 bias before a bf16 result (GELU then a
    // bf16 store) stays outside too, with the rest of the epilogue after it.
    if (before_residual && !KeepsLimits(cur, e)) Restore(p, g, *before_residual, cur, e);
    if (before_bias && !KeepsLimits(cur, e)) {
      Restore(p, g, *before_bias, cur, e);
      e.d = cur;
    } else {
      AbsorbResultLayout(p, g, d, cur, e);
    }
    p.groups()[g].gemm_epilogue = e;
  }
}

}  // namespace gptc::passes::fusion_internal
