// Rebuilds the TrainProgram a .gptx artifact was compiled from: the optimized
// modules (the `ir` section), each entry's signature (the plan's input and
// output slots), the parameter specs with their init rules (the `params`
// section), grad_accum, world_size (data-parallel ranks) and the AdamW
// options (the manifest's flags, decoded with the container). The CPU device runs it with
// the reference evaluator; it needs no kernel, so an incomplete artifact
// (`"complete": false`, e.g. gptc compile --no-codegen) loads as well.
//
//   ASSIGN_OR_RETURN(Artifact a, ReadArtifact("gpt2-tiny.gptx"));
//   ASSIGN_OR_RETURN(LoadedProgram p, LoadProgram(a, "gpt2-tiny.gptx"));
//   CpuTrainer trainer(&p.program, seed);
//
// Every inconsistency (an entry without its module, a slot whose shape or
// role disagrees with the module, unknown roles, parameters that differ
// between sections) is one error line starting with the artifact's path.
#ifndef GPTC_RUNTIME_PROGRAM_LOADER_H_
#define GPTC_RUNTIME_PROGRAM_LOADER_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "compiler/program/container.h"
#include "compiler/program/manifest.h"
#include "compiler/program/program.h"
#include "compiler/support/status.h"

namespace gptc::rt {

struct LoadedProgram {
  program::TrainProgram program;
  program::ModelConfig model;    // the manifest's; a checkpoint keeps it
  program::CompileFlags flags;   // the manifest's: batch and seq of one micro-batch, ...
  bool complete = false;         // every thunk has a kernel (the GPU device can run it)
  int64_t parameter_values = 0;  // elements over all parameters
  int64_t matmul_values = 0;     // elements of the matmul operands (MFU's N; Gpt2ParamKind)
};

StatusOr<LoadedProgram> LoadProgram(const program::Artifact& artifact, std::string_view path);

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_PROGRAM_LOADER_H_
