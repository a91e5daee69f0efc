#include "compiler/program/program.h"

namespace gptc::program {

std::string_view SlotRoleName(SlotRole role) {
  switch (role) {
    case SlotRole::kParam: return "param";
    case SlotRole::kAdamM: return "adam_m";
    case SlotRole::kAdamV: return "adam_v";
    case SlotRole::kGradAcc: return "grad_acc";
    case SlotRole::kTokens: return "tokens";
    case SlotRole::kTargets: return "targets";
    case SlotRole::kData: return "data";
    case SlotRole::kStep: return "step";
    case SlotRole::kLr: return "lr";
    case SlotRole::kLoss: return "loss";
    case SlotRole::kGradNorm: return "grad_norm";
    case SlotRole::kLogits: return "logits";
    case SlotRole::kMask: return "mask";
    case SlotRole::kLossSums: return "loss_sums";
    case SlotRole::kTokenCounts: return "token_counts";
    case SlotRole::kMaster: return "master";
  }
  return "?";
}

std::optional<SlotRole> ParseSlotRole(std::string_view name) {
  for (SlotRole role :
       {SlotRole::kParam, SlotRole::kAdamM, SlotRole::kAdamV, SlotRole::kGradAcc,
        SlotRole::kTokens, SlotRole::kTargets, SlotRole::kData, SlotRole::kStep, SlotRole::kLr,
        SlotRole::kLoss, SlotRole::kGradNorm, SlotRole::kLogits, SlotRole::kMask,
        SlotRole::kLossSums, SlotRole::kTokenCounts, SlotRole::kMaster}) {
    if (SlotRoleName(role) == name) return role;
  }
  return std::nullopt;
}

int64_t ShardElements(int64_t elements, int64_t world_size) {
  return (elements + world_size - 1) / world_size;
}

bool IsShardedRole(SlotRole role, int64_t zero_stage) {
  return zero_stage >= 1 &&
         (role == SlotRole::kAdamM || role == SlotRole::kAdamV || role == SlotRole::kMaster);
}

ir::Shape StateSlotShape(SlotRole role, const ir::Shape& param, int64_t zero_stage,
                         int64_t world_size) {
  if (!IsShardedRole(role, zero_stage)) return param;
  return ir::Shape(ir::DType::kF32, {ShardElements(param.num_elements(), world_size)});
}

namespace {

int64_t FindSlot(const std::vector<Slot>& slots, SlotRole role, int64_t index) {
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].role == role && slots[i].index == index) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace

int64_t EntrySignature::FindInput(SlotRole role, int64_t index) const {
  return FindSlot(inputs, role, index);
}
int64_t EntrySignature::FindOutput(SlotRole role, int64_t index) const {
  return FindSlot(outputs, role, index);
}

std::string_view EntryRoleName(EntryRole role) {
  switch (role) {
    case EntryRole::kTrainStep:
      return "train_step";
    case EntryRole::kAccumulate:
      return "accumulate";
    case EntryRole::kApply:
      return "apply";
    case EntryRole::kLogits:
      return "logits";
    case EntryRole::kEval:
      return "eval";
    case EntryRole::kScore:
      return "score";
  }
  return "?";
}

std::optional<EntryRole> ParseEntryRole(std::string_view name) {
  for (EntryRole role : kEntryRoles) {
    if (EntryRoleName(role) == name) return role;
  }
  return std::nullopt;
}

bool RunsBetweenSteps(EntryRole role) {
  return role == EntryRole::kLogits || role == EntryRole::kEval || role == EntryRole::kScore;
}

const TrainEntry* TrainProgram::Find(EntryRole role) const {
  for (const TrainEntry& e : entries) {
    if (e.role == role) return &e;
  }
  return nullptr;
}

const TrainEntry* TrainProgram::ArenaHost(const TrainEntry& entry) const {
  if (!RunsBetweenSteps(entry.role)) return nullptr;
  return Find(grad_accum > 1 ? EntryRole::kAccumulate : EntryRole::kTrainStep);
}

}  // namespace gptc::program
