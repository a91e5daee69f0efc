// The per-block remat plan of `--remat auto`: what each transformer block
// keeps and what it recomputes, chosen to minimise the estimated step time
// with the train step's arena within a memory budget.
//
// Note [per-block remat plans]
// The blocks of a GPT-2 are identical, so a plan is fixed by how many blocks
// take each policy (none, dots, wide, block) and in which order. The cost model is
// measured, not derived: the compile driver compiles slices of the model (2
// and 3 blocks, or 1 and 2 for a model of fewer than 3) under each uniform
// policy, through fusion, schedule and buffer assignment, and reads each
// slice's arena and fusion-report time. Per policy p:
//   layer_bytes(p)     = arena(3 blocks, p) - arena(2 blocks, p)
//   transient_bytes(p) = max(0, intercept(p) - intercept(none)), where
//                        intercept(p) = arena(2 blocks, p) - 2 layer_bytes(p)
//   layer_us(p)        = time(3 blocks, p) - time(2 blocks, p)
// and for a plan of L blocks
//   arena(plan) = intercept(none) + sum over blocks of layer_bytes(p_l)
//                 + max over blocks of transient_bytes(p_l) + other(L)
//   time(plan)  = time(2 blocks, none) - 2 layer_us(none) + sum of layer_us(p_l)
// where other(L) is the other entries' arenas: grad-accum's apply, fitted to
// the none slices the same way, and the logits, eval and score entries, which the
// driver builds at full depth first (their schedules make them grow faster
// than linearly in the blocks): the budget bounds every arena gptrun
// allocates at load. The model is exact for the uniform plans at
// every depth (the slices' arenas grow linearly in the blocks). A block that recomputes (block,
// dots) needs its transient only during its own backward, so the plan puts the recomputing blocks
// at the bottom, where the blocks above have freed their saved values: block, wide, dots, then none
// from block 0 up. There the transient is mostly hidden: three more slices, the deeper depth with
// block 0 under block, wide or dots and the rest under none, measure what is left of it
// (transient_below_none); a plan with a none block on top counts those, one
// without counts the full transients. The driver checks the chosen plan's
// real arena against the budget (tools/gptc/compile_program.cc).
//
// The choice is exact for the model: every split of the L blocks into the
// four policies (O(L^3) plans, 20,825 at 48 blocks) is evaluated, and the fastest that fits wins
// (ties: the smaller arena). The greedy baseline converts one block at a time
// to the policy that saves the most bytes per microsecond of recompute until
// the plan fits; reports compare the two with the uniform plans.
#ifndef GPTC_TOOLS_GPTC_REMAT_PLANNER_H_
#define GPTC_TOOLS_GPTC_REMAT_PLANNER_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/support/status.h"
#include "passes/remat.h"

namespace gptc::tools {

using passes::RematPolicy;

// One slice compile: `blocks` transformer blocks, all under `policy`, or
// with `below_none` only block 0 under it and the blocks above under none.
struct RematSlice {
  RematPolicy policy = RematPolicy::kNone;
  int blocks = 0;
  bool below_none = false;
  int64_t arena_bytes = 0;  // the entry with the backward (train_step, accumulate)
  double time_us = 0;       // the fusion report's total
  // The other entries' arenas (grad-accum's apply), which no plan changes.
  int64_t other_bytes = 0;
};

// What one block costs under one policy (Note [per-block remat plans]).
struct BlockCost {
  int64_t layer_bytes = 0;
  int64_t transient_bytes = 0;
  // The transient where the block's backward runs after blocks under none
  // have freed theirs (a recomputing block below a none block).
  int64_t transient_below_none = 0;
  double layer_us = 0;
};

// The policies a plan's blocks choose from, in the order the plan stacks them
// from block 0 up.
inline constexpr std::array<RematPolicy, 4> kPlanPolicies = {
    RematPolicy::kBlock, RematPolicy::kWide, RematPolicy::kDots, RematPolicy::kNone};
inline constexpr int kNumPlanPolicies = static_cast<int>(kPlanPolicies.size());

class RematCostModel {
 public:
  // From two slice depths under each policy, and the deeper depth with block
  // 0 under each recomputing policy below none (eleven slices); errors name
  // what is missing.
  // `fixed_bytes`: arenas beside the slices' entries (the logits and eval
  // entries').
  static StatusOr<RematCostModel> Fit(const std::vector<RematSlice>& slices, int blocks,
                                      int64_t fixed_bytes = 0);

  int blocks() const { return blocks_; }
  const BlockCost& cost(RematPolicy policy) const;
  // The plan of `counts[i]` blocks under kPlanPolicies[i], stacked in that order.
  std::vector<RematPolicy> Plan(const std::array<int, kNumPlanPolicies>& counts) const;
  // All entries' arenas under `plan`.
  int64_t ArenaBytes(const std::vector<RematPolicy>& plan) const;
  int64_t other_bytes() const { return other_bytes_; }
  double TimeUs(const std::vector<RematPolicy>& plan) const;

 private:
  int blocks_ = 0;
  int64_t base_bytes_ = 0, other_bytes_ = 0;
  double base_us_ = 0;
  std::array<BlockCost, kNumPlanPolicies> costs_{};  // by kPlanPolicies' order
};

// A plan with the model's estimates.
struct EstimatedPlan {
  std::string name;  // "none", "greedy", "chosen", ...
  std::vector<RematPolicy> layers;
  int64_t arena_bytes = 0;
  double time_us = 0;
  double recompute_us = 0;  // time_us less uniform none's
  bool fits = false;
};

// The fastest plan whose estimated arena is within `budget_bytes`. When none
// fits, the error names the smallest arena any plan reaches and the budget.
StatusOr<EstimatedPlan> ChooseRematPlan(const RematCostModel& model, int64_t budget_bytes);

// The plan with the smallest estimated arena (the least memory any plan needs).
EstimatedPlan SmallestRematPlan(const RematCostModel& model);

// The greedy baseline; `fits` is false when it never fits.
EstimatedPlan GreedyRematPlan(const RematCostModel& model, int64_t budget_bytes);

// The uniform plans, the greedy one and `chosen`, as rows of a table
// ("plan  arena  est. time  recompute  fits").
std::string RenderPlanComparison(const RematCostModel& model, int64_t budget_bytes,
                                 const EstimatedPlan& chosen);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTC_REMAT_PLANNER_H_
