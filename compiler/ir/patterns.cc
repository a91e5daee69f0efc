#include "compiler/ir/patterns.h"

#include <algorithm>
#include <utility>

namespace gptc::ir {

bool IsRowReduce(const Instruction& inst) {
  if (inst.opcode() != Opcode::kReduce) return false;
  const int64_t rank = inst.operand(0)->shape().rank();
  return rank >= 2 && inst.attrs().dimensions == std::vector<int64_t>{rank - 1};
}

bool IsLastDimZeroPad(const Instruction& inst) {
  if (inst.opcode() != Opcode::kPad) return false;
  const Instruction* value = inst.operand(1);
  if (value->opcode() != Opcode::kConstant || value->attrs().literal != std::vector<double>{0.0}) {
    return false;
  }
  for (int64_t d = 0; d + 1 < inst.shape().rank(); ++d) {
    if (inst.attrs().pad_low[d] != 0 || inst.attrs().pad_high[d] != 0) return false;
  }
  return true;
}

bool PadsTileLastDim(const std::vector<const Instruction*>& pads) {
  if (pads.empty()) return false;
  const Shape& in = pads[0]->operand(0)->shape();
  const int64_t last = in.rank() - 1;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const Instruction* p : pads) {
    if (p->operand(0)->shape().dims() != in.dims() || p->shape() != pads[0]->shape()) return false;
    ranges.push_back({p->attrs().pad_low[last], p->attrs().pad_low[last] + in.dim(last)});
  }
  std::sort(ranges.begin(), ranges.end());
  int64_t next = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != next) return false;
    next = end;
  }
  return next == pads[0]->shape().dim(last);
}

}  // namespace gptc::ir
