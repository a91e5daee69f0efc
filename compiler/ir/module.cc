#include "compiler/ir/module.h"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

namespace gptc::ir {

Computation* Module::AddComputation(std::unique_ptr<Computation> computation) {
  computation->parent_ = this;
  computations_.push_back(std::move(computation));
  return computations_.back().get();
}

Computation* Module::AddComputationBefore(std::unique_ptr<Computation> computation,
                                          const Computation* before) {
  auto it = std::find_if(computations_.begin(), computations_.end(),
                         [&](const auto& c) { return c.get() == before; });
  computation->parent_ = this;
  return computations_.insert(it, std::move(computation))->get();
}

void Module::AddComputationsBefore(std::vector<std::unique_ptr<Computation>> computations,
                                   const Computation* before) {
  auto it = std::find_if(computations_.begin(), computations_.end(),
                         [&](const auto& c) { return c.get() == before; });
  for (auto& c : computations) c->parent_ = this;
  computations_.insert(it, std::make_move_iterator(computations.begin()),
                       std::make_move_iterator(computations.end()));
}

Computation* Module::AddComputation(std::string_view name) {
  std::string unique(name);
  for (int suffix = 1; FindComputation(unique) != nullptr; ++suffix) {
    unique = fmt::format("{}.{}", name, suffix);
  }
  return AddComputation(std::make_unique<Computation>(unique));
}

Computation* Module::FindComputation(std::string_view name) const {
  for (const auto& c : computations_) {
    if (c->name() == name) return c.get();
  }
  return nullptr;
}

int64_t Module::RemoveUnreachableComputations() {
  std::unordered_set<const Computation*> live;
  std::function<void(const Computation*)> visit = [&](const Computation* c) {
    if (c == nullptr || !live.insert(c).second) return;
    for (const auto& inst : c->instructions()) visit(inst->called_computation());
  };
  visit(entry_);
  int64_t before = static_cast<int64_t>(computations_.size());
  std::erase_if(computations_, [&](const auto& c) { return !live.contains(c.get()); });
  return before - static_cast<int64_t>(computations_.size());
}

std::unique_ptr<Module> Module::Clone() const {
  auto clone = std::make_unique<Module>(name_);
  clone->set_source_file(source_file_);
  std::unordered_map<const Computation*, Computation*> computation_map;
  for (const auto& c : computations_) {
    Computation* nc = clone->AddComputation(std::make_unique<Computation>(c->name()));
    computation_map[c.get()] = nc;
    std::unordered_map<const Instruction*, Instruction*> inst_map;
    for (const auto& inst : c->instructions()) {
      std::vector<Instruction*> operands;
      for (Instruction* op : inst->operands()) operands.push_back(inst_map.at(op));
      auto ni = std::make_unique<Instruction>(inst->name(), inst->opcode(), inst->shape(),
                                              std::move(operands), inst->attrs());
      ni->set_metadata(inst->metadata());
      ni->set_role(inst->role());
      ni->set_location(inst->line(), inst->column());
      if (inst->called_computation() != nullptr) {
        ni->set_called_computation(computation_map.at(inst->called_computation()));
      }
      inst_map[inst.get()] = nc->AddInstruction(std::move(ni));
    }
    if (c->root() != nullptr) nc->set_root(inst_map.at(c->root()));
  }
  if (entry_ != nullptr) clone->set_entry(computation_map.at(entry_));
  return clone;
}

}  // namespace gptc::ir
