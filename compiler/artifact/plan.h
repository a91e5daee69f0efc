// Builds the thunk plan of one entry (program::EntryPlan, with its codec in
// compiler/program/plan.h): what the runtime does, in schedule order, with
// every buffer given as an arena slice (docs/ARTIFACT.md, "The plan").
//
// Thunk kinds:
//   kernel       a generated kernel: name, grid, block, dynamic shared memory,
//                args (slices in KernelSpec param order, Note [kernel ABI])
//   gemm         a cuBLASLt matmul (gemm_plan.h) with its operand slices
//   all_reduce   an NCCL collective of one buffer (all-reduce, or with
//                `collective`, reduce-scatter or all-gather), a member of a
//                bucket
//   copy         a donation the buffer assignment could not do in place
//   constant     a small constant written into its slice before the step
//   unsupported  an instruction without an emitter yet (the artifact is then
//                incomplete: gptrun refuses it); never a fake kernel
#ifndef GPTC_COMPILER_ARTIFACT_PLAN_H_
#define GPTC_COMPILER_ARTIFACT_PLAN_H_

#include <cstdint>
#include <map>
#include <string>

#include "compiler/analysis/buffer_assignment.h"
#include "compiler/artifact/gemm_plan.h"
#include "compiler/codegen/codegen.h"
#include "compiler/program/manifest.h"
#include "compiler/program/plan.h"
#include "compiler/program/program.h"

namespace gptc::artifact {

// The collective buckets come from the IR (Note [all-reduce buckets] in
// passes/all_reduce_combiner.h: each collective's `bucket=K`); the plan only
// places them among the thunks (program::AllReduceBucket: issue_after,
// wait_before). A collective without a bucket is an error naming it.

// What the plans hold, counted over every entry: the manifest's counts.
using PlanStats = program::ArtifactCounts;

// The plan of `entry` (its module fused and scheduled; `assignment` computed
// on it; `kernels` from codegen::CompileFusions on it). Adds to `stats`.
StatusOr<program::EntryPlan> BuildEntryPlan(const program::TrainEntry& entry,
                                            const analysis::BufferAssignment& assignment,
                                            const codegen::CompiledKernels& kernels,
                                            PlanStats& stats);

}  // namespace gptc::artifact

#endif  // GPTC_COMPILER_ARTIFACT_PLAN_H_
