// NameIndex: a computation's instructions by name, for FindInstruction,
// UniqueName and the name check of AddInstruction.
#ifndef GPTC_COMPILER_IR_NAME_INDEX_H_
#define GPTC_COMPILER_IR_NAME_INDEX_H_

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "compiler/ir/instruction.h"

namespace gptc::ir {

// An open-addressing table of instruction pointers keyed by the
// instructions' own names (an instruction's name never changes), each slot
// with its name's hash so a probe compares names only on a hash match. A
// std::unordered_map<std::string, Instruction*> allocated a node and a copy
// of the name per instruction: the fusion pass moves tens of thousands of
// instructions between computations, and those allocations and their frees
// of cold memory were about a seventh of it on 40k-instruction graphs
// (docs/PERFORMANCE.md, "Compile time").
class NameIndex {
 public:
  Instruction* Find(std::string_view name) const {
    if (slots_.empty()) return nullptr;
    size_t i = Probe(name, Hash(name));
    return IsLive(slots_[i].inst) ? slots_[i].inst : nullptr;
  }
  bool Contains(std::string_view name) const { return Find(name) != nullptr; }

  // Adds `inst` under its name, which must not be in the table.
  void Insert(Instruction* inst) {
    if ((used_ + 1) * 2 > slots_.size()) Rehash(std::max<size_t>(16, count_ * 4));
    uint64_t h = Hash(inst->name());
    size_t i = Probe(inst->name(), h);
    assert(!IsLive(slots_[i].inst) && "instruction name already used");
    if (slots_[i].inst == nullptr) ++used_;  // a reused tombstone was counted
    slots_[i] = {inst, h};
    ++count_;
  }

  // Makes room for `n` live entries without growing again.
  void Reserve(size_t n) {
    if (n * 2 > slots_.size()) Rehash(n * 2);
  }

  // Removes the instruction named `name`, if there is one.
  void Erase(std::string_view name) {
    if (slots_.empty()) return;
    size_t i = Probe(name, Hash(name));
    if (!IsLive(slots_[i].inst)) return;
    slots_[i].inst = Tombstone();  // keeps later entries of the probe chain reachable
    --count_;
  }

 private:
  struct Slot {
    Instruction* inst = nullptr;  // null: never used; Tombstone(): erased
    uint64_t hash = 0;
  };

  static Instruction* Tombstone() { return reinterpret_cast<Instruction*>(uintptr_t{1}); }
  static bool IsLive(const Instruction* inst) { return inst != nullptr && inst != Tombstone(); }
  static uint64_t Hash(std::string_view name) { return std::hash<std::string_view>{}(name); }

  // The slot holding `name`, else the first tombstone on its probe chain,
  // else the empty slot that ends it.
  size_t Probe(std::string_view name, uint64_t h) const {
    size_t mask = slots_.size() - 1;
    size_t reuse = slots_.size();
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.inst == nullptr) return reuse < slots_.size() ? reuse : i;
      if (s.inst == Tombstone()) {
        if (reuse == slots_.size()) reuse = i;
      } else if (s.hash == h && s.inst->name() == name) {
        return i;
      }
    }
  }

  // Grows (or clears tombstones from) the table to `capacity` slots.
  void Rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(std::bit_ceil(capacity), Slot{});
    used_ = count_;
    size_t mask = slots_.size() - 1;
    for (const Slot& s : old) {
      if (!IsLive(s.inst)) continue;
      size_t i = s.hash & mask;
      while (slots_[i].inst != nullptr) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t count_ = 0;  // live entries
  size_t used_ = 0;   // live entries and tombstones: what fills probe chains
};

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_NAME_INDEX_H_
