#include "compiler/ir/patterns.h"

#include <algorithm>

namespace gptc::ir {

bool IsWideningConvert(const Instruction* inst) {
  return inst->opcode() == Opcode::kConvert &&
         DTypeBytes(inst->shape().dtype()) > DTypeBytes(inst->operand(0)->shape().dtype());
}

bool IsNarrowingConvert(const Instruction* inst) {
  return inst->opcode() == Opcode::kConvert &&
         DTypeBytes(inst->shape().dtype()) < DTypeBytes(inst->operand(0)->shape().dtype());
}

const Instruction* SoleUser(const Instruction* inst) {
  return inst->users().size() == 1 ? inst->users()[0] : nullptr;
}

const Shape& FusionOutputShape(const Instruction& fusion, int64_t i) {
  const Shape& s = fusion.shape();
  return s.is_tuple() ? s.tuple_elements()[i] : s;
}

const Instruction* FusionOutput(const Instruction& fusion, int64_t i) {
  const Instruction* root = fusion.called_computation()->root();
  return root->opcode() == Opcode::kTuple ? root->operand(i) : root;
}

bool IsSplat(const Instruction* inst, double v) { return SplatValue(inst) == v; }

std::optional<double> SplatValue(const Instruction* inst) {
  while (inst->opcode() == Opcode::kBroadcast) inst = inst->operand(0);
  if (inst->opcode() != Opcode::kConstant) return std::nullopt;
  const std::vector<double>& values = inst->attrs().literal;
  if (values.empty() ||
      !std::all_of(values.begin(), values.end(), [&](double x) { return x == values[0]; })) {
    return std::nullopt;
  }
  return values[0];
}

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

std::vector<const Instruction*> ZeroPadTiles(const Instruction* out,
                                             std::vector<const Instruction*>* adds) {
  std::vector<const Instruction*> pads, stack = {out};
  while (!stack.empty()) {
    const Instruction* x = stack.back();
    stack.pop_back();
    if (x->opcode() == Opcode::kAdd) {
      if (adds != nullptr) adds->push_back(x);
      stack.push_back(x->operand(0));
      stack.push_back(x->operand(1));
      continue;
    }
    const Instruction* value = x->opcode() == Opcode::kPad ? x->operand(1) : nullptr;
    if (value == nullptr || value->opcode() != Opcode::kConstant ||
        value->attrs().literal.size() != 1 || value->attrs().literal[0] != 0) {
      return {};
    }
    pads.push_back(x);
  }
  if (pads.size() < 2) return {};
  // Disjoint: every two boxes are apart in some dim; covering: their
  // volumes add up to the output's.
  int64_t volume = 0;
  for (size_t i = 0; i < pads.size(); ++i) {
    volume += pads[i]->operand(0)->shape().num_elements();
    for (size_t j = 0; j < i; ++j) {
      bool apart = false;
      for (int64_t d = 0; d < out->shape().rank() && !apart; ++d) {
        const int64_t lo_i = pads[i]->attrs().pad_low[d], lo_j = pads[j]->attrs().pad_low[d];
        apart = lo_i + pads[i]->operand(0)->shape().dim(d) <= lo_j ||
                lo_j + pads[j]->operand(0)->shape().dim(d) <= lo_i;
      }
      if (!apart) return {};
    }
  }
  if (volume != out->shape().num_elements()) return {};
  return pads;
}

}  // namespace gptc::ir
