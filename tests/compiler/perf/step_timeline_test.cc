// A step's timeline read off a hand-made plan (Note [gradient readiness] in
// compiler/perf/step_timeline.h): the gradients of a --dp 1 plan from its
// buffers, of a --dp N plan from its all-reduces, the same either way.
#include "compiler/perf/step_timeline.h"

#include <gtest/gtest.h>

#include <vector>

namespace gptc::perf {
namespace {

using program::ArenaSlice;
using program::BufferCategory;
using program::Thunk;
using program::ThunkGroup;
using program::ThunkRole;

constexpr ArenaSlice kActivation{0, 512, 0}, kGrad1{1024, 400, 1}, kGrad2{2048, 800, 2};

Thunk Kernel(std::vector<ArenaSlice> args, int64_t operands, ir::Phase phase, ThunkGroup group) {
  return {.name = "k",
          .body = program::KernelThunk{.args = std::move(args), .operands = operands},
          .role = ThunkRole{.phase = phase, .group = group}};
}

Thunk AllReduce(const ArenaSlice& s, int64_t count) {
  return {.name = "ar",
          .body = program::AllReduceThunk{.count = count, .in = s, .out = s},
          .role = ThunkRole{.phase = ir::Phase::kGradient, .group = ThunkGroup::kBlock}};
}

// forward (10 µs), the parameters' cast (5), a gemm finishing gradient 1
// (20), a kernel finishing gradient 2 (30), the optimizer (7) reading both;
// with `dp`, an all-reduce after each gradient.
program::EntryPlan Plan(bool dp, std::vector<double>& us) {
  program::EntryPlan e;
  e.buffers = {
      {.id = 0, .name = "act", .slice = kActivation, .category = BufferCategory::kActivation},
      {.id = 1, .name = "g1", .slice = kGrad1, .category = BufferCategory::kGradient},
      {.id = 2, .name = "g2", .slice = kGrad2, .category = BufferCategory::kGradient}};
  auto add = [&](Thunk t, double time) {
    t.index = static_cast<int64_t>(e.thunks.size());
    e.thunks.push_back(std::move(t));
    us.push_back(time);
  };
  add(Kernel({kActivation}, 0, ir::Phase::kForward, ThunkGroup::kBlock), 10);
  add(Kernel({kActivation}, 0, ir::Phase::kParamCast, ThunkGroup::kParamCast), 5);
  program::GemmThunk gemm{.a = kActivation, .b = kActivation, .c = kGrad1, .d = kGrad1};
  add({.name = "gemm",
       .body = gemm,
       .role = ThunkRole{.phase = ir::Phase::kGradient, .group = ThunkGroup::kBlock}},
      20);
  if (dp) add(AllReduce(kGrad1, 100), 0);
  add(Kernel({kActivation, kGrad2}, 1, ir::Phase::kGradient, ThunkGroup::kEmbedding), 30);
  if (dp) add(AllReduce(kGrad2, 200), 0);
  add(Kernel({kGrad1, kGrad2}, 2, ir::Phase::kUpdate, ThunkGroup::kOptimizer), 7);
  return e;
}

TEST(StepTimelineTest, GradientsFromBuffersAndFromAllReducesAgree) {
  for (bool dp : {false, true}) {
    std::vector<double> us;
    const program::EntryPlan e = Plan(dp, us);
    StatusOr<StepTimeline> t = StepTimelineOf(e, us, 999, 64);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_EQ(t->forward_us, 15) << dp;
    EXPECT_EQ(t->backward_end_us, 65);
    EXPECT_EQ(t->optimizer_us, 7);
    EXPECT_EQ(t->param_cast_us, 5);
    EXPECT_EQ(t->gather_bytes, 999);
    EXPECT_EQ(t->tokens, 64);
    ASSERT_EQ(t->gradients.size(), 2u);
    EXPECT_EQ(t->gradients[0].bytes, 400);
    EXPECT_EQ(t->gradients[0].ready_us, 35);
    EXPECT_EQ(t->gradients[1].bytes, 800);
    EXPECT_EQ(t->gradients[1].ready_us, 65);
  }
}

// ZeRO-1's plan: each gradient's reduce-scatter counts with its whole
// (padded) operand, its NCCL count being the shard's; the gathers of the
// parameters are the model's to add (gather_bytes), not gradients.
TEST(StepTimelineTest, ReduceScattersCountTheirWholeGradient) {
  std::vector<double> us;
  program::EntryPlan e = Plan(true, us);
  for (Thunk& t : e.thunks) {
    if (auto* a = std::get_if<program::AllReduceThunk>(&t.body)) {
      a->collective = program::CollectiveOp::kReduceScatter;
      a->count /= 4;
    }
  }
  Thunk gather = AllReduce(kGrad1, 25);
  std::get<program::AllReduceThunk>(gather.body).collective = program::CollectiveOp::kAllGather;
  gather.index = static_cast<int64_t>(e.thunks.size());
  e.thunks.push_back(gather);
  us.push_back(0);
  StatusOr<StepTimeline> t = StepTimelineOf(e, us, 999, 64);
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->gradients.size(), 2u);
  EXPECT_EQ(t->gradients[0].bytes, 400);
  EXPECT_EQ(t->gradients[1].bytes, 800);
  EXPECT_EQ(t->gradients[1].ready_us, 65);
}

TEST(StepTimelineTest, RefusesMismatchedTimesAndPlansWithoutRoles) {
  std::vector<double> us;
  program::EntryPlan e = Plan(false, us);
  us.pop_back();
  StatusOr<StepTimeline> t = StepTimelineOf(e, us, 0, 1);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "plan entry train_step: 5 thunks but 4 times");
  us.push_back(7);
  e.thunks[2].role.reset();
  t = StepTimelineOf(e, us, 0, 1);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("has no role"), std::string::npos) << t.status().message();
}

}  // namespace
}  // namespace gptc::perf
