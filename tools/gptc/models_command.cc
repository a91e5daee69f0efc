// gptc models: the model configs and their parameter counts.
#include <cstdio>
#include <optional>

#include "models/config.h"
#include "tools/common/flags.h"
#include "tools/gptc/commands.h"

namespace gptc::tools {

int ModelsCommand(int argc, char** argv) {
  Flags flags("gptc models", "",
              "Lists the model configs: layers, heads, width, context length, and the parameter "
              "count with the real vocabulary (params) and with the padded one the compiled "
              "module holds (padded).");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  if (!flags.positional().empty()) {
    return Fail(UsageError("models: unexpected argument '{}'", flags.positional()[0]));
  }
  // "params" uses the real 50,257-token vocabulary (the published counts);
  // "padded" the 50,304-row table the compiled module actually holds.
  std::printf("%-12s %6s %6s %6s %6s %15s %15s\n", "model", "layers", "heads", "width", "seq",
              "params", "padded");
  for (const models::GptConfig& c : models::GptConfigs()) {
    std::printf("%-12s %6lld %6lld %6lld %6lld %15s %15s\n", c.name.c_str(),
                static_cast<long long>(c.layers), static_cast<long long>(c.heads),
                static_cast<long long>(c.width), static_cast<long long>(c.positions),
                WithThousands(models::ParameterCount(c, c.vocab)).c_str(),
                WithThousands(models::ParameterCount(c, c.padded_vocab)).c_str());
  }
  return 0;
}

}  // namespace gptc::tools
