// What `gptc compile` is asked to build, as typed options: the flag parser
// (compile.cc) is the only place that reads their text, the printers below
// the only places that write it. CompileInputs serializes every field that
// shapes the output, and the compile cache's key hashes that (Note [compile
// inputs]).
#ifndef GPTC_TOOLS_GPTC_COMPILE_OPTIONS_H_
#define GPTC_TOOLS_GPTC_COMPILE_OPTIONS_H_

#include <cstdint>
#include <string>

#include "compiler/codegen/target.h"
#include "compiler/program/gpu_spec.h"
#include "models/config.h"
#include "passes/mixed_precision.h"
#include "passes/remat.h"
#include "passes/train_step.h"

namespace gptc::tools {

struct CompileOptions {
  models::GptConfig config;  // overrides applied
  int64_t batch = 4, seq = 0;
  // --score-seq: the score entry's window, with as many rows as batch * seq
  // tokens make (gptrun eval packs whole examples into them); 0: seq.
  int64_t score_seq = 0;
  // --batch auto: the largest power of two whose arenas fit memory_budget
  // under --remat auto (`batch` is then ignored); with tokens_per_step > 0,
  // only batches that divide it into whole micro-batches, and grad_accum to
  // reach it.
  bool batch_auto = false;
  int64_t tokens_per_step = 0;
  // What --batch auto chose ("; batch auto: 8 ..."), which the summary line
  // carries after the entries; set by CompileProgram.
  std::string batch_note;
  // grad_accum, world_size, adamw, precision, optimize, and the remat plan:
  // train.remat.policy kAuto is --remat auto (the driver chooses the blocks'
  // policies), train.remat.layers a policy per block, else one policy for all.
  passes::TrainStepOptions train;
  // --remat auto: the most bytes all entries' arenas may take together (what
  // gptrun allocates at load, the epilogue fallbacks' scratch included); the
  // plan per block is chosen for it.
  int64_t memory_budget = 0;

  // An artifact (docs/ARTIFACT.md) for `target`, or else the IR text.
  bool artifact = false;
  codegen::Target target = codegen::Target::kSm90a;
  codegen::AttentionMma attention_mma = codegen::AttentionMma::kMmaSync;  // --attention-mma
  bool emu = false;             // also the host kernels (gptrun --device emu)
  bool codegen = true;          // false: --no-codegen
  bool forward_entries = true;  // logits, eval, score (artifact: unless --no-logits)
  bool forward_only = false;    // IR text of the traced forward module only

  program::GpuSpec roofline_gpu;
  std::string dump_dir;  // every stage's IR and the reports; empty: none
  bool print_fusion_report = false, print_memory_report = false;
};

// The --remat text of a plan, as the manifest records it: "none", "block",
// a plan per block ("block:0-3,none:4-11"), "auto", or once --remat auto
// has chosen, "auto: " and its plan.
std::string RematText(const passes::RematOptions& remat);

// Note [compile inputs]: every field of CompileOptions (and of the structs
// it holds) that shapes CompileProgram's bytes, as one line of text: the
// compile cache's key (Note [compile cache] in compile_cache.h) hashes it.
// The fields that shape no byte (the reports, the dumps, what CompileProgram
// itself fills in) are named in compile_options.cc; the test
// (tests/tools/gptc/compile_options_test.cc) flips every field and fails to
// compile when a struct gains one that is neither written nor named.
std::string CompileInputs(const CompileOptions& options);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTC_COMPILE_OPTIONS_H_
