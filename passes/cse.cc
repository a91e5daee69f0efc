#include "passes/cse.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
#include <unordered_set>
#include <vector>

namespace gptc::passes {

namespace {

using ir::Instruction;
using ir::Opcode;

size_t Combine(size_t seed, size_t value) {
  return seed ^ (value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}

bool IsCommutative(Opcode opcode) { return opcode == Opcode::kAdd || opcode == Opcode::kMul; }

// Never merged: see cse.h.
bool IsMergeable(const Instruction& inst) {
  return inst.opcode() != Opcode::kParameter && !ir::IsCollective(inst.opcode());
}

// The operands as CSE compares them: add(a, b) and add(b, a) are the same value.
std::vector<const Instruction*> CanonicalOperands(const Instruction& inst) {
  std::vector<const Instruction*> ops(inst.operands().begin(), inst.operands().end());
  if (IsCommutative(inst.opcode())) std::sort(ops.begin(), ops.end(), std::less<>());
  return ops;
}

// Bitwise, so that 0 and -0 stay apart and equal nans still merge.
bool SameLiteral(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](double x, double y) {
           return std::bit_cast<uint64_t>(x) == std::bit_cast<uint64_t>(y);
         });
}

struct ValueHash {
  size_t operator()(const Instruction* inst) const {
    size_t h = static_cast<size_t>(inst->opcode());
    h = Combine(h, static_cast<size_t>(inst->shape().dtype()));
    for (int64_t d : inst->shape().dims()) h = Combine(h, std::hash<int64_t>()(d));
    for (const Instruction* op : CanonicalOperands(*inst)) {
      h = Combine(h, std::hash<const Instruction*>()(op));
    }
    h = Combine(h, std::hash<const ir::Computation*>()(inst->called_computation()));
    const ir::Attrs& attrs = inst->attrs();
    h = Combine(h, std::hash<int64_t>()(attrs.index));
    for (int64_t d : attrs.dimensions) h = Combine(h, std::hash<int64_t>()(d));
    for (double v : attrs.literal)
      h = Combine(h, std::hash<uint64_t>()(std::bit_cast<uint64_t>(v)));
    return h;
  }
};

struct SameValue {
  bool operator()(const Instruction* a, const Instruction* b) const {
    if (a->opcode() != b->opcode() || a->shape() != b->shape() ||
        a->called_computation() != b->called_computation() ||
        CanonicalOperands(*a) != CanonicalOperands(*b)) {
      return false;
    }
    // A constant's value is its only attribute.
    if (a->opcode() == Opcode::kConstant)
      return SameLiteral(a->attrs().literal, b->attrs().literal);
    return a->attrs() == b->attrs();
  }
};

bool RunOnComputation(ir::Computation& computation) {
  // Walking in order replaces every operand before its users are looked up,
  // so equal operands are already the same instruction when users compare.
  std::vector<Instruction*> order;
  for (const auto& inst : computation.instructions()) order.push_back(inst.get());
  std::unordered_set<Instruction*, ValueHash, SameValue> seen;
  std::vector<Instruction*> merged;
  for (Instruction* inst : order) {
    if (!IsMergeable(*inst)) continue;
    auto [it, inserted] = seen.insert(inst);
    if (inserted) continue;
    inst->ReplaceAllUsesWith(*it);
    merged.push_back(inst);
  }
  for (auto it = merged.rbegin(); it != merged.rend(); ++it) computation.RemoveInstruction(*it);
  return !merged.empty();
}

}  // namespace

StatusOr<bool> Cse::Run(ir::Module& module) {
  bool changed = false;
  for (const auto& computation : module.computations()) changed |= RunOnComputation(*computation);
  return changed;
}

}  // namespace gptc::passes
