// `--remat auto` as one object: it searches the plan per block for the
// memory budget (remat_search.h), compiles with it, and checks the real
// arenas against the budget (Note [per-block remat plans] in
// tools/gptc/remat_planner.h).
#ifndef GPTC_TOOLS_GPTC_REMAT_AUTO_H_
#define GPTC_TOOLS_GPTC_REMAT_AUTO_H_

#include <cstdint>

#include "compiler/support/status.h"
#include "tools/gptc/compile_program.h"
#include "tools/gptc/remat_search.h"

namespace gptc::tools {

// Note [remat auto retries]: where the slice model underestimates, or the
// fallbacks' scratch (which the slices leave out) pushes the arenas over,
// the plan is chosen again for its own estimate less the excess: the next
// plan's real arenas, short of their estimate by as much, then fit. After
// kAttempts plans that do not fit, the compile fails naming the last.
class RematAuto {
 public:
  static constexpr int kAttempts = 3;

  // `options` (remat policy kAuto, memory_budget set) must outlive the object.
  RematAuto(const CompileOptions& options, CompileProgress progress)
      : options_(options), progress_(std::move(progress)), target_(options.memory_budget) {}

  // The compile with the first chosen plan whose arenas fit the budget.
  StatusOr<CompileResult> Compile();

 private:
  // Chooses the plan whose estimate fits target_, and writes the comparison
  // of plans where the memory report goes (stdout, the dump dir). Returns
  // its seconds.
  StatusOr<double> Search();
  // One compile of the chosen plan; sets over_ when its arenas exceed the
  // budget.
  StatusOr<CompileResult> CompileChosen(double search_seconds);

  const CompileOptions& options_;
  CompileProgress progress_;
  int64_t target_;  // what the plan's estimate must fit: the budget less any excess
  RematSearch search_;
  int64_t over_ = 0;  // how far the last compile's arenas came over the budget
};

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTC_REMAT_AUTO_H_
