// The H100 time of a whole train step, launch by launch (Note [step
// model]): `gptc inspect --estimate`, `gptc report` and the emulated
// device's --profile print it.
//
// Note [step model]
// A step is its entries' thunks in plan order (train_step; or accumulate
// grad-accum times, then apply), one after another as a stream runs them:
// kernels from Note [kernel model], gemms from Note [gemm table], copies at
// DRAM speed (read and write), constants a launch gap; fallback kernels
// (Note [epilogue fallback]) are left out, as the runtime skips them when
// cuBLASLt takes the epilogue; an all-reduce on one GPU costs nothing.
// Launches of the same kernel with the same shape are estimated once.
#ifndef GPTC_COMPILER_PERF_STEP_MODEL_H_
#define GPTC_COMPILER_PERF_STEP_MODEL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/perf/gemm_model.h"
#include "compiler/perf/kernel_model.h"
#include <nlohmann/json.hpp>

#include "compiler/program/container.h"

namespace gptc::perf {

// One launch of a step.
struct StepLaunch {
  enum class Kind { kKernel, kGemm, kCopy, kConstant };
  Kind kind = Kind::kKernel;
  std::string name;  // the thunk's (a kernel's PTX entry)
  std::string meta;  // the frontend scope, may be empty
  // The plan entry and the thunk's index there, when from an artifact.
  std::string entry;
  int64_t thunk = -1;
  int64_t repeat = 1;  // grad-accum's accumulate entry runs k times
  std::string fusion_kind;  // a kernel's (its thunk's), "gemm", "copy" or "constant"
  // kKernel: the launch, and its kernel in StepProgram::kernels.
  LaunchShape shape;
  int32_t kernel = -1;
  GemmShape gemm;          // kGemm
  int64_t bytes = 0;       // kCopy
  double roofline_us = 0;  // the plan's cost at the H100's roofline, when recorded
};

// What the step model reads of an artifact.
struct StepProgram {
  std::vector<PtxKernel> kernels;
  std::map<std::string, int64_t> registers;  // by kernel (ptxas); absent: unknown
  std::vector<StepLaunch> launches;
  int64_t tokens = 0;  // a step's, on one GPU
};

// The launches of `artifact`'s step (an error names what is missing: the
// train entries, a kernel's PTX).
StatusOr<StepProgram> StepProgramOf(const program::Artifact& artifact);

struct LaunchEstimate {
  double us = 0;                     // one launch
  std::optional<KernelTime> kernel;  // kKernel
};

struct StepEstimate {
  std::vector<LaunchEstimate> launches;  // as StepProgram::launches
  double kernel_us = 0, gemm_us = 0, other_us = 0;
  double roofline_us = 0;  // the plan's recorded costs, where present
  double us() const { return kernel_us + gemm_us + other_us; }
  double TokensPerSecond(int64_t tokens) const { return us() > 0 ? tokens / (us() * 1e-6) : 0; }
};

// `progress` (may be null) is called with (done, total) as kernels are estimated.
StatusOr<StepEstimate> EstimateStep(const StepProgram& program, const MachineModel& machine,
                                    const std::function<void(int64_t, int64_t)>& progress = {});

// The estimate as JSON ("gptc-estimate-1"): the totals and every launch
// with its entry, thunk, kind, name, fusion kind and time, for
// scripts/fit-gemm-table to put next to a GPU's profile.
nlohmann::json StepEstimateJson(const StepProgram& program, const StepEstimate& estimate);

// The estimate as a table: the step's total, then every distinct launch
// (kernels and gemms by their instruction's scope), the longest first.
std::string FormatStepEstimate(const StepProgram& program, const StepEstimate& estimate,
                               int64_t rows = 40);

}  // namespace gptc::perf

#endif  // GPTC_COMPILER_PERF_STEP_MODEL_H_
