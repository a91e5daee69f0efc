// The .gptx writer: a compiled TrainProgram -> one self-contained file
// (docs/ARTIFACT.md). Runs codegen and buffer assignment on every entry,
// builds the thunk plans and encodes the container (compiler/program/container.h).
//
// Deterministic: the same program and options give the same bytes (JSON with
// sorted keys, no timestamps, no paths).
#ifndef GPTC_COMPILER_ARTIFACT_WRITER_H_
#define GPTC_COMPILER_ARTIFACT_WRITER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/analysis/arena_guests.h"
#include "compiler/artifact/plan.h"
#include "compiler/codegen/codegen.h"
#include "compiler/program/manifest.h"
#include "compiler/program/program.h"

namespace gptc::artifact {

struct ArtifactOptions {
  program::ModelConfig model;
  // The compile flags that shaped the program; grad_accum and world_size are
  // the program's, whatever these say.
  program::CompileFlags flags;
  codegen::CodegenOptions codegen;  // codegen.target is the artifact's target
  // false (gptc compile --no-codegen): no kernel is compiled, every fusion is
  // an `unsupported` thunk and the artifact is incomplete; the CPU device
  // (which evaluates the `ir` section) still runs it.
  bool compile_kernels = true;
  // Each entry's buffer assignment and arena host (Note [arena guests]), in
  // entry order, made once by the compile driver (tools/gptc/compile_program.h),
  // whose reports read them too. Required.
  const analysis::ProgramBuffers* buffers = nullptr;
  // Called as codegen goes: (kernels compiled, distinct kernels of all entries).
  std::function<void(int64_t, int64_t)> progress;
};

struct BuiltArtifact {
  std::string bytes;  // the whole file
  bool complete = false;  // no unsupported thunk: gptrun can run it
  int64_t kernels = 0;    // compiled kernels (all entries)
  int64_t cubins = 0;     // kernels assembled by ptxas
  PlanStats stats;
  // Kernel thunks marked `fallback` (Note [epilogue fallback] in
  // compiler/program/plan.h), all entries: they launch only where cuBLASLt
  // refuses an epilogue, so summaries count them apart.
  int64_t fallback_kernels = 0;
  // Each entry's arena as its plan holds it, in the program's order: the
  // buffer assignment's arena and, after it, the scratch of the epilogue
  // fallbacks (Note [epilogue fallback] in compiler/program/plan.h); they are
  // the arena figures gptc reports. The runtime allocates them, each guest
  // inside its host's (Note [arena guests]).
  std::vector<int64_t> arena_bytes;
  // Seconds per stage: "codegen" (emit + ptxas), "buffers", "plan", "encode".
  std::vector<std::pair<std::string, double>> timings;
  // Each compiled kernel's seconds (CompiledKernel::lower_seconds, ptxas_seconds).
  struct KernelSeconds {
    std::string name;
    double lower = 0, ptxas = 0;
  };
  std::vector<KernelSeconds> kernel_seconds;
};

// Compiles `program` (entries optimized: fused and scheduled) into an artifact.
StatusOr<BuiltArtifact> BuildArtifact(const program::TrainProgram& program,
                                      const ArtifactOptions& options);

}  // namespace gptc::artifact

#endif  // GPTC_COMPILER_ARTIFACT_WRITER_H_
