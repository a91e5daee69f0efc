// gptc-opt: runs named passes on IR text and prints the result (as mlir-opt).
//
//   gptc-opt --pass=dce[,NAME...] [--split-input-file] [--dump-dir DIR] FILE.ir
//
// A pass with options is written `NAME{key=value key=value}` (quote it for
// the shell): `--pass='data-parallel{world=2 mode=apply}'`.
// With --split-input-file, the input is cut at lines `// -----` and each case
// runs on its own; cases are printed separated by `// -----`, errors go to
// stderr with line numbers of the whole file, and the exit code is 1 if any
// case failed.
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "compiler/ir/parser.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"
#include "compiler/pass/pipeline.h"
#include "compiler/support/file.h"
#include "passes/registry.h"
#include "tools/common/flags.h"

namespace gptc {
namespace {

constexpr char kAbout[] =
    "Runs named passes on IR text and prints the result (as mlir-opt does); FILE.ir may be - "
    "for stdin. A pass with options is written NAME{key=value ...}.";

tools::Flags DeclareFlags() {
  tools::Flags flags("gptc-opt", "--pass=NAME[{key=value ...}][,NAME...] [flags] FILE.ir|-",
                     kAbout);
  flags.Value("pass", "NAMES", "the passes to run, in order, comma-separated")
      .Bool("list-passes", "list the passes and their options, and exit")
      .Bool("split-input-file",
            "cut the input at lines `// -----` and run each case on its own (exit 1 if any fails)")
      .Value("disable-pass", "NAMES", "passes to skip (comma-separated)")
      .Bool("no-verify", "do not verify the IR after each pass")
      .Value("dump-dir", "DIR", "write the IR after every pass there")
      .Value("dump-pass-re", "REGEX", "with --dump-dir: only after the passes matching REGEX")
      .Bool("timings", "print the seconds of every pass (and verifier run) on stderr");
  return flags;
}

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

struct Case {
  std::string text;  // padded with newlines so line numbers match the file
};

std::vector<Case> SplitCases(const std::string& text, bool split) {
  if (!split) return {{text}};
  std::vector<Case> cases;
  std::string current;
  int line = 0, case_start_line = 0;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l); ++line) {
    if (l.rfind("// -----", 0) == 0) {
      cases.push_back({std::string(case_start_line, '\n') + current});
      current.clear();
      case_start_line = line + 1;
      continue;
    }
    current += l + "\n";
  }
  cases.push_back({std::string(case_start_line, '\n') + current});
  return cases;
}

int Main(int argc, char** argv) {
  tools::Flags flags = DeclareFlags();
  if (Status s = flags.Parse(argc, argv, 1); !s.ok()) return tools::FailWith("gptc-opt", s);
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  const pass::PassRegistry& registry = passes::AllPasses();
  if (flags.Has("list-passes")) {
    for (const std::string& line : registry.Describe()) std::printf("%s\n", line.c_str());
    return 0;
  }
  if (flags.positional().size() != 1) {
    return tools::FailWith("gptc-opt", UsageError("needs one FILE.ir or - (see gptc-opt --help)"));
  }
  const std::string path = flags.positional()[0];
  pass::PipelineOptions options;
  options.verify_each = !flags.Has("no-verify");
  options.dump_dir = flags.Get("dump-dir");
  options.dump_pass_re = flags.Get("dump-pass-re");
  for (const std::string& name : SplitComma(flags.Get("disable-pass"))) {
    options.disabled.insert(name);
  }
  if (flags.Has("timings")) {
    options.timings = std::make_shared<std::vector<std::pair<std::string, double>>>();
  }
  std::vector<std::pair<std::string, pass::PassOptions>> pass_specs;
  for (const std::string& spec : pass::SplitPassList(flags.Get("pass"))) {
    StatusOr<std::pair<std::string, pass::PassOptions>> parsed = pass::ParsePassSpec(spec);
    Status status = parsed.status();
    if (status.ok()) status = registry.Create(parsed->first, parsed->second).status();
    if (!status.ok()) {
      return tools::FailWith("gptc-opt", status.WithPrefix("--pass").WithCode(StatusCode::kUsage));
    }
    pass_specs.push_back(std::move(parsed).value());
  }
  StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return tools::FailWith("gptc-opt", text.status());
  int exit_code = 0;
  bool first = true;
  // One numbering for every case's dumps.
  auto dumps = std::make_shared<pass::DumpWriter>(options.dump_dir);
  for (const Case& c : SplitCases(*text, flags.Has("split-input-file"))) {
    if (!first) std::printf("// -----\n");
    first = false;
    // A case may hold several modules (gptc compile writes the train step
    // and its other entries one after another): each runs the passes.
    StatusOr<std::vector<std::unique_ptr<ir::Module>>> modules = ir::ParseModules(c.text, path);
    Status status = modules.status();
    for (size_t i = 0; status.ok() && i < modules->size(); ++i) {
      ir::Module& module = *(*modules)[i];
      status = ir::VerifyModule(module);
      if (!status.ok()) break;
      pass::Pipeline pipeline("gptc-opt", options);
      pipeline.set_dump_writer(dumps);
      for (const auto& [name, pass_options] : pass_specs) {
        pipeline.AddPass(registry.Create(name, pass_options).value());
      }
      StatusOr<bool> changed = pipeline.Run(module);
      status = changed.status();
      if (options.timings) {
        for (const auto& [name, seconds] : *options.timings) {
          std::fprintf(stderr, "gptc-opt: %s %.4f s\n", name.c_str(), seconds);
        }
        options.timings->clear();
      }
    }
    if (!status.ok()) {
      std::fflush(stdout);
      std::fprintf(stderr, "gptc-opt: %s\n", status.message().c_str());
      std::fflush(stderr);
      exit_code = 1;
      continue;
    }
    for (const auto& module : *modules) std::fputs(ir::PrintModule(*module).c_str(), stdout);
  }
  return exit_code;
}

}  // namespace
}  // namespace gptc

int main(int argc, char** argv) {
  return gptc::tools::ExitWithStdoutChecked("gptc-opt", gptc::Main(argc, argv));
}
