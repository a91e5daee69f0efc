#include "tools/gptc/commands.h"

#include "tools/common/flags.h"

namespace gptc::tools {

int Fail(int code, const Status& status) { return FailWith("gptc", code, status); }

std::string WithThousands(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

}  // namespace gptc::tools
