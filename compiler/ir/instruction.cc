#include "compiler/ir/instruction.h"

#include <algorithm>
#include <cassert>

#include "compiler/ir/computation.h"

namespace gptc::ir {

Instruction::Instruction(std::string name, Opcode opcode, Shape shape,
                         std::vector<Instruction*> operands, Attrs attrs)
    : opcode_(opcode),
      operands_(std::move(operands)),
      shape_(std::move(shape)),
      attrs_(attrs == kNoAttrs ? nullptr : std::make_unique<Attrs>(std::move(attrs))),
      name_(std::move(name)) {}

// Constant-initialized: no static-initialization order to get wrong.
constinit const Attrs Instruction::kNoAttrs{};

void Instruction::AddUser(Instruction* user) {
  if (std::find(users_.begin(), users_.end(), user) == users_.end()) users_.push_back(user);
}

void Instruction::RemoveUser(Instruction* user) {
  // Only drop the user once it no longer uses this value through any operand.
  if (std::find(user->operands_.begin(), user->operands_.end(), this) != user->operands_.end()) {
    return;
  }
  users_.erase(std::remove(users_.begin(), users_.end(), user), users_.end());
}

void Instruction::ReplaceOperandWith(int64_t i, Instruction* new_operand) {
  Instruction* old = operands_[i];
  if (old == new_operand) return;
  operands_[i] = new_operand;
  old->RemoveUser(this);
  new_operand->AddUser(this);
}

void Instruction::ReplaceAllUsesWith(Instruction* other) {
  assert(other != this);
  std::vector<Instruction*> users = users_;
  for (Instruction* user : users) {
    for (int64_t i = 0; i < user->operand_count(); ++i) {
      if (user->operands_[i] == this) user->operands_[i] = other;
    }
    other->AddUser(user);
  }
  users_.clear();
  if (parent_ != nullptr && parent_->root() == this) parent_->set_root(other);
}

void Instruction::ReplaceUsesIn(Computation* in, Instruction* other) {
  assert(other != this);
  std::erase_if(users_, [&](Instruction* user) {
    if (user->parent_ != in) return false;
    for (Instruction*& op : user->operands_) {
      if (op == this) op = other;
    }
    other->AddUser(user);
    return true;
  });
  if (in->root() == this) in->set_root(other);
}

void Instruction::DetachOperands() {
  std::vector<Instruction*> operands = std::move(operands_);
  operands_.clear();
  for (Instruction* op : operands) op->RemoveUser(this);
}

}  // namespace gptc::ir
