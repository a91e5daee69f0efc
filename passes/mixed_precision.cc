#include "passes/mixed_precision.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/analysis/gelu_epilogue.h"
#include "compiler/ir/builder.h"
#include "passes/autodiff_attention.h"

namespace gptc::passes {

using ir::DType;
using ir::Instruction;
using ir::Opcode;

namespace {

// Whether every use of `dot` is the logits operand of a softmax-cross-entropy.
bool FeedsOnlyCrossEntropy(const Instruction* dot) {
  if (dot->users().empty() || dot->parent()->root() == dot) return false;
  for (const Instruction* u : dot->users()) {
    if (u->opcode() != Opcode::kSoftmaxCrossEntropy || u->operand(0) != dot) return false;
    for (int64_t i = 1; i < u->operand_count(); ++i) {
      if (u->operand(i) == dot) return false;
    }
  }
  return true;
}

// Note [bf16 logits]: the lm_head result is the largest tensor of the step
// ([B, T, V]); it is stored in bf16 and widened back inside the loss:
//   %l = f32[B,T,V] dot(%x.bf16, %w.bf16)      %l.bf16 = bf16[B,T,V] dot(%x.bf16, %w.bf16)
//   %ce = softmax-cross-entropy(%l, %t)   =>   %l = f32[B,T,V] convert(%l.bf16)
//                                              %ce = softmax-cross-entropy(%l, %t)
// The cross-entropy math stays f32 (fusion puts the widening convert in the
// cross_entropy kernel), and autodiff's convert rule narrows dlogits to
// bf16, the dtype the backward dots take anyway.
Status StoreLogitsInBf16(ir::Builder& b, Instruction* dot) {
  if (!FeedsOnlyCrossEntropy(dot)) return Status::Ok();
  ir::Computation* entry = dot->parent();
  b.set_insertion_point(dot);
  b.set_origin(*dot);
  ASSIGN_OR_RETURN(Instruction * narrow,
                   b.Build(Opcode::kDot, {dot->operand(0), dot->operand(1)}, dot->attrs(),
                           dot->shape().WithDType(DType::kBF16), nullptr,
                           fmt::format("{}.bf16", dot->name())));
  std::string name = dot->name();
  ASSIGN_OR_RETURN(Instruction * widen,
                   b.Build(Opcode::kConvert, {narrow}, {}, dot->shape(), nullptr,
                           fmt::format("{}.f32", name)));
  dot->ReplaceAllUsesWith(widen);
  entry->RemoveInstruction(dot);
  return Status::Ok();
}

// `dot`'s single user %y = f32 add(%dot, broadcast(%b)) with %b an f32
// vector along the last dim, which is a multiple of 8 (cuBLASLt's leading
// dimensions), or nothing.
struct BiasAdd {
  Instruction* add = nullptr;
  int64_t bias_side = 0;  // the operand that is the broadcast
  Instruction* broadcast = nullptr;
};
std::optional<BiasAdd> MatchBiasAdd(Instruction* dot) {
  if (dot->users().size() != 1) return std::nullopt;
  BiasAdd m;
  m.add = dot->users()[0];
  if (m.add->opcode() != Opcode::kAdd || m.add->shape().dtype() != DType::kF32) return std::nullopt;
  m.bias_side = m.add->operand(0) == dot ? 1 : 0;
  m.broadcast = m.add->operand(m.bias_side);
  const int64_t rank = m.add->shape().rank();
  if (m.broadcast->opcode() != Opcode::kBroadcast || m.broadcast->operand(0)->shape().rank() != 1 ||
      m.broadcast->attrs().dimensions != std::vector<int64_t>{rank - 1} ||
      m.broadcast->operand(0)->shape().dtype() != DType::kF32 ||
      m.add->shape().dims().back() % 8 != 0) {
    return std::nullopt;
  }
  return m;
}

// The role of `x`'s narrowing for `user`: a parameter's is its parameter
// cast, anything else is part of `user`'s computation.
ir::Role CastRole(const Instruction* x, const Instruction& user) {
  if (x->opcode() != Opcode::kParameter) return user.role();
  return {ir::Phase::kParamCast, user.role().layer};
}

// %y = add(%dot, broadcast(%b)) => add(%dot, broadcast(convert<f32>(convert<bf16>(%b)))):
// the bias of D's type that cuBLASLt's bias epilogues take.
Status RoundBiasToBf16(ir::Builder& b, const BiasAdd& m) {
  Instruction* bias = m.broadcast->operand(0);
  b.set_origin(*m.add);
  b.set_insertion_point(m.broadcast);
  b.set_role(CastRole(bias, *m.add));
  ASSIGN_OR_RETURN(Instruction * bias_bf16,
                   b.Build(Opcode::kConvert, {bias}, {}, bias->shape().WithDType(DType::kBF16),
                           nullptr, fmt::format("{}.bf16", bias->name())));
  b.set_role(m.add->role());
  ASSIGN_OR_RETURN(Instruction * bias_f32, b.Build(Opcode::kConvert, {bias_bf16}, {}, bias->shape(),
                                                   nullptr, fmt::format("{}.f32", bias->name())));
  ASSIGN_OR_RETURN(Instruction * widened, b.Build(Opcode::kBroadcast, {bias_f32},
                                                  m.broadcast->attrs(), m.broadcast->shape()));
  m.add->ReplaceOperandWith(m.bias_side, widened);
  if (m.broadcast->users().empty()) m.add->parent()->RemoveInstruction(m.broadcast);
  return Status::Ok();
}

// Note [bf16 GELU epilogue] (mixed_precision.h): for
//   %pre = f32 add(%fc, broadcast(%b))    %fc an f32 dot, %b rank 1 along the last dim
//   %act = GELU(%pre)                     used by dots alone (stored in bf16 anyway)
// the bias and the pre-activation get bf16 copies and the GELU reads the
// widened one:
//   %b.bf16 = convert(%b); %b.f32 = convert(%b.bf16)
//   %pre = add(%fc, broadcast(%b.f32))
//   %pre.bf16 = convert(%pre); %pre.f32 = convert(%pre.bf16)
//   %act = GELU(%pre.f32)
// Nothing happens unless every use of %pre is the GELU's and the last dim is
// a multiple of 8 (cuBLASLt's aux leading dimension).
StatusOr<bool> StoreGeluInputInBf16(ir::Builder& b, Instruction* dot,
                                    const std::unordered_set<const Instruction*>& dots) {
  const std::optional<BiasAdd> bias_add = MatchBiasAdd(dot);
  if (!bias_add) return false;
  Instruction* pre = bias_add->add;
  std::optional<analysis::GeluRegion> gelu = analysis::MatchGelu(pre);
  if (!gelu || gelu->sink->users().empty()) return false;
  for (const Instruction* u : pre->users()) {
    if (std::find(gelu->ops.begin(), gelu->ops.end(), u) == gelu->ops.end()) return false;
  }
  for (const Instruction* u : gelu->sink->users()) {
    if (!dots.contains(u)) return false;
  }
  RETURN_IF_ERROR(RoundBiasToBf16(b, *bias_add));
  b.set_insertion_point(const_cast<Instruction*>(gelu->ops.front()));
  ASSIGN_OR_RETURN(Instruction * pre_bf16,
                   b.Build(Opcode::kConvert, {pre}, {}, pre->shape().WithDType(DType::kBF16),
                           nullptr, fmt::format("{}.bf16", pre->name())));
  ASSIGN_OR_RETURN(Instruction * pre_f32, b.Build(Opcode::kConvert, {pre_bf16}, {}, pre->shape(),
                                                  nullptr, fmt::format("{}.f32", pre->name())));
  for (const Instruction* op : gelu->ops) {
    auto* m = const_cast<Instruction*>(op);
    for (int64_t i = 0; i < m->operand_count(); ++i) {
      if (m->operand(i) == pre) m->ReplaceOperandWith(i, pre_f32);
    }
  }
  return true;
}

// The layout ops (slices, reshapes, transposes) over `y` and, at their ends,
// the q, k, v operands of bf16 attention ops they feed; false when a use of
// `y` or of one of them is anything else.
bool FeedsOnlyBf16AttentionOperands(const Instruction* y, std::vector<Instruction*>& layout) {
  if (y->users().empty() || y->parent()->root() == y) return false;
  for (Instruction* u : y->users()) {
    const Opcode o = u->opcode();
    if (o == Opcode::kSlice || o == Opcode::kReshape || o == Opcode::kTranspose) {
      if (std::find(layout.begin(), layout.end(), u) != layout.end()) continue;
      layout.push_back(u);
      if (!FeedsOnlyBf16AttentionOperands(u, layout)) return false;
      continue;
    }
    if ((o != Opcode::kAttention && o != Opcode::kAttentionLse) ||
        u->attrs().grad_dtype != DType::kBF16 || y->shape().rank() != 4) {
      return false;
    }
    for (int64_t i = 0; i < u->operand_count(); ++i) {
      if (u->operand(i) == y && i > 2) return false;
    }
  }
  return true;
}

// Note [bf16 attention projection] (mixed_precision.h): for
//   %y = f32 add(%dot, broadcast(%b))     %dot an f32 dot, %b rank 1 along the last dim
// read only through slices, reshapes and transposes as q, k, v of bf16
// attention ops, the bias and %y get bf16 copies, and the layout ops read %y
// in bf16, widened where the attention takes them:
//   %b.bf16 = convert(%b); %b.f32 = convert(%b.bf16)
//   %y = add(%dot, broadcast(%b.f32))
//   %y.bf16 = convert(%y)
//   %q = f32 convert(transpose(reshape(slice(%y.bf16))))   (the chain in bf16)
StatusOr<bool> StoreAttentionProjectionInBf16(ir::Builder& b, Instruction* dot) {
  const std::optional<BiasAdd> bias_add = MatchBiasAdd(dot);
  if (!bias_add) return false;
  Instruction* y = bias_add->add;
  // Users before users of theirs: each op's bf16 copy is built after its
  // operand's.
  std::vector<Instruction*> layout;
  if (!FeedsOnlyBf16AttentionOperands(y, layout) || layout.empty()) return false;
  RETURN_IF_ERROR(RoundBiasToBf16(b, *bias_add));
  ir::Computation* entry = dot->parent();
  const auto& insts = entry->instructions();
  for (size_t i = 0; i + 1 < insts.size(); ++i) {
    if (insts[i].get() == y) b.set_insertion_point(insts[i + 1].get());  // right after %y
  }
  ASSIGN_OR_RETURN(Instruction * y_bf16,
                   b.Build(Opcode::kConvert, {y}, {}, y->shape().WithDType(DType::kBF16), nullptr,
                           fmt::format("{}.bf16", y->name())));
  // Each layout op in bf16 over its operand's bf16 copy; the attention ops
  // read the widened end of each chain.
  std::unordered_map<const Instruction*, Instruction*> narrow = {{y, y_bf16}};
  const std::vector<Instruction*>& order = layout;
  for (Instruction* x : order) {
    b.set_insertion_point(x);
    b.set_origin(*x);
    ASSIGN_OR_RETURN(narrow[x], b.Build(x->opcode(), {narrow.at(x->operand(0))}, x->attrs(),
                                        x->shape().WithDType(DType::kBF16), nullptr,
                                        fmt::format("{}.bf16", x->name())));
  }
  for (Instruction* x : order) {
    std::vector<Instruction*> readers;
    for (Instruction* u : x->users()) {
      if (u->opcode() == Opcode::kAttention || u->opcode() == Opcode::kAttentionLse) {
        readers.push_back(u);
      }
    }
    if (readers.empty()) continue;
    b.set_insertion_point(readers.front());
    ASSIGN_OR_RETURN(Instruction * wide, b.Build(Opcode::kConvert, {narrow.at(x)}, {}, x->shape(),
                                                 nullptr, fmt::format("{}.f32", x->name())));
    for (Instruction* u : readers) {
      for (int64_t i = 0; i < u->operand_count(); ++i) {
        if (u->operand(i) == x) u->ReplaceOperandWith(i, wide);
      }
    }
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if ((*it)->users().empty()) entry->RemoveInstruction(*it);
  }
  return true;
}

}  // namespace

StatusOr<bool> MixedPrecision::Run(ir::Module& module) {
  if (options_.policy == PrecisionPolicy::kF32) return false;
  ir::Computation* entry = module.entry();
  if (entry == nullptr) return Error("mixed-precision: module {} has no entry", module.name());

  // Only dots of the entry: dots inside called computations (the attention
  // decomposition) belong to composites that compute in f32 by design.
  std::vector<Instruction*> dots;
  bool changed = false;
  for (const auto& inst : entry->instructions()) {
    if (inst->opcode() == Opcode::kDot && inst->operand(0)->shape().dtype() == DType::kF32 &&
        inst->operand(1)->shape().dtype() == DType::kF32) {
      dots.push_back(inst.get());
    }
    // Note [bf16 attention backward] and Note [bf16 attention].
    if (inst->opcode() == Opcode::kAttention && inst->shape().dtype() == DType::kF32 &&
        !inst->attrs().grad_dtype) {
      ASSIGN_OR_RETURN(ir::Computation * rounded,
                       autodiff::RoundedAttentionDecomposition(entry, *inst, DType::kBF16));
      inst->set_called_computation(rounded);
      inst->mutable_attrs().grad_dtype = DType::kBF16;
      changed = true;
    }
  }
  if (dots.empty()) return changed;

  // Note [bf16 GELU epilogue]: before the dots' operands are converted, while
  // the GELU's users are still the dots themselves. Note [bf16 attention
  // projection]: after the attention ops have their grad_dtype.
  ir::Builder b(entry);
  const std::unordered_set<const Instruction*> dot_set(dots.begin(), dots.end());
  for (Instruction* dot : dots) {
    ASSIGN_OR_RETURN(bool stored, StoreGeluInputInBf16(b, dot, dot_set));
    ASSIGN_OR_RETURN(bool projected, StoreAttentionProjectionInBf16(b, dot));
    changed |= stored || projected;
  }

  // f32 value -> its bf16 copy, built before the first dot that needs it
  // (dots are visited in execution order) and shared by later ones.
  std::unordered_map<Instruction*, Instruction*> bf16_of;
  for (Instruction* dot : dots) {
    for (int64_t i = 0; i < 2; ++i) {
      Instruction* x = dot->operand(i);
      Instruction*& converted = bf16_of[x];
      if (converted == nullptr) {
        b.set_insertion_point(dot);
        b.set_origin(*dot);
        b.set_role(CastRole(x, *dot));
        ASSIGN_OR_RETURN(converted,
                         b.Build(Opcode::kConvert, {x}, {}, x->shape().WithDType(DType::kBF16),
                                 nullptr, fmt::format("{}.bf16", x->name())));
      }
      dot->ReplaceOperandWith(i, converted);
    }
    // The result dtype stays f32 (f32 accumulation); nothing to change.
  }
  for (Instruction* dot : dots) {
    RETURN_IF_ERROR(StoreLogitsInBf16(b, dot));
  }
  return true;
}

}  // namespace gptc::passes
