#include "tools/gptc/remat_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "compiler/support/text.h"

namespace gptc::tools {
namespace {

int PolicyIndex(RematPolicy policy) {
  for (int i = 0; i < kNumPlanPolicies; ++i) {
    if (kPlanPolicies[i] == policy) return i;
  }
  return -1;
}

EstimatedPlan Estimate(const RematCostModel& model, std::string name,
                       std::vector<RematPolicy> layers, int64_t budget_bytes) {
  EstimatedPlan plan{.name = std::move(name), .layers = std::move(layers)};
  plan.arena_bytes = model.ArenaBytes(plan.layers);
  plan.time_us = model.TimeUs(plan.layers);
  plan.recompute_us =
      plan.time_us - model.TimeUs(std::vector<RematPolicy>(model.blocks(), RematPolicy::kNone));
  plan.fits = plan.arena_bytes <= budget_bytes;
  return plan;
}

}  // namespace

StatusOr<RematCostModel> RematCostModel::Fit(const std::vector<RematSlice>& slices, int blocks,
                                             int64_t fixed_bytes) {
  if (blocks < 1) return Error("remat planner: a model of {} blocks has nothing to plan", blocks);
  // (policy, depth) -> slice; the two depths are the smallest two measured.
  std::map<std::pair<int, int>, const RematSlice*> by_key;
  std::vector<int> depths;
  std::map<int, const RematSlice*> below_none;
  for (const RematSlice& s : slices) {
    const int p = PolicyIndex(s.policy);
    if (p < 0) return Error("remat planner: a slice under {}", RematPolicyName(s.policy));
    if (s.below_none) {
      below_none[p] = &s;
      continue;
    }
    by_key[{p, s.blocks}] = &s;
    if (std::find(depths.begin(), depths.end(), s.blocks) == depths.end()) {
      depths.push_back(s.blocks);
    }
  }
  std::sort(depths.begin(), depths.end());
  if (depths.size() < 2 || depths[0] < 1) {
    return Error("remat planner: needs slices of two depths, got {}", depths.size());
  }
  const int d0 = depths[0], d1 = depths[1];
  RematCostModel model;
  model.blocks_ = blocks;
  std::array<int64_t, kNumPlanPolicies> intercept{};
  for (int p = 0; p < kNumPlanPolicies; ++p) {
    auto a = by_key.find({p, d0}), b = by_key.find({p, d1});
    if (a == by_key.end() || b == by_key.end()) {
      return Error("remat planner: no slices of {} and {} blocks under {}", d0, d1,
                   RematPolicyName(kPlanPolicies[p]));
    }
    const int64_t span = d1 - d0;
    BlockCost& c = model.costs_[p];
    c.layer_bytes = (b->second->arena_bytes - a->second->arena_bytes) / span;
    c.layer_us = (b->second->time_us - a->second->time_us) / static_cast<double>(span);
    intercept[p] = a->second->arena_bytes - d0 * c.layer_bytes;
  }
  const int none = PolicyIndex(RematPolicy::kNone);
  model.base_bytes_ = intercept[none];
  const RematSlice& s0 = *by_key[{none, d0}];
  const RematSlice& s1 = *by_key[{none, d1}];
  const int64_t other_per_block = (s1.other_bytes - s0.other_bytes) / (d1 - d0);
  model.other_bytes_ = s0.other_bytes + (blocks - d0) * other_per_block + fixed_bytes;
  model.base_us_ = by_key[{none, d0}]->time_us - d0 * model.costs_[none].layer_us;
  for (int p = 0; p < kNumPlanPolicies; ++p) {
    BlockCost& c = model.costs_[p];
    c.transient_bytes = std::max<int64_t>(0, intercept[p] - intercept[none]);
    if (p == none) continue;
    auto it = below_none.find(p);
    if (it == below_none.end()) {
      return Error("remat planner: no slice with block 0 under {} below none blocks",
                   RematPolicyName(kPlanPolicies[p]));
    }
    const RematSlice& mixed = *it->second;
    const int64_t uniform =
        model.base_bytes_ + c.layer_bytes + (mixed.blocks - 1) * model.costs_[none].layer_bytes;
    c.transient_below_none = std::clamp<int64_t>(mixed.arena_bytes - uniform, 0, c.transient_bytes);
  }
  return model;
}

const BlockCost& RematCostModel::cost(RematPolicy policy) const {
  return costs_[std::max(0, PolicyIndex(policy))];
}

std::vector<RematPolicy> RematCostModel::Plan(
    const std::array<int, kNumPlanPolicies>& counts) const {
  std::vector<RematPolicy> plan;
  for (int p = 0; p < kNumPlanPolicies; ++p) {
    plan.insert(plan.end(), counts[p], kPlanPolicies[p]);
  }
  return plan;
}

int64_t RematCostModel::ArenaBytes(const std::vector<RematPolicy>& plan) const {
  const bool none_on_top = !plan.empty() && plan.back() == RematPolicy::kNone;
  int64_t bytes = base_bytes_, transient = 0;
  for (RematPolicy p : plan) {
    bytes += cost(p).layer_bytes;
    transient =
        std::max(transient, none_on_top ? cost(p).transient_below_none : cost(p).transient_bytes);
  }
  return bytes + transient + other_bytes_;
}

double RematCostModel::TimeUs(const std::vector<RematPolicy>& plan) const {
  double us = base_us_;
  for (RematPolicy p : plan) us += cost(p).layer_us;
  return us;
}

namespace {

// Calls `visit` with every split of the blocks into the policies' counts,
// stacked as RematCostModel::Plan stacks them.
template <typename Fn>
void ForEachPlan(const RematCostModel& model, Fn&& visit) {
  std::array<int, kNumPlanPolicies> counts{};
  const int none = PolicyIndex(RematPolicy::kNone);
  auto split = [&](auto&& self, int p, int left) -> void {
    if (p == kNumPlanPolicies) {
      counts[none] = left;
      visit(model.Plan(counts));
      return;
    }
    if (p == none) return self(self, p + 1, left);
    for (int n = 0; n <= left; ++n) {
      counts[p] = n;
      self(self, p + 1, left - n);
    }
    counts[p] = 0;
  };
  split(split, 0, model.blocks());
}

}  // namespace

EstimatedPlan SmallestRematPlan(const RematCostModel& model) {
  std::optional<EstimatedPlan> smallest;
  ForEachPlan(model, [&](std::vector<RematPolicy> layers) {
    EstimatedPlan plan = Estimate(model, "smallest", std::move(layers), 0);
    if (!smallest || plan.arena_bytes < smallest->arena_bytes) smallest = std::move(plan);
  });
  return *smallest;
}

StatusOr<EstimatedPlan> ChooseRematPlan(const RematCostModel& model, int64_t budget_bytes) {
  std::optional<EstimatedPlan> best;
  ForEachPlan(model, [&](std::vector<RematPolicy> layers) {
    EstimatedPlan plan = Estimate(model, "chosen", std::move(layers), budget_bytes);
    if (plan.fits && (!best || plan.time_us < best->time_us ||
                      (plan.time_us == best->time_us && plan.arena_bytes < best->arena_bytes))) {
      best = std::move(plan);
    }
  });
  if (!best) {
    const EstimatedPlan smallest = SmallestRematPlan(model);
    return ResourceError(
        "remat auto: no plan fits the memory budget {} ({} bytes): all entries' arenas take at "
        "least {} ({} bytes, plan {}); use a smaller batch or sequence, or a larger "
        "--memory-budget",
        FormatBytes(budget_bytes), budget_bytes, FormatBytes(smallest.arena_bytes),
        smallest.arena_bytes, FormatRematPlan(smallest.layers));
  }
  return *best;
}

EstimatedPlan GreedyRematPlan(const RematCostModel& model, int64_t budget_bytes) {
  std::array<int, kNumPlanPolicies> counts{};
  const int none = PolicyIndex(RematPolicy::kNone);
  counts[none] = model.blocks();
  EstimatedPlan plan = Estimate(model, "greedy", model.Plan(counts), budget_bytes);
  while (!plan.fits && counts[none] > 0) {
    // The step from none that saves the most bytes per microsecond it adds.
    int step = -1;
    double best_rate = 0;
    for (int p = 0; p < kNumPlanPolicies; ++p) {
      if (p == none) continue;
      const double saved = static_cast<double>(model.cost(RematPolicy::kNone).layer_bytes -
                                               model.cost(kPlanPolicies[p]).layer_bytes);
      const double added = std::max(
          1e-9, model.cost(kPlanPolicies[p]).layer_us - model.cost(RematPolicy::kNone).layer_us);
      if (saved > 0 && (step < 0 || saved / added > best_rate)) {
        step = p;
        best_rate = saved / added;
      }
    }
    if (step < 0) break;
    ++counts[step];
    --counts[none];
    plan = Estimate(model, "greedy", model.Plan(counts), budget_bytes);
  }
  return plan;
}

std::string RenderPlanComparison(const RematCostModel& model, int64_t budget_bytes,
                                 const EstimatedPlan& chosen) {
  std::vector<EstimatedPlan> rows;
  for (RematPolicy p :
       {RematPolicy::kNone, RematPolicy::kDots, RematPolicy::kWide, RematPolicy::kBlock}) {
    rows.push_back(Estimate(model, std::string(RematPolicyName(p)),
                            std::vector<RematPolicy>(model.blocks(), p), budget_bytes));
  }
  rows.push_back(GreedyRematPlan(model, budget_bytes));
  rows.push_back(chosen);
  std::string out = fmt::format(
      "remat plans for a budget of {} (estimates of the slice model; arenas of all entries{}):\n",
      FormatBytes(budget_bytes),
      model.other_bytes() > 0
          ? fmt::format(", {} of them beside the train step's", FormatBytes(model.other_bytes()))
          : "");
  out += fmt::format("  {:<8} {:>11} {:>12} {:>12}  {:<4}  {}\n", "plan", "arenas", "est. ms",
                     "recompute ms", "fits", "blocks");
  for (const EstimatedPlan& r : rows) {
    out += fmt::format("  {:<8} {:>11} {:>12.3f} {:>12.3f}  {:<4}  {}\n", r.name,
                       FormatBytes(r.arena_bytes), r.time_us / 1e3, r.recompute_us / 1e3,
                       r.fits ? "yes" : "no", FormatRematPlan(r.layers));
  }
  return out;
}

}  // namespace gptc::tools
