#include "compiler/ir/patterns.h"

namespace gptc::ir {

bool IsRowReduce(const Instruction& inst) {
  if (inst.opcode() != Opcode::kReduce) return false;
  const int64_t rank = inst.operand(0)->shape().rank();
  return rank >= 2 && inst.attrs().dimensions == std::vector<int64_t>{rank - 1};
}

}  // namespace gptc::ir
