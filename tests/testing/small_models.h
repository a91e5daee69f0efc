// Small modules that several pass tests train: big enough to have a matrix
// parameter (decayed by AdamW), a vector one (not decayed) and integer data,
// small enough to check by hand.
#ifndef GPTC_TESTS_TESTING_SMALL_MODELS_H_
#define GPTC_TESTS_TESTING_SMALL_MODELS_H_

#include <initializer_list>
#include <memory>
#include <string_view>

#include "models/config.h"
#include "models/gpt2.h"
#include "passes/autodiff.h"
#include "passes/dce.h"
#include "passes/registry.h"
#include "tests/testing/pass_harness.h"

namespace gptc::testing {

// loss = sum(w * broadcast(x)) + sum(b * b): d/dw[i][j] = x[j], d/db = 2b.
// w is a matrix (decays), b a vector (does not), x data.
inline constexpr char kLinearLossModule[] = R"(module m
ENTRY %main {
  %w = f32[3,4] parameter(0)
  %b = f32[4] parameter(1)
  %x = s32[4] parameter(2)
  %xf = f32[4] convert(%x)
  %bx = f32[3,4] broadcast(%xf), dimensions={1}
  %wx = f32[3,4] mul(%w, %bx)
  %s1 = f32[] reduce(%wx), dimensions={0,1}, kind=sum
  %b2 = f32[4] mul(%b, %b)
  %s2 = f32[] reduce(%b2), dimensions={0}, kind=sum
  ROOT %loss = f32[] add(%s1, %s2)
}
)";

// `text` parsed, differentiated (the root becomes (loss, gradients...)) and
// cleaned of dead code.
inline std::unique_ptr<ir::Module> Differentiated(std::string_view text) {
  std::unique_ptr<ir::Module> module = ParseOrDie(text);
  EXPECT_TRUE(passes::Autodiff().Run(*module).ok());
  EXPECT_TRUE(passes::Dce().Run(*module).ok());
  return module;
}

// One layer of gpt2-tiny narrowed to width 32 (batch 1, seq 8), traced and
// run through `passes` (registry names, in order): the train steps the
// fusion tests fuse. Null, with the failure recorded, when a pass fails.
inline std::unique_ptr<ir::Module> TinyGpt2Step(std::initializer_list<const char*> passes) {
  models::GptConfig config = models::FindGptConfig("gpt2-tiny").value();
  config.width = 32;
  config.layers = 1;
  auto traced = models::TraceGpt2Forward(config, 1, 8);
  if (!traced.ok()) {
    ADD_FAILURE() << traced.status().message();
    return nullptr;
  }
  std::unique_ptr<ir::Module> module = std::move(traced->module);
  for (const char* name : passes) {
    auto p = passes::AllPasses().Create(name);
    const Status status = p.ok() ? (*p)->Run(*module).status() : p.status();
    if (!status.ok()) {
      ADD_FAILURE() << name << ": " << status.message();
      return nullptr;
    }
  }
  return module;
}

}  // namespace gptc::testing

#endif  // GPTC_TESTS_TESTING_SMALL_MODELS_H_
