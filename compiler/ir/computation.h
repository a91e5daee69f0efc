// Computation: an ordered list of SSA instructions with one root.
//
// The list order is an execution order: every operand precedes its users
// (the verifier checks it). Parameters are instructions with opcode
// `parameter` and distinct numbers 0..n-1.
#ifndef GPTC_COMPILER_IR_COMPUTATION_H_
#define GPTC_COMPILER_IR_COMPUTATION_H_

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "compiler/ir/instruction.h"
#include "compiler/ir/name_index.h"

namespace gptc::ir {

class Module;

class Computation {
 public:
  explicit Computation(std::string name) : name_(std::move(name)) {}
  Computation(const Computation&) = delete;
  Computation& operator=(const Computation&) = delete;

  const std::string& name() const { return name_; }
  Module* parent() const { return parent_; }

  // Instructions in execution order.
  const std::vector<std::unique_ptr<Instruction>>& instructions() const { return instructions_; }
  int64_t instruction_count() const { return static_cast<int64_t>(instructions_.size()); }

  Instruction* root() const { return root_; }
  void set_root(Instruction* root) { root_ = root; }

  // Parameters ordered by parameter number (gaps are nullptr until filled).
  std::vector<Instruction*> parameters() const;
  // The instruction named `name`, or nullptr. The first lookup indexes the
  // names (by_name_); through a const computation, which must not change
  // (other threads may be reading it), a lookup before then scans the order.
  Instruction* FindInstruction(std::string_view name);
  Instruction* FindInstruction(std::string_view name) const;

  // Appends `inst`, taking ownership; its name must be unused here. The new
  // instruction becomes the user of its operands.
  Instruction* AddInstruction(std::unique_ptr<Instruction> inst);
  // Inserts `inst` right before `before` in the order (nullptr appends).
  Instruction* InsertInstructionBefore(std::unique_ptr<Instruction> inst, Instruction* before);
  // Removes an instruction that has no users and is not the root.
  void RemoveInstruction(Instruction* inst);
  // Removes `insts` in one pass over the order (RemoveInstruction searches
  // it for each): in the order given, each must have no users left but
  // instructions before it in `insts`, and none is the root.
  void RemoveInstructions(const std::vector<Instruction*>& insts);
  // Takes `insts` out of this computation without destroying them, in one
  // pass: they leave the order and the names, and operands that stay here no
  // longer list them as users; an operand released too (in this call or an
  // earlier one) keeps them, for AddReleased: instructions released together
  // are to be added again, or destroyed together. Each keeps its operand
  // list for the caller to read. Users they still have here, and the root if it
  // is one of them, are the caller's to redirect (Instruction::ReplaceUsesIn).
  // The fusion pass moves a group's members into the fused computation so,
  // instead of copying them and destroying the originals: on
  // 40k-instruction graphs the copies and the frees of cold memory were most
  // of the pass. Returns them in the order given; given in this
  // computation's order, they are found in one pass comparing pointers (any
  // other order takes a second pass).
  std::vector<std::unique_ptr<Instruction>> ReleaseInstructions(
      const std::vector<Instruction*>& insts);
  // Makes room for `n` more instructions, so that adding them grows the
  // order once (the fusion pass fills computations of tens of thousands of
  // instructions).
  void Reserve(int64_t n);
  // Appends `inst`, released from a computation (ReleaseInstructions), with
  // the operands it had; its name must be unused here. Those released with
  // it, and moved here too, kept it as a user; the caller points the others
  // at values of this computation (Instruction::ReplaceOperandWith). A group
  // moved whole so reads neither the operand lists nor the use lists inside
  // it (on 40k-instruction graphs, a cache miss at each).
  Instruction* AddReleased(std::unique_ptr<Instruction> inst);
  // Sets the execution order to `order`, a permutation of this computation's
  // instructions; operands must still precede their users (the verifier checks):
  //   %a, %b, %c   --ReorderInstructions({%b, %a, %c})-->   %b, %a, %c
  void ReorderInstructions(const std::vector<Instruction*>& order);

  // Sets each instruction's position() to its index in the order.
  void NumberInstructions();

  // A name not used yet in this computation: `base`, else `base.1`, `base.2`...
  std::string UniqueName(std::string_view base);

 private:
  friend class Module;
  Instruction* Adopt(std::unique_ptr<Instruction>& inst);
  // Builds by_name_ if it is not built.
  void IndexNames();

  std::string name_;
  Module* parent_ = nullptr;
  std::vector<std::unique_ptr<Instruction>> instructions_;
  // The instructions by name, built by the first lookup (FindInstruction,
  // UniqueName) and kept from then on; dropped when most instructions leave
  // (ReleaseInstructions). The fusion pass fills computations of tens of
  // thousands of instructions that no one looks up by name: indexing them
  // as they came wrote a table of megabytes at random.
  NameIndex by_name_;
  bool names_indexed_ = false;
  std::unordered_map<std::string, int64_t> next_suffix_;
  Instruction* root_ = nullptr;
};

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_COMPUTATION_H_
