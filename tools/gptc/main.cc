// gptc: the compiler driver.
//
//   gptc --version
//   gptc models                      lists the model configs with parameter counts
//   gptc compile --model NAME ...    traces a model (see compile.cc)
//   gptc inspect FILE.gptx [--ir|--ptx|--plan|--manifest|--params]
//                                    summarizes an artifact or prints one section
//   gptc report [FILE.gptx] [--profile P.json] [--log RUN.jsonl ...] -o FILE.html
//                                    the HTML report of a step and of runs
//   gptc simulate FILE.gptx [--gpus N,...] [--zero 0,1] ...
//                                    the data-parallel step predicted on N GPUs
//   gptc verify FILE.ir              prints `ok` or one error line (exit 1)
//   gptc eval FILE.ir [--seed N] [--arithmetic f32|f64]
//                                    evaluates on random inputs, prints checksums
//   gptc export-hf CKPT_DIR OUT_DIR  writes a checkpoint as a Hugging Face GPT-2 model
//   gptc import-hf HF_DIR CKPT_DIR   writes a Hugging Face GPT-2 model as a checkpoint
//   gptc COMMAND --help              the command's flags with their defaults
//
// Usage errors exit 2, failures of the input exit 1; every error is one line.
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <random>

#include "compiler/eval/evaluator.h"
#include "compiler/ir/parser.h"
#include "compiler/ir/verifier.h"
#include "compiler/support/file.h"
#include "gptc_version.h"
#include "tools/common/flags.h"
#include "tools/gptc/commands.h"

namespace gptc {
namespace {

constexpr char kUsage[] =
    "usage: gptc <command> [flags]     (gptc <command> --help for the command's flags)\n"
    "commands:\n"
    "  models             list the model configs and their parameter counts\n"
    "  compile            compile a model's train step to IR text or an artifact (.gptx)\n"
    "  inspect FILE.gptx  summarize an artifact or print one of its sections\n"
    "  report [FILE.gptx] [--profile P.json] [--log RUN.jsonl] -o FILE.html\n"
    "                     an HTML page of the step's kernels, arena and remat, and of runs\n"
    "  simulate FILE.gptx [--gpus 1,2,4,8,...] [--zero 0,1]\n"
    "                     the data-parallel step predicted on N GPUs: step, exposed\n"
    "                     communication, tok/s and scaling efficiency\n"
    "  verify FILE.ir     parse and verify IR text; print ok or the first error\n"
    "  eval FILE.ir       evaluate the entry computation on random inputs\n"
    "  export-hf CKPT_DIR OUT_DIR\n"
    "                     write a gptrun checkpoint as a Hugging Face GPT-2 model\n"
    "  import-hf HF_DIR CKPT_DIR\n"
    "                     write a Hugging Face GPT-2 model as a gptrun checkpoint (step 0)\n"
    "  --version          print the version\n"
    "Exit status: 0 on success, 1 when the work fails, 2 for a usage error.\n";

using tools::Fail;

// The module of `path` named `name`, or its first; a file may hold several
// (gptc compile writes the train step and its other entries one after
// another). A name it lacks is a usage error (exit 2).
StatusOr<std::unique_ptr<ir::Module>> LoadModule(const std::string& path, const std::string& name) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  ASSIGN_OR_RETURN(std::vector<std::unique_ptr<ir::Module>> modules, ir::ParseModules(text, path));
  std::vector<std::string> names;
  for (auto& module : modules) {
    if (name.empty() || module->name() == name) {
      RETURN_IF_ERROR(ir::VerifyModule(*module));
      return std::move(module);
    }
    names.push_back(module->name());
  }
  return UsageError("--module {}: {} holds no such module (it has {})", name, path,
                    fmt::join(names, ", "));
}

int Verify(int argc, char** argv) {
  tools::Flags flags("gptc verify", "FILE.ir",
                     "Parses and verifies IR text (every module of the file); prints ok or the "
                     "first error with its file:line:col.");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  if (flags.positional().size() != 1) return Fail(UsageError("verify takes one FILE.ir"));
  // A file may hold several modules (gptc compile --grad-accum K > 1).
  const std::string& path = flags.positional()[0];
  StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return Fail(1, text.status());
  StatusOr<std::vector<std::unique_ptr<ir::Module>>> modules = ir::ParseModules(*text, path);
  if (!modules.ok()) return Fail(1, modules.status());
  for (const auto& module : *modules) {
    if (Status s = ir::VerifyModule(*module); !s.ok()) return Fail(1, s);
  }
  std::printf("ok\n");
  return 0;
}

int Eval(int argc, char** argv) {
  tools::Flags flags("gptc eval", "FILE.ir [flags]",
                     "Evaluates the entry computation with the reference evaluator on random "
                     "inputs and prints a checksum of each input and of the output.");
  flags.Value("seed", "N", "the random inputs' seed", "0")
      .Value("arithmetic", "f32|f64",
             "the evaluator's arithmetic (f64: a reference for f32 results)", "f32")
      .Value("module", "NAME",
             "of a file with several modules (gptc compile's train step and its other entries), "
             "the one to evaluate (default: the first)");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  if (flags.positional().size() != 1) return Fail(UsageError("eval takes one FILE.ir"));
  StatusOr<int64_t> seed = flags.GetInt("seed");
  if (!seed.ok()) return Fail(seed.status().WithCode(StatusCode::kUsage));
  eval::EvalOptions options;
  const std::string arithmetic = flags.Get("arithmetic");
  if (arithmetic == "f64") {
    options.precision = eval::Precision::kF64;
  } else if (arithmetic != "f32") {
    return Fail(UsageError("--arithmetic must be f32 or f64, got '{}'", arithmetic));
  }
  StatusOr<std::unique_ptr<ir::Module>> module =
      LoadModule(flags.positional()[0], flags.Get("module"));
  if (!module.ok()) return Fail(module.status());
  // The evaluator holds every value of the entry as doubles: refuse at once
  // what this machine cannot hold, instead of dying in the allocator.
  double bytes = 0, largest = 0;
  const ir::Instruction* biggest = nullptr;
  for (const auto& inst : (*module)->entry()->instructions()) {
    double values = 0;
    if (inst->shape().is_tuple()) {
      for (const ir::Shape& e : inst->shape().tuple_elements())
        values += static_cast<double>(e.num_elements());
    } else {
      values = static_cast<double>(inst->shape().num_elements());
    }
    bytes += 8 * values;
    if (8 * values > largest) largest = 8 * values, biggest = inst.get();
  }
  const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  if (memory > 0 && bytes > memory) {
    return Fail(1, Error("{}: evaluating needs about {:.1f} GB ({} {} alone takes {:.1f} GB, "
                         "values held as doubles); this machine has {:.1f} GB",
                         flags.positional()[0], bytes / 1e9, biggest->shape().ToString(),
                         "%" + biggest->name(), largest / 1e9, memory / 1e9));
  }
  std::mt19937_64 rng(*seed);
  std::vector<eval::Literal> args;
  for (const ir::Instruction* param : (*module)->entry()->parameters()) {
    args.push_back(eval::Literal::Random(param->shape(), rng));
    std::printf("input  %%%s = %s\n", param->name().c_str(), args.back().Summary().c_str());
  }
  StatusOr<eval::Literal> result = eval::Evaluate(**module, args, options);
  if (!result.ok()) return Fail(1, result.status());
  std::printf("output %%%s = %s\n", (*module)->entry()->root()->name().c_str(),
              result->Summary().c_str());
  return 0;
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return tools::kExitUsage;
  }
  std::string command = argv[1];
  if (command == "--version" || command == "version") {
    std::printf("gptc %s\n", GPTC_VERSION);
    return 0;
  }
  if (command == "--help" || command == "help" || command == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (command == "models") return tools::ModelsCommand(argc, argv);
  if (command == "compile") return tools::CompileCommand(argc, argv);
  if (command == "inspect") return tools::InspectCommand(argc, argv);
  if (command == "report") return tools::ReportCommand(argc, argv);
  if (command == "simulate") return tools::SimulateCommand(argc, argv);
  if (command == "verify") return Verify(argc, argv);
  if (command == "eval") return Eval(argc, argv);
  if (command == "export-hf") return tools::ExportHfCommand(argc, argv);
  if (command == "import-hf") return tools::ImportHfCommand(argc, argv);
  return Fail(UsageError("unknown command '{}' (try gptc --help)", command));
}

}  // namespace
}  // namespace gptc

int main(int argc, char** argv) {
  return gptc::tools::ExitWithStdoutChecked("gptc", gptc::Main(argc, argv));
}
