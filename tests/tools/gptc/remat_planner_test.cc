#include "tools/gptc/remat_planner.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace gptc::tools {
namespace {

using P = RematPolicy;

// What one block costs under a policy in the slices below.
struct Cost {
  P policy;
  int64_t layer, transient, transient_below_none;
  double us;
};
// none 100 bytes and 100 us a block, dots 90 and 130, wide 50 and 115 (30
// bytes of transient, 10 below none), block 30 and 140 (60, 20 below none).
std::vector<Cost> Costs(int64_t dots_layer = 90) {
  return {{P::kNone, 100, 0, 0, 100},
          {P::kDots, dots_layer, 0, 0, 130},
          {P::kWide, 50, 30, 10, 115},
          {P::kBlock, 30, 60, 20, 140}};
}

// The slices of a model of those costs beside 1000 bytes and 500 us of the
// rest (embeddings, head, optimizer).
std::vector<RematSlice> Slices(const std::vector<Cost>& costs) {
  std::vector<RematSlice> slices;
  for (const Cost& c : costs) {
    for (int blocks : {2, 3}) {
      slices.push_back({.policy = c.policy,
                        .blocks = blocks,
                        .arena_bytes = 1000 + blocks * c.layer + c.transient,
                        .time_us = 500 + blocks * c.us});
    }
    if (c.policy != P::kNone) {
      slices.push_back({.policy = c.policy,
                        .blocks = 3,
                        .below_none = true,
                        .arena_bytes = 1000 + c.layer + 2 * 100 + c.transient_below_none,
                        .time_us = 500 + c.us + 2 * 100});
    }
  }
  return slices;
}

TEST(RematPlannerTest, TheModelIsExactForUniformPlans) {
  const RematCostModel model = RematCostModel::Fit(Slices(Costs()), 12).value();
  EXPECT_EQ(model.cost(P::kNone).layer_bytes, 100);
  EXPECT_EQ(model.cost(P::kBlock).layer_bytes, 30);
  EXPECT_EQ(model.cost(P::kBlock).transient_bytes, 60);
  EXPECT_EQ(model.cost(P::kDots).transient_bytes, 0);
  EXPECT_EQ(model.cost(P::kBlock).transient_below_none, 20);
  // Below a none block, the hidden transient counts.
  EXPECT_EQ(model.ArenaBytes({P::kBlock, P::kNone, P::kNone}), 1000 + 30 + 2 * 100 + 20);
  EXPECT_EQ(model.ArenaBytes({P::kNone, P::kBlock}), 1000 + 30 + 100 + 60);
  EXPECT_EQ(model.ArenaBytes(std::vector<P>(12, P::kNone)), 1000 + 12 * 100);
  EXPECT_EQ(model.ArenaBytes(std::vector<P>(12, P::kBlock)), 1000 + 12 * 30 + 60);
  EXPECT_DOUBLE_EQ(model.TimeUs(std::vector<P>(12, P::kDots)), 500 + 12 * 130);
  // Recomputing blocks go to the bottom.
  EXPECT_EQ(model.cost(P::kWide).transient_below_none, 10);
  EXPECT_EQ(model.Plan({2, 1, 1, 2}),
            (std::vector<P>{P::kBlock, P::kBlock, P::kWide, P::kDots, P::kNone, P::kNone}));
}

TEST(RematPlannerTest, TheOtherEntriesArenasCount) {
  // The logits and eval entries: 200 bytes and 5 a block, whatever the plan.
  std::vector<RematSlice> slices = Slices(Costs());
  for (RematSlice& s : slices) {
    if (s.policy == P::kNone) s.other_bytes = 200 + 5 * s.blocks;
  }
  const RematCostModel model = RematCostModel::Fit(slices, 12).value();
  EXPECT_EQ(model.other_bytes(), 200 + 5 * 12);
  EXPECT_EQ(model.ArenaBytes(std::vector<P>(12, P::kNone)), 1000 + 12 * 100 + 260);
  EXPECT_EQ(model.ArenaBytes(std::vector<P>(12, P::kBlock)), 1000 + 12 * 30 + 60 + 260);
  StatusOr<EstimatedPlan> none_fits = ChooseRematPlan(model, 1000 + 12 * 100 + 260);
  ASSERT_TRUE(none_fits.ok());
  EXPECT_EQ(FormatRematPlan(none_fits->layers), "none:0-11");
  StatusOr<EstimatedPlan> less = ChooseRematPlan(model, 1000 + 12 * 100 + 259);
  ASSERT_TRUE(less.ok());
  EXPECT_NE(FormatRematPlan(less->layers), "none:0-11");
}

TEST(RematPlannerTest, TheFastestPlanThatFitsIsChosen) {
  const int blocks = 6;
  const RematCostModel model = RematCostModel::Fit(Slices(Costs()), blocks).value();
  // Every assignment of a policy to each block, by brute force.
  std::vector<std::vector<P>> all;
  std::vector<P> plan(blocks);
  std::function<void(int)> fill = [&](int b) {
    if (b == blocks) {
      all.push_back(plan);
      return;
    }
    for (P p : kPlanPolicies) {
      plan[b] = p;
      fill(b + 1);
    }
  };
  fill(0);
  for (int64_t budget = 1000 + blocks * 30 + 60; budget <= 1000 + blocks * 100; budget += 17) {
    StatusOr<EstimatedPlan> chosen = ChooseRematPlan(model, budget);
    ASSERT_TRUE(chosen.ok()) << budget << ": " << chosen.status().message();
    EXPECT_TRUE(chosen->fits);
    EXPECT_LE(chosen->arena_bytes, budget);
    for (const std::vector<P>& other : all) {
      if (model.ArenaBytes(other) <= budget) {
        EXPECT_LE(chosen->time_us, model.TimeUs(other))
            << "budget " << budget << ": " << FormatRematPlan(chosen->layers) << " vs "
            << FormatRematPlan(other);
      }
    }
    const EstimatedPlan greedy = GreedyRematPlan(model, budget);
    if (greedy.fits) {
      EXPECT_LE(chosen->time_us, greedy.time_us);
    }
  }
}

TEST(RematPlannerTest, TwoPlansFitAndTheFasterWins) {
  const RematCostModel model = RematCostModel::Fit(Slices(Costs(95)), 4).value();
  // Recomputing one block under block (+40 us) or two under wide (+30 us)
  // fits 1350 bytes: the wide pair wins; so does every block under block,
  // slower still.
  const int64_t budget = 1350;
  EXPECT_EQ(model.ArenaBytes({P::kBlock, P::kNone, P::kNone, P::kNone}), 1350);
  EXPECT_EQ(model.ArenaBytes({P::kWide, P::kWide, P::kNone, P::kNone}), 1310);
  const EstimatedPlan chosen = ChooseRematPlan(model, budget).value();
  EXPECT_EQ(FormatRematPlan(chosen.layers), "wide:0-1,none:2-3");
  EXPECT_DOUBLE_EQ(chosen.recompute_us, 30);
  EXPECT_LE(model.ArenaBytes(std::vector<P>(4, P::kBlock)), budget);
  EXPECT_LT(chosen.time_us, model.TimeUs(std::vector<P>(4, P::kBlock)));
  const std::string table = RenderPlanComparison(model, budget, chosen);
  for (const char* row : {"none", "dots", "wide", "block", "greedy", "chosen"}) {
    EXPECT_NE(table.find(std::string("  ") + row + " "), std::string::npos) << row << "\n" << table;
  }
}

TEST(RematPlannerTest, NothingFitsNamesTheSmallestArenaAndTheBudget) {
  const RematCostModel model = RematCostModel::Fit(Slices(Costs()), 4).value();
  StatusOr<EstimatedPlan> chosen = ChooseRematPlan(model, 1000);
  ASSERT_FALSE(chosen.ok());
  EXPECT_EQ(chosen.status().code(), StatusCode::kResource);
  const std::string& message = chosen.status().message();
  EXPECT_NE(message.find("(1000 bytes)"), std::string::npos) << message;
  EXPECT_NE(message.find("(1180 bytes, plan block:0-3)"), std::string::npos) << message;
  EXPECT_FALSE(GreedyRematPlan(model, 1000).fits);
}

TEST(RematPlannerTest, MissingSlicesAreNamed) {
  std::vector<RematSlice> slices = Slices(Costs());
  slices.pop_back();  // block 0 under block below none
  slices.pop_back();  // block at 3 blocks
  StatusOr<RematCostModel> model = RematCostModel::Fit(slices, 12);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("under block"), std::string::npos)
      << model.status().message();
}

}  // namespace
}  // namespace gptc::tools
