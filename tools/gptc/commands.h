// The gptc subcommands that live outside main.cc, and what they share.
//
// Each command takes the whole argv (the command name is argv[1]) and returns
// the process exit code: 0 success, 1 a failure of the input or the output,
// 2 a usage error (bad flag, unknown model, impossible config). Every error
// is one line on stderr.
#ifndef GPTC_TOOLS_GPTC_COMMANDS_H_
#define GPTC_TOOLS_GPTC_COMMANDS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "compiler/support/status.h"
#include "compiler/support/text.h"

namespace gptc::program {
struct Artifact;
}  // namespace gptc::program

namespace gptc::tools {

// gptc compile --model NAME [--batch N] [--seq T] [--layers L] [--heads H]
//              [--width C] [-o FILE] [--dump-dir DIR] [--grad-accum K]
//              [--weight-decay WD] [--clip-norm C] [--beta1 B1] [--beta2 B2]
//              [--eps E] [--forward-only]
int CompileCommand(int argc, char** argv);
// gptc inspect FILE.gptx [--manifest|--ir|--ptx|--plan|--params]
int InspectCommand(int argc, char** argv);
// gptc inspect --kernel-stats: a table of each kernel whose name contains
// `filter` (all when empty): static PTX statements by class, per mma,
// registers, spills, shared memory and blocks per multiprocessor
// (kernel_stats.cc).
StatusOr<std::string> KernelStatsTable(const program::Artifact& a, std::string_view filter);
// gptc inspect --cubins DIR: writes DIR/ENTRY.KERNEL.cubin for each kernel
// whose name contains `filter` (all when empty); returns how many.
StatusOr<int64_t> WriteCubins(const program::Artifact& a, std::string_view filter,
                              const std::string& dir);
// gptc report [ARTIFACT.gptx] [--profile FILE.json] [--log RUN.jsonl ...]
//             [--gpu h100] -o FILE.html: the HTML report (report_command.cc).
int ReportCommand(int argc, char** argv);
// gptc simulate FILE.gptx [--gpus N,...] [--times model|roofline|P.json] ...:
// the step predicted on N GPUs (simulate_command.cc, Note [scaling model]).
int SimulateCommand(int argc, char** argv);
// gptc models: the configs with their parameter counts.
int ModelsCommand(int argc, char** argv);
// gptc export-hf CKPT_DIR OUT_DIR: a checkpoint as a Hugging Face GPT-2 model.
int ExportHfCommand(int argc, char** argv);
// gptc import-hf HF_DIR CKPT_DIR: a Hugging Face GPT-2 model as a checkpoint.
int ImportHfCommand(int argc, char** argv);
// export-hf and import-hf write a config.json and a model.safetensors, the
// names of the files they read: refuses an output directory `out` (named
// `out_name` in the message) that is the input `in` itself (`in_what`: "the
// checkpoint", "HF_DIR"), and a non-empty one unless `force`.
Status CheckHfOutputDir(std::string_view command, const std::string& in, std::string_view in_what,
                        const std::string& out, std::string_view out_name, bool force);

// Prints `gptc: MESSAGE` on stderr and returns `code`.
int Fail(int code, const Status& status);
// Prints `gptc: MESSAGE` on stderr and returns the exit code of its kind
// (ExitCodeOf in tools/common/flags.h).
int Fail(const Status& status);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTC_COMMANDS_H_
