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

// The GPU plan has no thunk for reduce-scatter or all-gather yet: building
// one names the instruction. Buffer assignment plans them as any op, each
// operand kept until its result's last reader (Note [in-place all-reduce]).
TEST(BucketPlanTest, ReduceScatterAndAllGatherAreRefusedNamingTheInstruction) {
  for (const char* op : {"%s = f32[512] reduce-scatter(%g), kind=sum, replicas=2",
                         "%s = f32[2048] all-gather(%g), replicas=2"}) {
    const bool scatter = std::string(op).find("reduce-scatter") != std::string::npos;
    const std::string text = fmt::format(
        "module collective\nENTRY %main {{\n  %x = f32[1024] parameter(0)\n"
        "  %g = f32[1024] exp(%x)\n  {}\n  %u = {} neg(%s)\n"
        "  ROOT %out = ({}) tuple(%u)\n}}\n",
        op, scatter ? "f32[512]" : "f32[2048]", scatter ? "f32[512]" : "f32[2048]");
    StatusOr<std::unique_ptr<ir::Module>> module = ir::ParseAndVerifyModule(text, "<test>");
    ASSERT_TRUE(module.ok()) << module.status().message();
    program::TrainEntry entry{program::EntryRole::kTrainStep, std::move(module).value(), {}};
    const ir::Instruction* x = entry.module->entry()->parameters()[0];
    entry.signature.inputs.push_back({program::SlotRole::kData, -1, x->name(), x->shape()});
    entry.signature.outputs.push_back({program::SlotRole::kData, -1, "out",
                                       entry.module->entry()->root()->shape().tuple_elements()[0]});
    StatusOr<analysis::BufferAssignment> ba = analysis::AssignBuffers(*entry.module);
    ASSERT_TRUE(ba.ok()) << ba.status().message();
    PlanStats stats;
    StatusOr<program::EntryPlan> plan =
        BuildEntryPlan(entry, *ba, codegen::CompiledKernels{}, stats);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().message(), fmt::format("%s: {} is not supported by the GPU plan yet",
                                                   scatter ? "reduce-scatter" : "all-gather"));
  }
}

}  // namespace
}  // namespace gptc::artifact
