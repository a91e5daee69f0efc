// The pass contract (as XLA's HloPassInterface).
//
// A pass transforms a module in place and says whether it changed anything.
// Every pass test also asserts `false` on IR the pass must leave alone.
#ifndef GPTC_COMPILER_PASS_PASS_H_
#define GPTC_COMPILER_PASS_PASS_H_

#include <string_view>

#include "compiler/ir/module.h"
#include "compiler/support/status.h"

namespace gptc::pass {

class Pass {
 public:
  virtual ~Pass() = default;
  // Stable, lower-case, dash-separated: used by --pass=, --disable-pass= and dump names.
  virtual std::string_view Name() const = 0;
  // Returns whether the module changed, or an error naming what went wrong.
  virtual StatusOr<bool> Run(ir::Module& module) = 0;
};

}  // namespace gptc::pass

#endif  // GPTC_COMPILER_PASS_PASS_H_
