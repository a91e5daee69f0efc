// The thunk plan of one entry: what the runtime does, in schedule order, with
// every buffer given as an arena slice (docs/ARTIFACT.md, "The plan").
//
// Thunk kinds:
//   kernel       a generated kernel: name, grid, block, dynamic shared memory,
//                args (slices in KernelSpec param order, Note [kernel ABI])
//   gemm         a cuBLASLt matmul (gemm_plan.h) with its operand slices
//   all_reduce   an NCCL all-reduce of one buffer
//   copy         a donation the buffer assignment could not do in place
//   constant     a small constant written into its slice before the step
//   unsupported  an instruction without an emitter yet (the artifact is then
//                incomplete: gptrun refuses it); never a fake kernel
#ifndef GPTC_COMPILER_ARTIFACT_PLAN_H_
#define GPTC_COMPILER_ARTIFACT_PLAN_H_

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "compiler/artifact/gemm_plan.h"
#include "compiler/codegen/codegen.h"
#include "passes/buffer_assignment.h"
#include "passes/train_step.h"

namespace gptc::artifact {

struct PlanStats {
  std::map<std::string, int64_t> thunks;           // by thunk kind
  std::map<std::string, int64_t> kernels_by_kind;  // kernel thunks by fusion kind
  std::map<std::string, int64_t> epilogues;        // gemm thunks by epilogue
  std::map<std::string, int64_t> unsupported;      // by what ("fusion kind attention", "gather")
};

// The JSON of a GemmPlan (the "descriptor" of a gemm thunk).
nlohmann::json GemmPlanToJson(const GemmPlan& plan);

// The plan of `entry` (its module fused and scheduled; `assignment` computed
// on it; `kernels` from codegen::CompileFusions on it). Adds to `stats`.
StatusOr<nlohmann::json> BuildEntryPlan(const passes::TrainEntry& entry,
                                        const passes::BufferAssignment& assignment,
                                        const codegen::CompiledKernels& kernels,
                                        PlanStats& stats);

}  // namespace gptc::artifact

#endif  // GPTC_COMPILER_ARTIFACT_PLAN_H_
