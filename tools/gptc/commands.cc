#include "tools/gptc/commands.h"

#include "tools/common/flags.h"

namespace gptc::tools {

int Fail(int code, const Status& status) { return FailWith("gptc", code, status); }
int Fail(const Status& status) { return FailWith("gptc", status); }

}  // namespace gptc::tools
