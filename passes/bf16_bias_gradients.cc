#include "passes/bf16_bias_gradients.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/ir/builder.h"

namespace gptc::passes {

using ir::DType;
using ir::Instruction;
using ir::Opcode;

namespace {

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// The bf16 convert of `x` that a dot reads contracting `dims`, or null.
Instruction* DotReadBf16Copy(const Instruction* x, const std::vector<int64_t>& dims) {
  for (Instruction* c : x->users()) {
    if (c->opcode() != Opcode::kConvert || c->shape().dtype() != DType::kBF16) continue;
    for (const Instruction* d : c->users()) {
      if (d->opcode() != Opcode::kDot) continue;
      const ir::DotDimensions& dot = d->attrs().dot;
      if ((d->operand(0) == c && Sorted(dot.lhs_contracting) == dims) ||
          (d->operand(1) == c && Sorted(dot.rhs_contracting) == dims)) {
        return c;
      }
    }
  }
  return nullptr;
}

// Note [bf16 bias gradients] in one computation.
StatusOr<bool> RewriteComputation(ir::Computation& computation) {
  std::vector<std::pair<Instruction*, Instruction*>> sums;  // (reduce, the bf16 copy)
  for (const auto& inst : computation.instructions()) {
    Instruction* r = inst.get();
    if (r->opcode() != Opcode::kReduce || r->attrs().reduce_kind != ir::ReduceKind::kSum ||
        r->shape().rank() != 1 || r->shape().dtype() != DType::kF32 ||
        r->operand(0)->shape().dtype() != DType::kF32) {
      continue;
    }
    Instruction* copy = DotReadBf16Copy(r->operand(0), Sorted(r->attrs().dimensions));
    if (copy != nullptr) sums.emplace_back(r, copy);
  }
  if (sums.empty()) return false;
  ir::Builder b(&computation);
  // A copy autodiff placed after the sum moves up to the sum: its operand
  // comes before the sum and its users after it.
  std::unordered_map<const Instruction*, Instruction*> hoist;  // widening -> copy
  for (auto [r, copy] : sums) {
    b.set_insertion_point(r);
    b.set_origin(*r);
    ASSIGN_OR_RETURN(Instruction * wide,
                     b.Build(Opcode::kConvert, {copy}, {}, copy->shape().WithDType(DType::kF32),
                             nullptr, fmt::format("{}.f32", copy->name())));
    r->ReplaceOperandWith(0, wide);
    hoist[wide] = copy;
  }
  std::vector<Instruction*> order;
  std::unordered_set<const Instruction*> placed;
  for (const auto& inst : computation.instructions()) {
    Instruction* x = inst.get();
    if (placed.contains(x)) continue;
    if (auto it = hoist.find(x); it != hoist.end() && !placed.contains(it->second)) {
      order.push_back(it->second);
      placed.insert(it->second);
    }
    order.push_back(x);
    placed.insert(x);
  }
  computation.ReorderInstructions(order);
  return true;
}

}  // namespace

StatusOr<bool> Bf16BiasGradients::Run(ir::Module& module) {
  bool changed = false;
  for (const auto& computation : module.computations()) {
    ASSIGN_OR_RETURN(bool c, RewriteComputation(*computation));
    changed |= c;
  }
  return changed;
}

}  // namespace gptc::passes
