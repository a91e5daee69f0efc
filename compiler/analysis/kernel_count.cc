#include "compiler/analysis/kernel_count.h"

#include <algorithm>
#include <unordered_set>
#include <vector>

namespace gptc::analysis {

bool IsKernel(const ir::Instruction& inst) {
  switch (inst.opcode()) {
    case ir::Opcode::kParameter:
    case ir::Opcode::kConstant:
    case ir::Opcode::kTuple:
    case ir::Opcode::kGetTupleElement:
    case ir::Opcode::kReshape:  // a view of its operand (Note [aliases] in buffer_assignment.h)
      return false;
    default:
      return true;
  }
}

int64_t FirstLaunchingReader(
    const ir::Instruction& value,
    const std::function<std::optional<int64_t>(const ir::Instruction&)>& launch_position,
    int64_t end) {
  int64_t first = end;
  std::vector<const ir::Instruction*> stack(value.users().begin(), value.users().end());
  std::unordered_set<const ir::Instruction*> seen;
  while (!stack.empty()) {
    const ir::Instruction* user = stack.back();
    stack.pop_back();
    if (!seen.insert(user).second) continue;
    if (const std::optional<int64_t> at = launch_position(*user)) {
      first = std::min(first, *at);
    } else {
      stack.insert(stack.end(), user->users().begin(), user->users().end());
    }
  }
  return first;
}

std::map<std::string, int64_t> CountKernels(const ir::Module& module) {
  std::map<std::string, int64_t> counts;
  for (const auto& inst : module.entry()->instructions()) {
    if (!IsKernel(*inst)) continue;
    if (inst->opcode() == ir::Opcode::kFusion) {
      ++counts[std::string(ir::FusionKindName(inst->attrs().fusion_kind))];
    } else {
      ++counts[std::string(ir::OpcodeName(inst->opcode()))];
    }
  }
  return counts;
}

std::map<int64_t, int64_t> KernelsPerLayer(const ir::Module& module) {
  std::map<int64_t, int64_t> per_layer;
  for (const auto& inst : module.entry()->instructions()) {
    if (!IsKernel(*inst)) continue;
    const ir::Role role = inst->role();
    if (role.layer < 0 || role.optimizer()) continue;  // the optimizer's are per parameter
    ++per_layer[role.layer];
  }
  return per_layer;
}

}  // namespace gptc::analysis
