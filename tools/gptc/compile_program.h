// The work of `gptc compile` as a library call: trace a model, build its
// train program, write the reports, and produce the artifact or the IR text.
// gptc compile is a thin driver over it (flags -> CompileOptions, the
// compile cache, the output file, the summary line); tests call it directly.
#ifndef GPTC_TOOLS_GPTC_COMPILE_PROGRAM_H_
#define GPTC_TOOLS_GPTC_COMPILE_PROGRAM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compiler/analysis/fusion_report.h"
#include "compiler/program/manifest.h"
#include "compiler/support/status.h"
#include "frontend/tracer.h"
#include "models/config.h"
#include "passes/train_step.h"
#include "tools/gptc/compile_options.h"

namespace gptc::tools {

struct CompileResult {
  std::string bytes;  // the artifact, or the IR text
  // "compiled gpt2-124m train step (...): ... instructions ...; ...": the
  // summary line without its seconds and output path.
  std::string summary;
  // A line to print after the summary ("note: --no-codegen: ..."), or empty.
  std::string note;
  std::vector<std::pair<std::string, double>> timings;       // per stage
  std::vector<std::pair<std::string, double>> pass_seconds;  // per pass, summed over entries
  std::string slowest_kernels;  // " NAME 1.2s (ptxas 0.4s), ..." or empty
  program::CompileFlags flags;  // an artifact's: the manifest's record of its flags
};

// Called with a short description of the phase at hand ("pass fusion",
// "codegen: 12/60 kernels") and whether it must be shown (else it may be
// rate-limited).
using CompileProgress = std::function<void(const std::string&, bool)>;

// Compiles as `options` say. Errors name the stage and what failed in it.
StatusOr<CompileResult> CompileProgram(const CompileOptions& options,
                                       const CompileProgress& progress = nullptr);

// What a compile of a plan --remat auto chose checks its arenas against.
struct PlanBudget {
  // > 0: the compile stops as soon as all entries' arenas (what gptrun
  // allocates at load) are known to exceed it.
  int64_t arena_bytes = 0;
  double recompute_us = 0;  // the plan's estimated recompute time, for the summary
};

// A compile of one fixed plan: its result, or how far over the budget its
// arenas came (the result is then incomplete).
struct PlannedCompile {
  CompileResult result;
  int64_t over = 0;
};

// Compiles `options` with its remat policy or plan as given (--remat auto:
// train.remat.layers, the plan chosen), within `budget`.
StatusOr<PlannedCompile> CompileWithPlan(const CompileOptions& options,
                                         const CompileProgress& progress, const PlanBudget& budget);

// Adds the sampling entry (batch 1, the train step's seq: gptrun's samples),
// the validation entry (`forward`, the very forward the train step was
// built from, with `traced`'s data inputs) and the scoring entry (the train
// step's batch and seq: gptrun eval's multiple-choice sets) to `program`.
Status AddForwardEntries(program::TrainProgram& program, const CompileOptions& options,
                         const passes::TrainStepOptions& train, std::unique_ptr<ir::Module> forward,
                         const frontend::TracedModule& traced);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTC_COMPILE_PROGRAM_H_
