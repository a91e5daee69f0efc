// The writer's half of Note [plan roles] (compiler/program/plan_role.h):
// each thunk's role and each buffer's category, decided here from the
// instructions' typed roles (ir::Role), the entry's data flow and its
// signature's slots, and recorded in the plan for every reader.
#ifndef GPTC_COMPILER_ARTIFACT_PLAN_ROLES_H_
#define GPTC_COMPILER_ARTIFACT_PLAN_ROLES_H_

#include <unordered_map>
#include <unordered_set>

#include "compiler/analysis/buffer_assignment.h"
#include "compiler/ir/computation.h"
#include "compiler/program/plan.h"

namespace gptc::artifact {

// The roles of the thunks of one entry computation (with `signature`, its
// inputs' slots).
class ThunkRoles {
 public:
  ThunkRoles(const ir::Computation& entry, const program::EntrySignature& signature);
  // The role of a thunk of `inst` (an instruction of the entry).
  program::ThunkRole Of(const ir::Instruction& inst) const;

 private:
  void AddParameters(const ir::Computation& entry, const program::EntrySignature& signature);

  bool has_blocks_ = false;
  // The entry's inputs of one model parameter (the parameter, its moments,
  // its accumulated gradient): the parameter's block, or the embedding's
  // parameters before the blocks' in the model's order and the head's after.
  std::unordered_map<const ir::Instruction*, program::ThunkRole> of_parameter_;
  // Values of no block that flow into a block's forward or recomputation:
  // the embedding's; the others of the forward are the head's.
  std::unordered_set<const ir::Instruction*> into_blocks_;
  // Values computed from a block's gradient: the embedding's gradients; the
  // other gradients of no block are the head's.
  std::unordered_set<const ir::Instruction*> out_of_blocks_;
};

// Sets the category of every buffer of `plan` (its slots and buffers built
// from `ba`): an entry slot's by its SlotRole, the others by their defining
// instruction's phase.
void SetBufferCategories(const analysis::BufferAssignment& ba, program::EntryPlan& plan);

}  // namespace gptc::artifact

#endif  // GPTC_COMPILER_ARTIFACT_PLAN_ROLES_H_
