// The analysis half of the loop emitter (loop_emitter.cc builds the MLIR
// from it): the output groups, their member classes, vector widths, block
// ranges and grid of a loop or optimizer fusion's kernel, decided without
// MLIR so that tests can check them.
//
// Note [loop groups]: the outputs of a fusion may have different shapes (the
// horizontal optimizer fusion updates every parameter, m and v; other
// multi-output loop fusions too). Outputs of one shape form a group, and
// each group runs the vectorised grid-stride loop of Note [loop
// vectorisation] (loop_emitter.cc) over its own shape with its own width.
//
// Note [member classes]: a group's outputs split into members, the outputs
// that read a common parameter of the group's element count (AdamW's new p,
// m and v of one parameter all read its gradient), and members whose cones
// in the fused computation are equal up to which parameters they read (the
// 12 layers' c_attn weights; the 74 [768] gains and biases of gpt2-124m)
// form a class. A class's kernel code is one member's, emitted once: the
// class owns M x blocks_per_member blocks of the grid, block b runs member
// b / blocks_per_member, and the member's buffers are chosen at the top of
// the block from the kernel's arguments by a chain of selects. So the code
// grows with the number of distinct member shapes, not of members: the
// gpt2-124m AdamW kernel went from 12,800 lines of PTX (5 s of ptxas, the
// longest kernel of the compile by far) to a few hundred, and its members
// update in parallel instead of one after another in each thread.
// A block tests its range once, so the dispatch costs one compare per class
// per block; all classes share the block size.
#ifndef GPTC_COMPILER_CODEGEN_LOOP_PLAN_H_
#define GPTC_COMPILER_CODEGEN_LOOP_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/ir/instruction.h"
#include "compiler/support/status.h"

namespace gptc::codegen {

// One member of a class: its outputs (with their kernel argument slots) and
// the fused computation's parameters its cone reads, in the order of the
// class's canonical form, so that position k means the same in every member.
struct LoopMember {
  std::vector<const ir::Instruction*> outputs;
  std::vector<int64_t> output_slots;
  std::vector<const ir::Instruction*> params;
};

struct LoopClass {
  std::vector<LoopMember> members;  // members[0] is the one whose code is emitted
  int64_t first_block = 0;
  int64_t blocks_per_member = 1;
  int64_t blocks() const { return static_cast<int64_t>(members.size()) * blocks_per_member; }
};

struct LoopGroup {
  std::vector<int64_t> dims;
  int64_t n = 0;           // elements of the group's shape
  int64_t width = 1;       // elements per vector (Note [loop vectorisation])
  int64_t iterations = 0;  // vectors of one member: n / width
  std::vector<LoopClass> classes;
};

struct LoopPlan {
  std::vector<LoopGroup> groups;  // in order of first output
  int64_t block = 0;              // threads per block
  int64_t grid = 0;               // blocks: the sum of every class's blocks
  bool wide = false;              // indices need 64 bits
  // More than one class: each block tests which one it runs.
  bool dispatch() const { return groups.size() > 1 || groups[0].classes.size() > 1; }
};

// The parameters the cone of `outputs` reads, each once, in post order of a
// walk from the outputs in turn through operands first to last; with `key`,
// the cone's canonical form with parameters numbered in that order: members
// whose keys are equal share a class (Note [member classes]).
std::vector<const ir::Instruction*> MemberCone(const std::vector<const ir::Instruction*>& outputs,
                                               std::string* key);

// The plan of a kind=loop or kind=optimizer fusion's kernel.
StatusOr<LoopPlan> PlanLoop(const ir::Instruction& fusion);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_LOOP_PLAN_H_
