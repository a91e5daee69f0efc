// gptrun generate's flags (tools/gptrun/generate.h does the work).
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "compiler/support/file.h"
#include "tools/common/data_files.h"
#include "tools/common/flags.h"
#include "tools/gptrun/devices.h"
#include "tools/gptrun/generate.h"

namespace gptc::tools {

namespace {

Flags DeclareGenerateFlags() {
  const GenerateOptions d;
  auto str = [](auto v) { return fmt::format("{}", v); };
  Flags flags("gptrun generate", "FILE.gptx --resume CKPT_DIR --prompt TEXT [flags]",
              "Generates text from a checkpoint (a step_NNNNNN directory, of gptrun or of gptc "
              "import-hf) with the artifact's logits entry, on any device. The prompt starts a "
              "document (<|endoftext|> before it) and must fit the artifact's sequence length. "
              "The text goes to standard output as it is drawn, notes to standard error.");
  flags.Value("resume", "CKPT_DIR", "the checkpoint whose parameters generate")
      .Value("prompt", "TEXT", "the text to continue (default: none, a new document)")
      .Value("prompt-file", "FILE", "the text to continue, from a file")
      .Conflicts("prompt")
      .Value("max-tokens", "N", "tokens to generate at most", str(d.max_tokens))
      .Value("temperature", "T", "divides the logits before drawing; 0 is greedy",
             str(d.temperature))
      .Value("top-k", "K", "draw from the K likeliest tokens; 0 for all", str(d.top_k))
      .Value("seed", "S", "the draws' seed (the same seed, the same text)", str(d.seed))
      .Bool("no-stop", "go on past a generated <|endoftext|> (default: stop there)")
      .Value("tokenizer", "DIR",
             "the GPT-2 encoder files (default: found in $GPTC_DATA, the install prefix or the "
             "source tree)");
  DeclareDeviceChoiceFlags(flags);
  return flags;
}

// The generation's options from the flags: a usage error names the flag;
// the prompt file or the tokenizer not found are errors of their own kind.
StatusOr<GenerateOptions> ReadGenerateOptions(const Flags& flags) {
  if (flags.positional().size() != 1) {
    return UsageError("generate takes one FILE.gptx (see gptrun generate --help)");
  }
  if (!flags.Has("resume")) {
    return UsageError("generate needs --resume CKPT_DIR: the parameters to generate with");
  }
  GenerateOptions o;
  o.artifact = flags.positional()[0];
  o.checkpoint = flags.Get("resume");
  ASSIGN_OR_RETURN(const DeviceFlags device, ReadDeviceFlags(flags));
  o.device = device.device;
  o.emu_checks = device.emu_checks;
  o.trust_artifact = device.trust_artifact;
  o.stop_at_end_of_text = !flags.Has("no-stop");
  if (flags.Has("prompt-file")) {
    StatusOr<std::string> text = ReadFile(flags.Get("prompt-file"));
    if (!text.ok()) return text.status().WithPrefix("--prompt-file");
    o.prompt = std::move(text).value();
  } else {
    o.prompt = flags.Get("prompt");
  }
  if (flags.Has("tokenizer")) {
    o.tokenizer_dir = flags.Get("tokenizer");
  } else if (StatusOr<std::string> found = FindTokenizerDir(); found.ok()) {
    o.tokenizer_dir = *found;
  } else {
    return found.status().WithPrefix("generate needs the tokenizer");
  }
  int64_t seed = 0, gpu = -1;
  RETURN_IF_ERROR(flags.ReadInts({{"max-tokens", &o.max_tokens, 1},
                                  {"top-k", &o.top_k, 0},
                                  {"seed", &seed, 0},
                                  {"gpu", &gpu, 0}}));
  o.seed = static_cast<uint64_t>(seed);
  o.gpu = static_cast<int>(gpu);
  StatusOr<double> t = flags.GetDouble("temperature", o.temperature);
  if (!t.ok()) return t.status().WithCode(StatusCode::kUsage);
  if (!std::isfinite(*t) || *t < 0) {
    return UsageError("--temperature must be a finite number >= 0, got {}", *t);
  }
  o.temperature = *t;
  return o;
}

}  // namespace

int GenerateMain(int argc, char** argv) {
  Flags flags = DeclareGenerateFlags();
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return FailWith("gptrun", s);
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  StatusOr<GenerateOptions> o = ReadGenerateOptions(flags);
  if (!o.ok()) return FailWith("gptrun", o.status());
  GenerateResult result;
  const int code = Generate(*o, &result);
  if (code != 0) return FailWith("gptrun", code, Error("{}", result.error));
  return 0;
}

}  // namespace gptc::tools
