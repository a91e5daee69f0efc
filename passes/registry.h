// The registry of every graph pass in passes/, by name.
#ifndef GPTC_PASSES_REGISTRY_H_
#define GPTC_PASSES_REGISTRY_H_

#include "compiler/pass/registry.h"

namespace gptc::passes {

// The registry holding every pass of this folder.
const pass::PassRegistry& AllPasses();

}  // namespace gptc::passes

#endif  // GPTC_PASSES_REGISTRY_H_
