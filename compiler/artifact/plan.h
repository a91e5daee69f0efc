// Builds the thunk plan of one entry (program::EntryPlan, with its codec in
// compiler/program/plan.h): what the runtime does, in schedule order, with
// every buffer given as an arena slice (docs/ARTIFACT.md, "The plan").
//
// Thunk kinds:
//   kernel       a generated kernel: name, grid, block, dynamic shared memory,
//                args (slices in KernelSpec param order, Note [kernel ABI])
//   gemm         a cuBLASLt matmul (gemm_plan.h) with its operand slices
//   all_reduce   an NCCL all-reduce of one buffer, a member of a bucket
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

// Note [all-reduce buckets]: the IR has one all-reduce per gradient
// (passes/data_parallel.h), placed by the schedule right after the kernel
// that finishes the gradient. The plan packs consecutive all_reduce thunks
// into buckets, each to be issued as one NCCL group (ncclGroupStart/End) on
// the communication stream when the compute stream reaches its last member
// (`issue_after`: record an event there, make the communication stream wait
// for it), and finished before thunk `wait_before` (the first thunk that
// reads any member's result, or the end of the step: make the compute stream
// wait for the group's event there). A bucket grows while it stays within
// kAllReduceBucketBytes (one larger tensor is a bucket of its own, as in
// PyTorch DDP) and while no member's result is needed before the next
// all-reduce is issued. Buffer assignment keeps every member's buffers
// reserved until its result's last reader (Note [in-place all-reduce] in
// compiler/analysis/buffer_assignment.h), so running a bucket late and concurrently
// with later kernels is safe.
inline constexpr int64_t kAllReduceBucketBytes = int64_t{25} << 20;  // 25 MiB

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
