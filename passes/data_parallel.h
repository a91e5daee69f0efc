// DataParallel: makes a train step data-parallel over `world_size` ranks.
//
// Every rank runs the same compiled step on its own slice of the global batch
// (the traced batch is the per-rank micro-batch). The pass averages over
// ranks every gradient that feeds the optimizer — each rank's gradient times
// 1/world_size, then a sum all-reduce — so the optimizer's grad norm,
// clipping and AdamW see the gradient of the global batch and every rank
// applies the identical update. The loss is averaged the same way, so every
// rank reports the global batch's mean loss (the number one rank with the
// whole batch would report):
//   ROOT %t = (f32[], f32[4]) tuple(%loss, %g)
// =>
//   %dp.loss.inv_world = f32[] constant(0.5)
//   %dp.loss.scaled = f32[] mul(%loss, %dp.loss.inv_world)
//   %dp.loss.mean = f32[] all-reduce(%dp.loss.scaled), kind=sum
//   ...
//   %dp.w.scaled = f32[4] mul(%g, %dp.w.inv_world.bcast)
//   %dp.w.mean = f32[4] all-reduce(%dp.w.scaled), kind=sum
//   ROOT %t = (f32[], f32[4]) tuple(%dp.loss.mean, %dp.w.mean)
// This is exact for a mean loss: with B rows per rank, the mean over the
// N*B rows is the mean over ranks of the per-rank means, and the same holds
// for its gradient.
//
// Note [scale first]: the 1/N multiply comes before the sum, as PyTorch DDP
// divides before its all-reduce. Mathematically the same (bit-identical for
// a power-of-two N, where 1/N is exact; otherwise 1/N is rounded to f32, and
// the mean is within an ulp of the exact one), but this way the all-reduce's only
// readers are the optimizer's kernels at the end of the step. Had the
// multiply come after, it would be the all-reduce's first reader, scheduled
// right behind it, and the compute stream would wait for each all-reduce as
// soon as it was issued: nothing left to overlap. BuildTrainProgram goes one
// step further: it runs autodiff with loss_scale 1/N, so the backward itself
// produces the divided gradients (the seed folds into the first backward
// kernel) and this pass, told so by `gradients_prescaled`, adds no multiply
// at all: one all-reduce per gradient and nothing else. Only the loss (a
// scalar, outside the backward) is multiplied here.
//
// Where it runs (passes/train_step.h), by `mode`, the optimizer mode of the entry:
//   kStep        on the autodiff output (loss, grads...) right before the
//                optimizer: loss and every gradient are all-reduced.
//   kAccumulate  on the autodiff output before the accumulate optimizer: the
//                loss only. Gradients stay local while they accumulate; they
//                are communicated once per optimizer step, in apply.
//   kApply       on the apply entry after the optimizer: each `grad_acc.NAME`
//                input is all-reduced and replaces the input in every use.
// world_size 1 leaves the module alone (returns false). A module that already
// holds an all-reduce is refused (running the pass twice would average twice).
//
// Order: the IR keeps one all-reduce per gradient tensor, inserted right
// after the instruction that makes the gradient final, so the all-reduces
// appear in the order the backward finishes gradients (the loss first, the
// embedding last). Nothing in between merges or reorders them: CSE, DCE and
// simplify never touch all-reduces, fusion never fuses one, and the schedule
// keeps their relative order; its greedy order runs each in-place
// all-reduce as soon as its operand is ready, as it allocates nothing (Note
// [hoisted collectives] in passes/schedule.h), so communication can start
// while the rest of the backward runs. The all-reduce combiner groups them into buckets after the
// schedule (Note [all-reduce buckets] in passes/all_reduce_combiner.h).
//
// Must run after autodiff and dce (kStep/kAccumulate) or after the optimizer
// (kApply); before simplify, CSE, fusion and schedule.
#ifndef GPTC_PASSES_DATA_PARALLEL_H_
#define GPTC_PASSES_DATA_PARALLEL_H_

#include <cstdint>
#include <map>
#include <string>

#include "compiler/pass/pass.h"
#include "passes/optimizer.h"

namespace gptc::passes {

struct DataParallelOptions {
  int64_t world_size = 1;
  OptimizerMode mode = OptimizerMode::kStep;
  // The gradients (and accumulators) come already divided by world_size:
  // autodiff ran with loss_scale 1/world_size (Note [scale first]). Then only
  // the loss gets a multiply; the gradients get their all-reduce alone.
  bool gradients_prescaled = false;
  // false: the loss only, in every mode (ZeRO-1: the optimizer reduce-scatters
  // the gradients itself, passes/zero_shard.h).
  bool gradients = true;
};

// Options from `gptc-opt --pass=data-parallel{world=N mode=step|accumulate|apply
// prescaled=true|false gradients=true|false}`
// keys; errors name the key or value at fault.
StatusOr<DataParallelOptions> ParseDataParallelOptions(
    const std::map<std::string, std::string>& options);

// Names the pass gives its instructions: `dp.NAME.scaled` (the multiply),
// `dp.NAME.mean` (the all-reduce), all with metadata `data_parallel.NAME`;
// NAME is the parameter's name, or `loss`.
inline constexpr char kDataParallelPrefix[] = "dp.";

// The first instruction after `inst` that is not a parameter (parameters
// stay first), or nullptr for the end of `computation`: where a collective
// of `inst`'s value goes to start as early as it can.
ir::Instruction* FirstInstructionAfter(const ir::Computation& computation,
                                       const ir::Instruction* inst);

class DataParallel : public pass::Pass {
 public:
  explicit DataParallel(DataParallelOptions options = {}) : options_(options) {}
  std::string_view Name() const override { return "data-parallel"; }
  StatusOr<bool> Run(ir::Module& module) override;

 private:
  DataParallelOptions options_;
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_DATA_PARALLEL_H_
