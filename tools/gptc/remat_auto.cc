#include "tools/gptc/remat_auto.h"

#include <chrono>
#include <cstdio>
#include <utility>

#include "compiler/support/file.h"
#include "compiler/support/text.h"

namespace gptc::tools {

StatusOr<CompileResult> RematAuto::Compile() {
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    ASSIGN_OR_RETURN(double search_seconds, Search());
    ASSIGN_OR_RETURN(CompileResult result, CompileChosen(search_seconds));
    if (over_ == 0) return result;
    target_ = search_.chosen.arena_bytes - over_;
  }
  return ResourceError("remat auto: the plan {} still needs {} more than the memory budget {}",
                       passes::FormatRematPlan(search_.chosen.layers), FormatBytes(over_),
                       FormatBytes(options_.memory_budget));
}

// The logits, eval and score entries run in the train arena (Note [arena guests] in
// compiler/program/plan.h) and are left out of the search; should one
// outgrow it, the check of all arenas finds the excess.
StatusOr<double> RematAuto::Search() {
  if (progress_) progress_("remat auto: compiling slices of the model under each policy", true);
  const auto start = std::chrono::steady_clock::now();
  StatusOr<RematSearch> search = SearchRematPlan(options_, target_);
  if (!search.ok() && target_ != options_.memory_budget) {
    return search.status().WithPrefix(
        fmt::format("remat auto: the arenas came out over their estimates, so the budget less "
                    "the excess ({})",
                    FormatBytes(target_)));
  }
  RETURN_IF_ERROR(search.status());
  search_ = std::move(*search);
  if (options_.print_memory_report) std::printf("%s", search_.comparison.c_str());
  if (!options_.dump_dir.empty()) {
    RETURN_IF_ERROR(
        WriteFileAtomically(options_.dump_dir + "/remat-plans.txt", search_.comparison));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

StatusOr<CompileResult> RematAuto::CompileChosen(double search_seconds) {
  CompileOptions chosen = options_;
  chosen.train.remat.layers = search_.chosen.layers;  // the policy stays kAuto: "auto: PLAN"
  const PlanBudget budget{.arena_bytes = options_.memory_budget,
                          .recompute_us = search_.chosen.recompute_us};
  ASSIGN_OR_RETURN(PlannedCompile compiled, CompileWithPlan(chosen, progress_, budget));
  over_ = compiled.over;
  std::vector<std::pair<std::string, double>>& timings = compiled.result.timings;
  timings.insert(timings.begin(), {"remat-search", search_seconds});
  return std::move(compiled.result);
}

}  // namespace gptc::tools
