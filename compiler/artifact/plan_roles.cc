#include "compiler/artifact/plan_roles.h"

#include <algorithm>
#include <map>
#include <optional>

namespace gptc::artifact {

namespace {

using ir::Instruction;
using ir::Phase;
using program::BufferCategory;
using program::SlotRole;
using program::ThunkGroup;

bool InBlock(const Instruction& inst) { return inst.role().layer >= 0; }

// The forward and its recomputation: the values the blocks compute in order
// (and what has no phase: tuples, their elements, hand-written IR).
bool ForwardLike(Phase p) {
  return p == Phase::kForward || p == Phase::kRemat || p == Phase::kNone;
}
bool GradientLike(Phase p) { return p == Phase::kGradient || p == Phase::kNone; }

std::optional<BufferCategory> SlotCategory(SlotRole role) {
  switch (role) {
    case SlotRole::kParam:
      return BufferCategory::kParameter;
    case SlotRole::kAdamM:
    case SlotRole::kAdamV:
    case SlotRole::kMaster:  // the f32 weights' shard AdamW updates (ZeRO-1)
      return BufferCategory::kOptimizerState;
    case SlotRole::kGradAcc:
      return BufferCategory::kGradient;
    case SlotRole::kTokens:
    case SlotRole::kTargets:
    case SlotRole::kData:
    case SlotRole::kStep:
    case SlotRole::kLr:
    case SlotRole::kLoss:
    case SlotRole::kGradNorm:
    case SlotRole::kLogits:
    case SlotRole::kMask:
    case SlotRole::kLossSums:
    case SlotRole::kTokenCounts:
      return BufferCategory::kData;
  }
  return std::nullopt;
}

BufferCategory PhaseCategory(Phase p) {
  switch (p) {
    case Phase::kGradient:
      return BufferCategory::kGradient;
    case Phase::kUpdate:
    case Phase::kOptimizer:
      return BufferCategory::kOptimizerState;
    case Phase::kParamCast:
      return BufferCategory::kParameter;
    case Phase::kNone:
    case Phase::kForward:
    case Phase::kRemat:
      break;
  }
  return BufferCategory::kActivation;
}

}  // namespace

ThunkRoles::ThunkRoles(const ir::Computation& entry, const program::EntrySignature& signature) {
  const auto& insts = entry.instructions();
  has_blocks_ = std::any_of(insts.begin(), insts.end(), [](const auto& i) { return InBlock(*i); });
  // Users follow their operands in the entry's order. Only the forward's
  // values lead into the blocks (a recomputation fused with gradient work
  // reads gradients, which come after the head).
  for (auto it = insts.rbegin(); it != insts.rend(); ++it) {
    const Instruction* inst = it->get();
    for (const Instruction* user : inst->users()) {
      if (ForwardLike(user->role().phase) && (InBlock(*user) || into_blocks_.contains(user))) {
        into_blocks_.insert(inst);
        break;
      }
    }
  }
  for (const auto& owned : insts) {
    for (const Instruction* op : owned->operands()) {
      if (GradientLike(op->role().phase) && (InBlock(*op) || out_of_blocks_.contains(op))) {
        out_of_blocks_.insert(owned.get());
        break;
      }
    }
  }
  AddParameters(entry, signature);
}

// Note [plan roles]: an input of one model parameter belongs where the
// parameter does. The entry's parameter slots say each parameter's block
// (the parameter instruction's layer); those of no block before the
// first block's (in the model's parameter order) are the embedding's, the
// others the head's.
void ThunkRoles::AddParameters(const ir::Computation& entry,
                               const program::EntrySignature& signature) {
  const std::vector<ir::Instruction*> params = entry.parameters();
  std::map<int64_t, int32_t> layer_of;  // model parameter index -> its block, or -1
  for (size_t i = 0; i < params.size() && i < signature.inputs.size(); ++i) {
    if (signature.inputs[i].role == SlotRole::kParam) {
      layer_of[signature.inputs[i].index] = params[i]->role().layer;
    }
  }
  int64_t first_block = -1;
  for (const auto& [index, layer] : layer_of) {
    if (layer >= 0) {
      first_block = index;
      break;
    }
  }
  for (size_t i = 0; i < params.size() && i < signature.inputs.size(); ++i) {
    auto it = layer_of.find(signature.inputs[i].index);
    if (signature.inputs[i].index < 0 || it == layer_of.end()) continue;
    program::ThunkRole r{.phase = params[i]->role().phase};
    if (it->second >= 0) {
      r.group = ThunkGroup::kBlock;
      r.layer = it->second;
    } else if (first_block >= 0) {
      r.group = it->first < first_block ? ThunkGroup::kEmbedding : ThunkGroup::kHead;
    }
    of_parameter_[params[i]] = r;
  }
}

program::ThunkRole ThunkRoles::Of(const Instruction& inst) const {
  const ir::Role role = inst.role();
  if (ir::IsCollective(inst.opcode()) && inst.operand_count() == 1) {
    // It belongs where the value it reduces does.
    program::ThunkRole r = Of(*inst.operand(0));
    r.phase = role.phase;
    return r;
  }
  if (auto it = of_parameter_.find(&inst); it != of_parameter_.end()) return it->second;
  program::ThunkRole r{.phase = role.phase};
  if (role.optimizer()) {
    r.group = ThunkGroup::kOptimizer;
  } else if (role.phase == Phase::kParamCast) {
    r.group = ThunkGroup::kParamCast;
  } else if (role.layer >= 0) {
    r.group = ThunkGroup::kBlock;
    r.layer = role.layer;
  } else if (!has_blocks_ || role.phase == Phase::kNone) {
    r.group = ThunkGroup::kOther;
  } else if (role.phase == Phase::kGradient) {
    r.group = out_of_blocks_.contains(&inst) ? ThunkGroup::kEmbedding : ThunkGroup::kHead;
  } else {
    r.group = into_blocks_.contains(&inst) ? ThunkGroup::kEmbedding : ThunkGroup::kHead;
  }
  return r;
}

void SetBufferCategories(const analysis::BufferAssignment& ba, program::EntryPlan& plan) {
  std::map<int64_t, BufferCategory> of_slot;
  for (const auto* slots : {&plan.inputs, &plan.outputs}) {
    for (const program::PlanSlot& s : *slots) {
      std::optional<BufferCategory> c = SlotCategory(s.role);
      if (c && s.slice.buffer >= 0) of_slot.emplace(s.slice.buffer, *c);  // inputs first
    }
  }
  std::map<int64_t, const ir::Instruction*> defining;
  for (const analysis::BufferAssignment::Buffer& b : ba.buffers()) defining[b.id] = b.defining;
  for (program::PlanBuffer& b : plan.buffers) {
    if (auto it = of_slot.find(b.id); it != of_slot.end()) {
      b.category = it->second;
      continue;
    }
    auto it = defining.find(b.id);
    b.category = PhaseCategory(
        it != defining.end() && it->second != nullptr ? it->second->role().phase : Phase::kNone);
  }
}

}  // namespace gptc::artifact
