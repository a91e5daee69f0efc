// The gemm rule of fusion (passes/gemm_fusion.h); its epilogues that are
// more than a chain after the dot are in gemm_fusion_epilogues.cc.
#include "passes/gemm_fusion.h"

#include <algorithm>
#include <vector>

#include "compiler/analysis/gemm_activations.h"
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

}  // namespace gptc::passes::fusion_internal
