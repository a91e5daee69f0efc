#include "passes/registry.h"

#include "passes/autodiff.h"
#include "passes/dce.h"

namespace gptc::passes {

const pass::PassRegistry& AllPasses() {
  static const pass::PassRegistry* registry = [] {
    auto* r = new pass::PassRegistry();
    r->Register("autodiff", "rewrite the entry to return (loss, gradients of float parameters)",
                [] { return std::make_unique<Autodiff>(); });
    r->Register("dce", "remove unused instructions and uncalled computations",
                [] { return std::make_unique<Dce>(); });
    return r;
  }();
  return *registry;
}

}  // namespace gptc::passes
