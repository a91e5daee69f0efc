// gptc compile: traces a model and writes the module.
//
// Until the rest of the pipeline lands, the output is the traced forward
// module as IR text; with --dump-dir every stage is also dumped, numbered in
// pipeline order (0000.traced.ir, ...).
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "compiler/ir/printer.h"
#include "compiler/pass/pipeline.h"
#include "compiler/support/file.h"
#include "models/config.h"
#include "models/gpt2.h"
#include "tools/common/flags.h"
#include "tools/gptc/commands.h"

namespace gptc::tools {

namespace {

// The shared flag parser knows only `--name`; `-o FILE` and `-oFILE` are the
// conventional spellings of --output.
std::vector<std::string> ExpandShortFlags(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 2; i < args.size(); ++i) {
    if (args[i] == "-o") {
      args[i] = "--output";
    } else if (args[i].size() > 2 && args[i].starts_with("-o")) {
      args[i] = "--output=" + args[i].substr(2);
    }
  }
  return args;
}

StatusOr<std::optional<int64_t>> OptionalInt(const Flags& flags, const std::string& name) {
  if (!flags.Has(name)) return std::optional<int64_t>();
  ASSIGN_OR_RETURN(int64_t v, flags.GetInt(name, 0));
  return std::optional<int64_t>(v);
}

}  // namespace

int CompileCommand(int argc, char** argv) {
  std::vector<std::string> args = ExpandShortFlags(argc, argv);
  std::vector<char*> arg_ptrs;
  for (std::string& a : args) arg_ptrs.push_back(a.data());
  Flags flags;
  flags.Value("model").Value("batch").Value("seq").Value("layers").Value("heads").Value("width");
  flags.Value("output").Value("dump-dir");
  if (Status s = flags.Parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data(), 2); !s.ok()) {
    return Fail(2, s);
  }
  if (!flags.positional().empty()) {
    return Fail(2, Error("compile: unexpected argument '{}'", flags.positional()[0]));
  }
  if (!flags.Has("model")) return Fail(2, Error("compile needs --model NAME (see gptc models)"));

  StatusOr<models::GptConfig> config = models::FindGptConfig(flags.Get("model"));
  if (!config.ok()) return Fail(2, config.status());
  models::ConfigOverrides overrides;
  for (auto [name, field] :
       {std::pair{"layers", &overrides.layers}, std::pair{"heads", &overrides.heads},
        std::pair{"width", &overrides.width}}) {
    StatusOr<std::optional<int64_t>> v = OptionalInt(flags, name);
    if (!v.ok()) return Fail(2, v.status());
    *field = *v;
  }
  *config = models::ApplyOverrides(*config, overrides);
  StatusOr<int64_t> batch = flags.GetInt("batch", 4);
  if (!batch.ok()) return Fail(2, batch.status());
  StatusOr<int64_t> seq = flags.GetInt("seq", config->positions);
  if (!seq.ok()) return Fail(2, seq.status());
  if (Status s = models::ValidateTraceShape(*config, *batch, *seq); !s.ok()) return Fail(2, s);

  auto start = std::chrono::steady_clock::now();
  StatusOr<frontend::TracedModule> traced = models::TraceGpt2Forward(*config, *batch, *seq);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!traced.ok()) return Fail(1, traced.status());
  const ir::Module& module = *traced->module;

  pass::DumpWriter dumps(flags.Get("dump-dir"));
  if (Status s = dumps.Dump(module, "traced"); !s.ok()) return Fail(1, s);
  std::string output = flags.Get("output", config->name + ".ir");
  if (Status s = WriteFileAtomically(output, ir::PrintModule(module)); !s.ok()) return Fail(1, s);

  int64_t instructions = 0;
  for (const auto& c : module.computations()) instructions += c->instruction_count();
  std::printf(
      "traced %s (%lld layers, %lld heads, width %lld; batch %lld, seq %lld): %s instructions in "
      "%zu computations, %zu parameters (%s values), %.3f s -> %s\n",
      config->name.c_str(), static_cast<long long>(config->layers),
      static_cast<long long>(config->heads), static_cast<long long>(config->width),
      static_cast<long long>(*batch), static_cast<long long>(*seq),
      WithThousands(instructions).c_str(), module.computations().size(), traced->params.size(),
      WithThousands(traced->ParameterValues()).c_str(), seconds, output.c_str());
  return 0;
}

}  // namespace gptc::tools
