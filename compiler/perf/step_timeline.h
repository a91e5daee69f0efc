// One GPU's step as the scaling model reads it (Note [scaling model] in
// compiler/perf/scaling_model.h), taken from the plan of an artifact's
// train_step entry and a time for each of its thunks.
//
// Note [gradient readiness]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// The step's thunks run one after another; the optimizer's (role group
// optimizer: its scalars, the grad norm, every parameter's update) form the
// tail, which waits for every gradient. A gradient is final when the thunk
// that finishes it has run:
//  - In a --dp N artifact (N > 1) the schedule places one all-reduce per
//    gradient right after that thunk (passes/data_parallel.h), so each
//    all_reduce thunk is one gradient (the loss's all-reduce, 4 bytes, is
//    one too), of its count and dtype, final where it stands.
//  - In a --dp 1 artifact, the gradients are the gradient-category buffers
//    the optimizer reads (Note [plan roles]); each is final after the last
//    thunk outside the optimizer that writes into its slice (kernel
//    results, a gemm's D, bias gradient and aux, copy and constant
//    destinations).
// Gradient accumulation's accumulate/apply pair is refused: its gradients
// are final only in apply, after every micro-batch (the scaling model
// takes K as a parameter of a grad-accum 1 artifact instead).
#ifndef GPTC_COMPILER_PERF_STEP_TIMELINE_H_
#define GPTC_COMPILER_PERF_STEP_TIMELINE_H_

#include <span>

#include "compiler/perf/scaling_model.h"
#include "compiler/program/plan.h"
#include "compiler/support/status.h"

namespace gptc::perf {

// `entry` a train_step plan, `thunk_us` a time for each of its thunks (by
// index), `gather_bytes` and `tokens` as StepTimeline has them. Fails
// naming the entry when it finds no gradient or the times do not match.
StatusOr<StepTimeline> StepTimelineOf(const program::EntryPlan& entry,
                                      std::span<const double> thunk_us, int64_t gather_bytes,
                                      int64_t tokens);

}  // namespace gptc::perf

#endif  // GPTC_COMPILER_PERF_STEP_TIMELINE_H_
