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

#include "compiler/support/status.h"
#include "frontend/tracer.h"
#include "models/config.h"
#include "passes/fusion_report.h"
#include "passes/train_step.h"

namespace gptc::tools {

struct CompileOptions {
  models::GptConfig config;  // overrides applied
  int64_t batch = 4, seq = 0;
  // --batch auto: the largest power of two whose arenas fit memory_budget
  // under --remat auto (`batch` is then ignored); with tokens_per_step > 0,
  // only batches that divide it into whole micro-batches, and grad_accum to
  // reach it.
  bool batch_auto = false;
  int64_t tokens_per_step = 0;
  // What --batch auto chose ("; batch auto: 8 ..."), which the summary line
  // carries after the entries; set by CompileProgram.
  std::string batch_note;
  passes::TrainStepOptions train;  // grad_accum, world_size, adamw, precision, remat, optimize
  // What produced train.precision / train.remat, as the manifest records them.
  std::string precision_name = "bf16", remat_name = "none";
  // --remat auto: the most bytes all entries' arenas may take together (what
  // gptrun allocates at load, the epilogue fallbacks' scratch included); the
  // plan per block is chosen for it.
  int64_t memory_budget = 0;

  // An artifact (docs/ARTIFACT.md) for `target`, or else the IR text.
  bool artifact = false;
  std::string target = "sm_90a";
  std::string attention_mma = "mma.sync";  // --attention-mma: mma.sync or wgmma
  bool emu = false;                        // also the host kernels (gptrun --device emu)
  bool codegen = true;                     // false: --no-codegen
  bool forward_entries = true;  // the logits and eval entries (artifact: unless --no-logits)
  bool forward_only = false;    // IR text of the traced forward module only

  passes::GpuSpec roofline_gpu;
  std::string dump_dir;  // every stage's IR and the reports; empty: none
  bool print_fusion_report = false, print_memory_report = false;
};

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
};

// Called with a short description of the phase at hand ("pass fusion",
// "codegen: 12/60 kernels") and whether it must be shown (else it may be
// rate-limited).
using CompileProgress = std::function<void(const std::string&, bool)>;

// Compiles as `options` say. Errors name the stage and what failed in it.
StatusOr<CompileResult> CompileProgram(const CompileOptions& options,
                                       const CompileProgress& progress = nullptr);

// Adds the sampling entry (batch 1, the train step's seq: gptrun's samples)
// and the validation entry (`forward`, the very forward the train step was
// built from, with `traced`'s data inputs) to `program`.
Status AddForwardEntries(program::TrainProgram& program, const CompileOptions& options,
                         const passes::TrainStepOptions& train, std::unique_ptr<ir::Module> forward,
                         const frontend::TracedModule& traced);

// Every input of CompileProgram that shapes its bytes, as one line of text:
// the compile cache's key (Note [compile cache] in compile_cache.h) hashes it.
std::string CompileInputs(const CompileOptions& options);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTC_COMPILE_PROGRAM_H_
