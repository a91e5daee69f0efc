#include "compiler/ir/computation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <unordered_map>

#include "compiler/support/pointer_index.h"

namespace gptc::ir {

std::vector<Instruction*> Computation::parameters() const {
  std::vector<Instruction*> params;
  for (const auto& inst : instructions_) {
    if (inst->opcode() != Opcode::kParameter) continue;
    int64_t n = inst->attrs().index;
    // Numbers past the instruction count leave a gap the verifier reports;
    // skipping them keeps an unverified computation from sizing a huge vector.
    if (n < 0 || n >= instruction_count()) continue;
    if (static_cast<int64_t>(params.size()) <= n) params.resize(n + 1, nullptr);
    params[n] = inst.get();
  }
  return params;
}

void Computation::IndexNames() {
  if (names_indexed_) return;
  by_name_ = NameIndex();
  by_name_.Reserve(instructions_.size());
  for (const auto& inst : instructions_) by_name_.Insert(inst.get());
  names_indexed_ = true;
}

Instruction* Computation::FindInstruction(std::string_view name) {
  IndexNames();
  return by_name_.Find(name);
}

Instruction* Computation::FindInstruction(std::string_view name) const {
  if (names_indexed_) return by_name_.Find(name);
  for (const auto& inst : instructions_) {
    if (inst->name() == name) return inst.get();
  }
  return nullptr;
}

Instruction* Computation::Adopt(std::unique_ptr<Instruction>& inst) {
  inst->parent_ = this;
  if (names_indexed_) by_name_.Insert(inst.get());
  for (Instruction* op : inst->operands()) op->AddUser(inst.get());
  return inst.get();
}

Instruction* Computation::AddInstruction(std::unique_ptr<Instruction> inst) {
  Instruction* raw = Adopt(inst);
  instructions_.push_back(std::move(inst));
  return raw;
}

Instruction* Computation::InsertInstructionBefore(std::unique_ptr<Instruction> inst,
                                                  Instruction* before) {
  if (before == nullptr) return AddInstruction(std::move(inst));
  Instruction* raw = Adopt(inst);
  auto it = std::find_if(instructions_.begin(), instructions_.end(),
                         [&](const auto& p) { return p.get() == before; });
  assert(it != instructions_.end());
  instructions_.insert(it, std::move(inst));
  return raw;
}

void Computation::RemoveInstruction(Instruction* inst) {
  assert(inst->users().empty() && inst != root_);
  inst->DetachOperands();
  if (names_indexed_) by_name_.Erase(inst->name());
  auto it = std::find_if(instructions_.begin(), instructions_.end(),
                         [&](const auto& p) { return p.get() == inst; });
  assert(it != instructions_.end());
  instructions_.erase(it);
}

void Computation::RemoveInstructions(const std::vector<Instruction*>& insts) {
  // A flat index, not a node-based set: removing most of a 40k-instruction
  // entry (the fusion pass) spent its time allocating and freeing nodes.
  PointerIndex gone(insts.size());
  for (Instruction* inst : insts) {
    assert(inst->users().empty() && inst != root_);
    inst->DetachOperands();
    if (names_indexed_) by_name_.Erase(inst->name());
    gone.Insert(inst);
  }
  std::erase_if(instructions_, [&](const auto& p) { return gone.Find(p.get()) >= 0; });
}

std::vector<std::unique_ptr<Instruction>> Computation::ReleaseInstructions(
    const std::vector<Instruction*>& insts) {
  // Most of the computation leaving (the fusion pass's entry): the index is
  // dropped (the next lookup indexes the names that stay), not each leaving
  // name erased.
  if (insts.size() * 2 > instructions_.size()) {
    by_name_ = NameIndex();
    names_indexed_ = false;
  }
  // `inst`, its parent_ reset: an operand released before it (parent_ reset
  // too) keeps it as a user. Given in this computation's order, operands
  // released in this call come first.
  auto release = [&](Instruction* inst) {
    for (Instruction* op : inst->operands_) {
      if (op->parent_ == this) std::erase(op->users_, inst);
    }
    if (names_indexed_) by_name_.Erase(inst->name());
  };
  std::vector<std::unique_ptr<Instruction>> released;
  released.reserve(insts.size());
  // `insts` in this computation's order (as the fusion pass gives them) are
  // found by comparing pointers in one pass over the order: a second pass
  // reading every instruction missed the caches at each on 40k-instruction
  // graphs.
  size_t next = 0;
  std::erase_if(instructions_, [&](auto& p) {
    if (next == insts.size() || p.get() != insts[next]) return false;
    // Ahead of the sweep (the IR of 40k-instruction graphs outgrows the
    // last-level cache): the instruction, and its operands' user lists.
    if (next + 8 < insts.size()) __builtin_prefetch(insts[next + 8]);
    if (next + 4 < insts.size()) {
      for (Instruction* op : insts[next + 4]->operands_) __builtin_prefetch(op->users_.data());
    }
    Instruction* inst = insts[next++];
    assert(inst->parent_ == this);
    inst->parent_ = nullptr;
    release(inst);
    released.push_back(std::move(p));
    return true;
  });
  if (next < insts.size()) {
    // Out of order from here on: mark the rest (parent_ reset, so that
    // edges among them stay whatever their order), collect them in a second
    // pass, and return them in the order given.
    std::unordered_map<const Instruction*, size_t> given;
    for (size_t i = next; i < insts.size(); ++i) {
      given[insts[i]] = i;
      assert(insts[i]->parent_ == this);
      insts[i]->parent_ = nullptr;
    }
    for (size_t i = next; i < insts.size(); ++i) release(insts[i]);
    // The instructions released in order above dropped the edges from
    // operands released only now, out of order: they are restored.
    for (size_t i = 0; i < next; ++i) {
      for (Instruction* op : insts[i]->operands_) {
        if (op->parent_ == nullptr && given.contains(op)) op->AddUser(insts[i]);
      }
    }
    released.resize(insts.size());
    std::erase_if(instructions_, [&](auto& p) {
      if (p->parent_ != nullptr) return false;
      size_t i = given.at(p.get());
      released[i] = std::move(p);
      return true;
    });
  }
  return released;
}

void Computation::Reserve(int64_t n) {
  instructions_.reserve(instructions_.size() + static_cast<size_t>(n));
  if (names_indexed_) by_name_.Reserve(instructions_.size() + static_cast<size_t>(n));
}

Instruction* Computation::AddReleased(std::unique_ptr<Instruction> inst) {
  assert(inst->parent_ == nullptr && "not a released instruction");
  Instruction* raw = inst.get();
  raw->parent_ = this;
  if (names_indexed_) by_name_.Insert(raw);
  instructions_.push_back(std::move(inst));
  return raw;
}

void Computation::ReorderInstructions(const std::vector<Instruction*>& order) {
  assert(order.size() == instructions_.size() && "order must be a permutation");
  std::unordered_map<const Instruction*, size_t> position;
  for (size_t i = 0; i < instructions_.size(); ++i) position[instructions_[i].get()] = i;
  std::vector<std::unique_ptr<Instruction>> reordered;
  reordered.reserve(order.size());
  for (Instruction* inst : order) {
    auto it = position.find(inst);
    assert(it != position.end() && instructions_[it->second] && "not a permutation");
    reordered.push_back(std::move(instructions_[it->second]));
  }
  instructions_ = std::move(reordered);
}

void Computation::NumberInstructions() {
  for (size_t i = 0; i < instructions_.size(); ++i) {
    instructions_[i]->position_ = static_cast<int32_t>(i);
  }
}

std::string Computation::UniqueName(std::string_view base) {
  IndexNames();
  std::string candidate(base);
  if (!by_name_.Contains(candidate)) return candidate;
  int64_t& next = next_suffix_[candidate];
  do {
    candidate = fmt::format("{}.{}", base, ++next);
  } while (by_name_.Contains(candidate));
  return candidate;
}

}  // namespace gptc::ir
