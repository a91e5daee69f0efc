#include "tools/gptc/remat_search.h"

#include <fmt/format.h>

#include <memory>
#include <vector>

#include "compiler/analysis/buffer_assignment.h"
#include "compiler/analysis/fusion_report.h"
#include "models/gpt2.h"
#include "passes/train_step.h"

namespace gptc::tools {
namespace {

// One slice: the model with `blocks` blocks, every block under `policy`; its
// train entry's (train_step, or accumulate) arena and roofline time, and
// under none grad-accum's apply arena too.
StatusOr<RematSlice> CompileSlice(const CompileOptions& whole, int blocks,
                                  passes::RematPolicy policy, bool below_none) {
  CompileOptions options = whole;
  options.config.layers = blocks;
  ASSIGN_OR_RETURN(frontend::TracedModule traced,
                   models::TraceGpt2Forward(options.config, options.batch, options.seq));
  const bool others = policy == passes::RematPolicy::kNone && !below_none;
  passes::TrainStepOptions train = options.train;
  train.remat = {.policy = policy};
  if (below_none) {
    train.remat.layers.assign(blocks, passes::RematPolicy::kNone);
    train.remat.layers[0] = policy;
  }
  train.optimize = true;
  train.dumps = nullptr;
  train.pipeline.timings = nullptr;
  train.pipeline.on_pass = nullptr;
  ASSIGN_OR_RETURN(
      program::TrainProgram program,
      passes::BuildTrainProgram(std::move(traced.module), traced.params, traced.inputs, train));
  RematSlice slice{.policy = policy, .blocks = blocks, .below_none = below_none};
  for (size_t i = 0; i < (others ? program.entries.size() : 1); ++i) {
    const program::TrainEntry& e = program.entries[i];
    ASSIGN_OR_RETURN(analysis::BufferAssignment assignment,
                     analysis::AssignBuffers(*e.module, analysis::DonationOptions(e.signature)));
    (i == 0 ? slice.arena_bytes : slice.other_bytes) += assignment.arena_size();
  }
  const program::TrainEntry& entry = program.entries.front();
  for (const analysis::KernelRow& row :
       analysis::AnalyzeKernels(*entry.module, options.roofline_gpu)) {
    slice.time_us += row.time_us;
  }
  return slice;
}

}  // namespace

StatusOr<RematCostModel> MeasureRematCosts(const CompileOptions& options) {
  const int blocks = static_cast<int>(options.config.layers);
  const int shallow = blocks >= 3 ? 2 : 1;
  std::vector<RematSlice> slices;
  for (passes::RematPolicy policy : kPlanPolicies) {
    for (int depth : {shallow, shallow + 1, -1}) {
      const bool below_none = depth < 0;
      if (below_none && policy == passes::RematPolicy::kNone) continue;
      if (below_none) depth = shallow + 1;
      StatusOr<RematSlice> slice = CompileSlice(options, depth, policy, below_none);
      if (!slice.ok()) {
        return slice.status().WithPrefix(
            fmt::format("remat auto: the {}-block slice with {} under {}", depth,
                        below_none ? "block 0" : "every block", passes::RematPolicyName(policy)));
      }
      slices.push_back(*slice);
    }
  }
  return RematCostModel::Fit(slices, blocks);
}

StatusOr<RematSearch> SearchRematPlan(const CompileOptions& options, int64_t budget_bytes) {
  ASSIGN_OR_RETURN(RematCostModel model, MeasureRematCosts(options));
  ASSIGN_OR_RETURN(EstimatedPlan chosen, ChooseRematPlan(model, budget_bytes));
  std::string comparison = RenderPlanComparison(model, budget_bytes, chosen);
  return RematSearch{.chosen = std::move(chosen), .comparison = std::move(comparison)};
}

}  // namespace gptc::tools
