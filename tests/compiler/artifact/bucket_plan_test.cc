// Note [all-reduce buckets] (passes/all_reduce_combiner.h): how the plan
// places the buckets the IR's `bucket=K` attributes give among its thunks.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "compiler/analysis/buffer_assignment.h"
#include "compiler/artifact/plan.h"
#include "compiler/ir/parser.h"

namespace gptc::artifact {
namespace {

// The combiner's buckets (tests/passes/all_reduce_combiner_test.cc): %a1 and
// %a2 together; %u reads %a1 before %a3, so %a3 starts a new one; %a4 (32
// MiB) is over the cap with %a3 and goes alone.
constexpr char kModule[] = R"(module buckets
ENTRY %main {
  %x = f32[1024] parameter(0)
  %big = f32[8388608] parameter(1)
  %g1 = f32[1024] exp(%x)
  %a1 = f32[1024] all-reduce(%g1), kind=sum, bucket=0
  %g2 = f32[1024] tanh(%x)
  %a2 = f32[1024] all-reduce(%g2), kind=sum, bucket=0
  %u = f32[1024] neg(%a1)
  %g3 = f32[1024] exp(%u)
  %a3 = f32[1024] all-reduce(%g3), kind=sum, bucket=1
  %g4 = f32[8388608] exp(%big)
  %a4 = f32[8388608] all-reduce(%g4), kind=sum, bucket=2
  ROOT %out = (f32[1024], f32[1024], f32[8388608]) tuple(%a2, %a3, %a4)
}
)";

// The plan of `text`'s entry, its parameters and root elements as data slots.
StatusOr<program::EntryPlan> PlanOf(const std::string& text) {
  ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> module, ir::ParseAndVerifyModule(text, "<test>"));
  program::TrainEntry entry{program::EntryRole::kTrainStep, std::move(module), {}};
  for (const ir::Instruction* p : entry.module->entry()->parameters()) {
    entry.signature.inputs.push_back({program::SlotRole::kData, -1, p->name(), p->shape()});
  }
  for (const ir::Shape& s : entry.module->entry()->root()->shape().tuple_elements()) {
    entry.signature.outputs.push_back({program::SlotRole::kData, -1, "out", s});
  }
  ASSIGN_OR_RETURN(analysis::BufferAssignment ba, analysis::AssignBuffers(*entry.module));
  PlanStats stats;
  return BuildEntryPlan(entry, ba, codegen::CompiledKernels{}, stats);
}

TEST(BucketPlanTest, PlacesTheIrBucketsAmongTheThunks) {
  StatusOr<program::EntryPlan> plan = PlanOf(kModule);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  // Checked as written (the codec's JSON).
  const nlohmann::json json = program::ToJson(*plan);

  // Thunks in order: g1 a1 g2 a2 u g3 a3 g4 a4 (every op is one thunk).
  const nlohmann::json& thunks = json["thunks"];
  ASSERT_EQ(thunks.size(), 9u);
  EXPECT_EQ(thunks[1]["bucket"], 0);
  EXPECT_EQ(thunks[3]["bucket"], 0);
  EXPECT_EQ(thunks[6]["bucket"], 1);
  EXPECT_EQ(thunks[8]["bucket"], 2);
  const nlohmann::json& buckets = json["buckets"];
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0]["members"], nlohmann::json::array({1, 3}));
  EXPECT_EQ(buckets[0]["issue_after"], 3);
  EXPECT_EQ(buckets[0]["wait_before"], 4);  // %u
  EXPECT_EQ(buckets[0]["bytes"], 2 * 4096);
  EXPECT_EQ(buckets[1]["members"], nlohmann::json::array({6}));
  EXPECT_EQ(buckets[1]["wait_before"], 9);  // only the caller reads %a3: the end
  EXPECT_EQ(buckets[2]["members"], nlohmann::json::array({8}));
  EXPECT_EQ(buckets[2]["bytes"], int64_t{32} << 20);
  // Each gradient is reduced in its own buffer (Note [in-place all-reduce]).
  for (int i : {1, 3, 6, 8}) EXPECT_EQ(thunks[i]["in"], thunks[i]["out"]) << i;
}

// IR that did not go through the combiner (gptc-opt without it): the plan
// decides no bucket itself and names the all-reduce.
TEST(BucketPlanTest, AnAllReduceWithoutABucketIsAnErrorNamingIt) {
  std::string text = kModule;
  for (const char* k : {", bucket=0", ", bucket=1", ", bucket=2"}) {
    for (size_t at; (at = text.find(k)) != std::string::npos;) text.erase(at, std::strlen(k));
  }
  StatusOr<program::EntryPlan> plan = PlanOf(text);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(),
            "%a1: all-reduce has no bucket (run all-reduce-combiner after the schedule)");
}

// ZeRO-1's collectives (Note [ZeRO-1 shards] in compiler/program/program.h):
// a reduce-scatter and an all-gather are collective thunks (kind all_reduce,
// `collective` naming which) in buckets of their own, placed as all-reduce
// buckets are; `count` is what NCCL takes (recvcount, sendcount); operand
// and result in separate buffers, the operand kept until the result's last
// reader (Note [in-place all-reduce]).
TEST(BucketPlanTest, ReduceScatterAndAllGatherAreCollectiveThunksInBuckets) {
  StatusOr<program::EntryPlan> plan = PlanOf(R"(module zero
ENTRY %main {
  %x = f32[1024] parameter(0)
  %g = f32[1024] exp(%x)
  %s = f32[512] reduce-scatter(%g), kind=sum, replicas=2, bucket=0
  %u = f32[512] neg(%s)
  %b = bf16[512] convert(%u)
  %a = bf16[1024] all-gather(%b), replicas=2, bucket=1
  %v = f32[1024] convert(%a)
  ROOT %out = (f32[1024], f32[512]) tuple(%v, %s)
}
)");
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const nlohmann::json json = program::ToJson(*plan);
  // Thunks in order: g s u b a v.
  const nlohmann::json& thunks = json["thunks"];
  ASSERT_EQ(thunks.size(), 6u);
  const nlohmann::json& s = thunks[1];
  EXPECT_EQ(s["kind"], "all_reduce");
  EXPECT_EQ(s["collective"], "reduce_scatter");
  EXPECT_EQ(s["reduce"], "sum");
  EXPECT_EQ(s["count"], 512);
  EXPECT_EQ(s["in"]["size"], 4096);
  EXPECT_EQ(s["out"]["size"], 2048);
  EXPECT_EQ(s["bucket"], 0);
  const nlohmann::json& a = thunks[4];
  EXPECT_EQ(a["collective"], "all_gather");
  EXPECT_EQ(a["dtype"], "bf16");
  EXPECT_EQ(a["count"], 512);
  EXPECT_EQ(a["in"]["size"], 1024);
  EXPECT_EQ(a["out"]["size"], 2048);
  EXPECT_EQ(a["bucket"], 1);
  for (const nlohmann::json* t : {&s, &a}) {
    const int64_t in = (*t)["in"]["offset"], in_size = (*t)["in"]["size"];
    const int64_t out = (*t)["out"]["offset"], out_size = (*t)["out"]["size"];
    EXPECT_TRUE(in + in_size <= out || out + out_size <= in) << t->dump();
  }
  const nlohmann::json& buckets = json["buckets"];
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0]["members"], nlohmann::json::array({1}));
  EXPECT_EQ(buckets[0]["issue_after"], 1);
  EXPECT_EQ(buckets[0]["wait_before"], 2);  // %u
  EXPECT_EQ(buckets[0]["bytes"], 4096);
  EXPECT_EQ(buckets[1]["members"], nlohmann::json::array({4}));
  EXPECT_EQ(buckets[1]["wait_before"], 5);  // %v
  EXPECT_EQ(buckets[1]["bytes"], 1024);
  // What the codec writes it reads back; messages name the collective.
  StatusOr<program::EntryPlan> back = program::EntryPlanFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, *plan);
  EXPECT_EQ(plan->thunks[1].Describe(), "thunk 1 (reduce_scatter %s)");
  EXPECT_EQ(plan->thunks[4].Describe(), "thunk 4 (all_gather %a)");
}

// An all-reduce's thunk has no `collective` (plans before it read the same).
TEST(BucketPlanTest, AnAllReduceThunkWritesNoCollective) {
  StatusOr<program::EntryPlan> plan = PlanOf(kModule);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const nlohmann::json json = program::ToJson(*plan);
  EXPECT_FALSE(json["thunks"][1].contains("collective"));
  EXPECT_EQ(plan->thunks[1].Describe(), "thunk 1 (all_reduce %a1)");
}

// A collective without a bucket is an error naming it and its opcode.
TEST(BucketPlanTest, AReduceScatterWithoutABucketIsAnErrorNamingIt) {
  StatusOr<program::EntryPlan> plan = PlanOf(R"(module zero
ENTRY %main {
  %x = f32[1024] parameter(0)
  %s = f32[512] reduce-scatter(%x), kind=sum, replicas=2
  ROOT %out = (f32[512]) tuple(%s)
}
)");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(),
            "%s: reduce-scatter has no bucket (run all-reduce-combiner after the schedule)");
}

}  // namespace
}  // namespace gptc::artifact
