#include "compiler/ir/patterns.h"

namespace gptc::ir {

bool IsRowReduce(const Instruction& inst) {
  if (inst.opcode() != Opcode::kReduce) return false;
  const int64_t rank = inst.operand(0)->shape().rank();
  return rank >= 2 && inst.attrs().dimensions == std::vector<int64_t>{rank - 1};
}

void BindComposites(const Computation& c, CompositeBindings& bindings) {
  for (const auto& inst : c.instructions()) {
    const Computation* d = inst->called_computation();
    if (inst->opcode() != Opcode::kSoftmaxCrossEntropy || d == nullptr) continue;
    std::vector<Instruction*> params = d->parameters();
    for (size_t i = 0; i < params.size() && i < static_cast<size_t>(inst->operand_count()); ++i)
      bindings[params[i]] = inst->operand(i);
    BindComposites(*d, bindings);
  }
}

bool DependsOnAny(const Instruction* inst, const std::set<const Instruction*>& targets,
                  std::map<const Instruction*, bool>& memo, const CompositeBindings* bindings) {
  if (targets.count(inst)) return true;
  if (auto it = memo.find(inst); it != memo.end()) return it->second;
  std::vector<const Instruction*> producers(inst->operands().begin(), inst->operands().end());
  if (bindings != nullptr) {
    if (auto it = bindings->find(inst); it != bindings->end()) producers.push_back(it->second);
    if (inst->opcode() == Opcode::kSoftmaxCrossEntropy && inst->called_computation())
      producers.push_back(inst->called_computation()->root());
  }
  bool result = false;
  for (const Instruction* op : producers) {
    if (DependsOnAny(op, targets, memo, bindings)) {
      result = true;
      break;
    }
  }
  memo[inst] = result;
  return result;
}

}  // namespace gptc::ir
