// Schedule: reorders each computation's instructions (the list order is the
// execution order) to keep peak live memory low.
//
// Two candidate orders over the memory model of buffer assignment (Note
// [aliases] and [liveness] in buffer_assignment.h), as XLA's default memory
// scheduler: a greedy list scheduler (parameters first, then among the
// instructions whose operands have all run, the one that frees the most bytes
// net of what it allocates, the earliest in the original order on ties) and a
// depth-first post-order from the root. Collectives (all-reduce,
// reduce-scatter, all-gather) keep their relative order in both (every
// replica must issue them in the same sequence), and are then hoisted (Note
// [hoisted collectives]). The candidate with the lowest peak (each as
// hoisted, the old order too) replaces the old order only if its peak is
// strictly lower, so the pass never makes memory worse and leaves a good
// order alone (returning false).
//
// Note [hoisted collectives]
// A collective runs on the communication stream, overlapping whatever the
// compute stream does after it is issued (Note [all-reduce buckets] in
// passes/all_reduce_combiner.h): the earlier it is placed, the more it
// overlaps. Neither order places one early on purpose: the greedy order runs
// an all-gather (which allocates N times what it reads) only when nothing
// else is ready, the depth-first order a collective when its reader needs
// it. So each reduce-scatter and all-gather moves up to right after the
// last of its operands and the collective before it; the other instructions
// keep their order. All-reduces are left where the orders put them (an
// in-place all-reduce allocates nothing, so the greedy order runs it early
// anyway), which keeps the plans of existing --dp artifacts as they are.
//   %a = f32[1024] exp(%x)               %a = f32[1024] exp(%x)
//   %b = f32[1024] exp(%y)       =>      %ra = f32[] reduce(%a)
//   %ra = f32[] reduce(%a)               %b = f32[1024] exp(%y)
//   %rb = f32[] reduce(%b)               %rb = f32[] reduce(%b)
// Runs after fusion (fused computations are single kernels) and right before
// buffer assignment; nothing that reorders or adds instructions may run after it.
#ifndef GPTC_PASSES_SCHEDULE_H_
#define GPTC_PASSES_SCHEDULE_H_

#include <vector>

#include "compiler/pass/pass.h"

namespace gptc::passes {

class Schedule : public pass::Pass {
 public:
  std::string_view Name() const override { return "schedule"; }
  StatusOr<bool> Run(ir::Module& module) override;
};

// The greedy memory-minimizing order of `computation` (not yet applied).
std::vector<ir::Instruction*> MemoryGreedyOrder(const ir::Computation& computation);
// A depth-first post-order from the root (operands in order, collectives in
// their original sequence), parameters first: finishes each operand's subtree
// before starting the next, which the greedy order cannot see ahead to do.
std::vector<ir::Instruction*> DepthFirstOrder(const ir::Computation& computation);
// `order` with every reduce-scatter and all-gather moved up to right after
// the last of its operands and the collective before it (Note [hoisted
// collectives]).
std::vector<ir::Instruction*> HoistCollectives(const std::vector<ir::Instruction*>& order);
// The peak live bytes of `computation` executed in `order` (aligned buffer sizes).
int64_t PeakLiveBytesOf(const ir::Computation& computation,
                        const std::vector<ir::Instruction*>& order);

}  // namespace gptc::passes

#endif  // GPTC_PASSES_SCHEDULE_H_
