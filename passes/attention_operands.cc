// The attention operand rewrites (passes/attention_operands.h).
#include "passes/attention_operands.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "compiler/ir/patterns.h"
#include "passes/fusion_planner.h"

namespace gptc::passes {

using fusion_internal::kPrefetchAhead;
using fusion_internal::PrefetchInstruction;
using ir::Instruction;
using ir::Opcode;

std::vector<Instruction*> AttentionOps(const ir::Computation& entry) {
  std::vector<Instruction*> ops;
  const auto& insts = entry.instructions();
  for (size_t i = 0; i < insts.size(); ++i) {
    if (i + kPrefetchAhead < insts.size()) PrefetchInstruction(insts[i + kPrefetchAhead].get());
    const Instruction* inst = insts[i].get();
    const Opcode o = inst->opcode();
    if (o == Opcode::kAttention || o == Opcode::kAttentionLse || o == Opcode::kAttentionGrad) {
      ops.push_back(insts[i].get());
    }
  }
  return ops;
}

bool ReadRoundedAttentionOperands(ir::Computation& entry,
                                  std::span<Instruction* const> attention_ops) {
  // Each attention (or attention-lse) operand and the 16-bit copy the
  // backward keeps of it.
  std::map<Instruction*, std::vector<std::pair<int64_t, Instruction*>>> reads;
  std::vector<Instruction*> readers;  // in order
  std::set<Instruction*> rounded;
  for (Instruction* inst : attention_ops) {
    const Opcode o = inst->opcode();
    if ((o != Opcode::kAttention && o != Opcode::kAttentionLse) || !inst->attrs().grad_dtype) {
      continue;
    }
    const ir::DType narrow = *inst->attrs().grad_dtype;
    for (int64_t i = 0; i < inst->operand_count(); ++i) {
      const Instruction* x = inst->operand(i);
      if (ir::DTypeBytes(narrow) >= ir::DTypeBytes(x->shape().dtype())) continue;
      for (Instruction* u : x->users()) {
        if (u->opcode() == Opcode::kConvert && u->shape().dtype() == narrow) {
          if (!reads.contains(inst)) readers.push_back(inst);
          reads[inst].push_back({i, u});
          rounded.insert(u);
          break;
        }
      }
    }
  }
  if (reads.empty()) return false;
  // The copies move up to just before the first op that will read them (the
  // backward made them after the forward); their operands come first anyway.
  std::vector<Instruction*> order;
  std::set<Instruction*> placed;
  for (const auto& inst : entry.instructions()) {
    if (auto it = reads.find(inst.get()); it != reads.end()) {
      for (auto& [i, r] : it->second) {
        if (placed.insert(r).second) order.push_back(r);
      }
    }
    if (!rounded.contains(inst.get())) order.push_back(inst.get());
  }
  entry.ReorderInstructions(order);
  // One widening of each copy, shared by the attention and its lse.
  std::map<Instruction*, Instruction*> widened;
  for (Instruction* op : readers) {
    for (auto& [i, r] : reads[op]) {
      Instruction*& wide = widened[r];
      if (wide == nullptr) {
        const Instruction* x = op->operand(i);
        ir::Attrs attrs;
        auto convert = std::make_unique<Instruction>(entry.UniqueName(r->name() + ".widened"),
                                                     Opcode::kConvert, x->shape(),
                                                     std::vector<Instruction*>{r}, attrs);
        convert->set_metadata(op->metadata());
        convert->set_role(op->role());
        wide = entry.InsertInstructionBefore(std::move(convert), op);
      }
      op->ReplaceOperandWith(i, wide);
    }
  }
  return true;
}

bool SplitAttentionOperandChains(ir::Computation& entry,
                                 std::span<Instruction* const> attention_ops) {
  // The backward's kernels: dq alone, dk and dv of the same operands together.
  std::vector<std::vector<Instruction*>> kernels;
  for (Instruction* inst : attention_ops) {
    if (inst->opcode() != Opcode::kAttentionGrad) continue;
    auto same = std::find_if(kernels.begin(), kernels.end(), [&](const auto& k) {
      return (k[0]->attrs().index == 0) == (inst->attrs().index == 0) &&
             k[0]->operands() == inst->operands();
    });
    if (same == kernels.end()) {
      kernels.push_back({inst});
    } else {
      same->push_back(inst);
    }
  }
  bool changed = false;
  for (const std::vector<Instruction*>& ops : kernels) {
    Instruction* first = ops[0];
    auto is_op = [&](const Instruction* u) {
      return std::find(ops.begin(), ops.end(), u) != ops.end();
    };
    for (int64_t i = 0; i < first->operand_count(); ++i) {
      // Down to the narrowest value: a rounding convert is where the chain
      // starts (the bf16 projection, not the f32 sum it rounds).
      std::vector<Instruction*> chain;  // operand first
      Instruction* x = first->operand(i);
      for (; x->opcode() == Opcode::kTranspose || x->opcode() == Opcode::kReshape ||
             x->opcode() == Opcode::kSlice ||
             (x->opcode() == Opcode::kConvert && !ir::IsNarrowingConvert(x));
           x = x->operand(0)) {
        chain.push_back(x);
      }
      // A wider source (an f32 projection the forward rounds) would be read,
      // and kept for the backward, instead of the 16-bit values it reads now.
      if (chain.empty() ||
          ir::DTypeBytes(x->shape().dtype()) > ir::DTypeBytes(first->operand(i)->shape().dtype())) {
        continue;
      }
      // Shared: some op of the chain has a reader besides the next one down
      // the chain (or, for the operand itself, this kernel's ops).
      bool shared = false;
      for (size_t c = 0; c < chain.size(); ++c) {
        for (const Instruction* u : chain[c]->users()) {
          shared |= c == 0 ? !is_op(u) : u != chain[c - 1];
        }
      }
      if (!shared) continue;
      Instruction* below = x;
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        const Instruction& c = **it;
        auto clone =
            std::make_unique<Instruction>(entry.UniqueName(c.name()), c.opcode(), c.shape(),
                                          std::vector<Instruction*>{below}, c.attrs());
        clone->set_metadata(c.metadata());
        clone->set_role(c.role());
        below = entry.InsertInstructionBefore(std::move(clone), first);
      }
      const Instruction* operand = first->operand(i);
      for (Instruction* op : ops) {
        for (int64_t k = 0; k < op->operand_count(); ++k) {
          if (op->operand(k) == operand) op->ReplaceOperandWith(k, below);
        }
      }
      // The last kernel to take a copy leaves the original to no one.
      for (Instruction* c : chain) {
        if (!c->users().empty() || entry.root() == c) break;
        entry.RemoveInstruction(c);
      }
      changed = true;
    }
  }
  return changed;
}

StatusOr<bool> AttentionOperands::Run(ir::Module& module) {
  if (module.entry() == nullptr) {
    return Error("attention-operands: module {} has no entry", module.name());
  }
  const std::vector<Instruction*> attention_ops = AttentionOps(*module.entry());
  bool changed = ReadRoundedAttentionOperands(*module.entry(), attention_ops);
  changed |= SplitAttentionOperandChains(*module.entry(), attention_ops);
  return changed;
}

}  // namespace gptc::passes
