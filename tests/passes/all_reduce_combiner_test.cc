// Note [all-reduce buckets] (passes/all_reduce_combiner.h): the combiner's
// grouping, its attribute, and that it changes no value.
#include "passes/all_reduce_combiner.h"

#include <gtest/gtest.h>

#include "compiler/ir/all_reduce_bucket.h"
#include "compiler/ir/printer.h"
#include "tests/testing/pass_harness.h"

namespace gptc::passes {
namespace {

using ::gptc::testing::ParseOrDie;
using ::gptc::testing::RunPassAndCompare;

// %a1 and %a2 share a bucket; %u reads %a1 (through a reshape) before %a3,
// so %a3 starts a new one; %a4 (32 MiB) is over the cap with %a3 and goes
// alone; %a5 joins nobody's bucket past it because %a4 is over the cap.
constexpr char kModule[] = R"(module buckets
ENTRY %main {
  %x = f32[1024] parameter(0)
  %big = f32[8388608] parameter(1)
  %g1 = f32[1024] exp(%x)
  %a1 = f32[1024] all-reduce(%g1), kind=sum
  %g2 = f32[1024] tanh(%x)
  %a2 = f32[1024] all-reduce(%g2), kind=sum
  %r1 = f32[32,32] reshape(%a1)
  %u = f32[32,32] neg(%r1)
  %ur = f32[1024] reshape(%u)
  %g3 = f32[1024] exp(%ur)
  %a3 = f32[1024] all-reduce(%g3), kind=sum
  %g4 = f32[8388608] exp(%big)
  %a4 = f32[8388608] all-reduce(%g4), kind=sum
  %g5 = f32[1024] tanh(%g3)
  %a5 = f32[1024] all-reduce(%g5), kind=sum
  ROOT %out = (f32[1024], f32[1024], f32[8388608], f32[1024]) tuple(%a2, %a3, %a4, %a5)
}
)";

std::vector<std::optional<int64_t>> BucketsOf(const ir::Module& m) {
  std::vector<std::optional<int64_t>> out;
  for (const auto& inst : m.entry()->instructions()) {
    if (inst->opcode() == ir::Opcode::kAllReduce) out.push_back(ir::CollectiveBucket(*inst));
  }
  return out;
}

TEST(AllReduceCombinerTest, ClosesBucketsAtTheCapAndBeforeAnEarlyReaderValuesUnchanged) {
  auto module = ParseOrDie(kModule);
  ASSERT_NE(module, nullptr);
  std::unique_ptr<ir::Module> after;
  AllReduceCombiner combiner;
  EXPECT_TRUE(RunPassAndCompare(combiner, *module, after));
  using B = std::optional<int64_t>;
  EXPECT_EQ(BucketsOf(*after), (std::vector<B>{0, 0, 1, 2, 3}));
  // The attribute prints and parses back.
  const std::string text = ir::PrintModule(*after);
  EXPECT_NE(text.find("all-reduce(%g1), kind=sum, bucket=0"), std::string::npos) << text;
  auto reparsed = ParseOrDie(text);
  ASSERT_NE(reparsed, nullptr);
  EXPECT_EQ(BucketsOf(*reparsed), BucketsOf(*after));
  // A second run changes nothing.
  EXPECT_FALSE(*AllReduceCombiner().Run(*after));
}

TEST(AllReduceCombinerTest, ALargerCapTakesTheLargeTensorIn) {
  auto module = ParseOrDie(kModule);
  ASSERT_NE(module, nullptr);
  // 64 MiB: %a3, %a4 and %a5 fit together; %u still closes the first bucket.
  ASSERT_TRUE(AllReduceCombiner({.bucket_bytes = int64_t{64} << 20}).Run(*module).ok());
  using B = std::optional<int64_t>;
  EXPECT_EQ(BucketsOf(*module), (std::vector<B>{0, 0, 1, 1, 1}));
  std::vector<std::vector<ir::Instruction*>> groups =
      GroupCollectives(*module->entry(), {.bucket_bytes = int64_t{64} << 20});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[1].front()->name(), "a3");
}

TEST(AllReduceCombinerTest, OptionsNameTheKeyOrValueAtFault) {
  StatusOr<AllReduceCombinerOptions> o = ParseAllReduceCombinerOptions({{"bucket-mib", "4"}});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->bucket_bytes, int64_t{4} << 20);
  EXPECT_EQ(ParseAllReduceCombinerOptions({}).value().bucket_bytes, kDefaultAllReduceBucketBytes);
  EXPECT_EQ(ParseAllReduceCombinerOptions({{"bucket-mib", "0"}}).status().message(),
            "all-reduce-combiner: bucket-mib must be an integer in [1, 1048576], got '0'");
  EXPECT_EQ(ParseAllReduceCombinerOptions({{"cap", "4"}}).status().message(),
            "all-reduce-combiner: unknown option 'cap' (known: bucket-mib, first-bucket-mib)");
  o = ParseAllReduceCombinerOptions({{"first-bucket-mib", "1"}});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->first_bucket_bytes, int64_t{1} << 20);
  EXPECT_EQ(o->bucket_bytes, kDefaultAllReduceBucketBytes);
  EXPECT_EQ(ParseAllReduceCombinerOptions({{"first-bucket-mib", "x"}}).status().message(),
            "all-reduce-combiner: first-bucket-mib must be an integer in [1, 1048576], got 'x'");
}

}  // namespace
}  // namespace gptc::passes
