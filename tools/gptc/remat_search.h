// `--remat auto`: the slice compiles that measure each remat policy on this
// model, batch and sequence, and the per-block plan they choose for a memory
// budget (Note [per-block remat plans] in tools/gptc/remat_planner.h).
#ifndef GPTC_TOOLS_GPTC_REMAT_SEARCH_H_
#define GPTC_TOOLS_GPTC_REMAT_SEARCH_H_

#include <cstdint>
#include <string>

#include "compiler/support/status.h"
#include "tools/gptc/compile_options.h"
#include "tools/gptc/remat_planner.h"

namespace gptc::tools {

struct RematSearch {
  EstimatedPlan chosen;
  // The uniform plans, the greedy one and the chosen one, with their
  // estimates (RenderPlanComparison).
  std::string comparison;
};

// Compiles `options`' model with 2 and 3 blocks (1 and 2 when it has fewer
// than 3) under none, dots, wide and block, and 3 (2) with block 0 under each
// recomputing policy below none, through buffer assignment (Note [per-block
// remat plans]), and chooses the fastest plan whose estimated arenas fit
// `budget_bytes` (the logits, eval and score entries run in the train arena: Note
// [arena guests] in compiler/program/plan.h). Errors name the slice that
// failed, or the least memory and the budget.
StatusOr<RematSearch> SearchRematPlan(const CompileOptions& options, int64_t budget_bytes);

// The cost model alone, from the same slices.
StatusOr<RematCostModel> MeasureRematCosts(const CompileOptions& options);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTC_REMAT_SEARCH_H_
