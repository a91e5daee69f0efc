#include "passes/dce.h"

#include <vector>

namespace gptc::passes {

namespace {
bool IsRemovable(const ir::Instruction& inst) {
  return inst.users().empty() && inst.parent()->root() != &inst &&
         inst.opcode() != ir::Opcode::kParameter && !ir::IsCollective(inst.opcode());
}
}  // namespace

StatusOr<bool> Dce::Run(ir::Module& module) {
  bool changed = false;
  for (const auto& computation : module.computations()) {
    // Walking backwards frees the operands of a removed instruction before
    // they are visited, so one sweep removes whole dead chains.
    std::vector<ir::Instruction*> order;
    for (const auto& inst : computation->instructions()) order.push_back(inst.get());
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      if (!IsRemovable(**it)) continue;
      computation->RemoveInstruction(*it);
      changed = true;
    }
  }
  changed |= module.RemoveUnreachableComputations() > 0;
  return changed;
}

}  // namespace gptc::passes
