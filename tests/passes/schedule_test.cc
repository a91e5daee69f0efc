#include "passes/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "tests/testing/pass_harness.h"

namespace gptc::passes {
namespace {

using ::gptc::testing::ParseOrDie;
using ::gptc::testing::RunPassAndCompare;

std::vector<ir::Instruction*> Order(const ir::Computation& c) {
  std::vector<ir::Instruction*> order;
  for (const auto& inst : c.instructions()) order.push_back(inst.get());
  return order;
}

int64_t Position(const ir::Computation& c, std::string_view name) {
  std::vector<ir::Instruction*> order = Order(c);
  auto it = std::find(order.begin(), order.end(), c.FindInstruction(name));
  return it == order.end() ? -1 : it - order.begin();
}

// Eight 16 KiB temporaries are all computed before any is reduced: 8 live at once.
constexpr char kEarlyTemporaries[] = R"(module early_temporaries
ENTRY %main {
  %p0 = f32[64,64] parameter(0)
  %p1 = f32[64,64] parameter(1)
  %p2 = f32[64,64] parameter(2)
  %p3 = f32[64,64] parameter(3)
  %t0 = f32[64,64] exp(%p0)
  %t1 = f32[64,64] tanh(%p1)
  %t2 = f32[64,64] neg(%p2)
  %t3 = f32[64,64] abs(%p3)
  %t4 = f32[64,64] mul(%p0, %p1)
  %t5 = f32[64,64] add(%p2, %p3)
  %t6 = f32[64,64] sub(%p0, %p3)
  %t7 = f32[64,64] max(%p1, %p2)
  %r0 = f32[] reduce(%t0), dimensions={0,1}, kind=sum
  %r1 = f32[] reduce(%t1), dimensions={0,1}, kind=sum
  %r2 = f32[] reduce(%t2), dimensions={0,1}, kind=max
  %r3 = f32[] reduce(%t3), dimensions={0,1}, kind=sum
  %r4 = f32[] reduce(%t4), dimensions={0,1}, kind=sum
  %r5 = f32[] reduce(%t5), dimensions={0,1}, kind=max
  %r6 = f32[] reduce(%t6), dimensions={0,1}, kind=sum
  %r7 = f32[] reduce(%t7), dimensions={0,1}, kind=sum
  %s0 = f32[] add(%r0, %r1)
  %s1 = f32[] add(%r2, %r3)
  %s2 = f32[] add(%r4, %r5)
  %s3 = f32[] add(%r6, %r7)
  %s4 = f32[] add(%s0, %s1)
  %s5 = f32[] add(%s2, %s3)
  ROOT %loss = f32[] add(%s4, %s5)
}
)";

TEST(ScheduleTest, LowersPeakWhenTemporariesAreComputedEarly) {
  auto module = ParseOrDie(kEarlyTemporaries);
  ASSERT_NE(module, nullptr);
  Schedule schedule;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(schedule, *module, after, 3, 1e-6));
  const int64_t before_peak = PeakLiveBytesOf(*module->entry(), Order(*module->entry()));
  const int64_t after_peak = PeakLiveBytesOf(*after->entry(), Order(*after->entry()));
  constexpr int64_t kBig = 64 * 64 * 4;
  EXPECT_GE(before_peak, 4 * kBig + 8 * kBig);           // parameters + eight temporaries
  EXPECT_LE(after_peak, 4 * kBig + 1 * kBig + 8 * 256);  // one temporary at a time
  // Each reduction now runs right after the temporary it consumes.
  for (int i = 0; i < 8; ++i) {
    const std::string t = "t" + std::to_string(i), r = "r" + std::to_string(i);
    EXPECT_EQ(Position(*after->entry(), r), Position(*after->entry(), t) + 1) << t;
  }
}

TEST(ScheduleTest, LeavesAScheduledOrderAlone) {
  auto module = ParseOrDie(kEarlyTemporaries);
  ASSERT_NE(module, nullptr);
  Schedule schedule;
  std::unique_ptr<ir::Module> once, twice;
  EXPECT_TRUE(RunPassAndCompare(schedule, *module, once));
  EXPECT_FALSE(RunPassAndCompare(schedule, *once, twice));
  EXPECT_EQ(ir::PrintModule(*twice), ir::PrintModule(*once));
}

TEST(ScheduleTest, LeavesAChainAlone) {
  auto module = ParseOrDie(R"(module chain
%fused {
  %a = f32[8] parameter(0)
  %b = f32[8] parameter(1)
  %m = f32[8] mul(%a, %b)
  ROOT %e = f32[8] exp(%m)
}
ENTRY %main {
  %x = f32[8] parameter(0)
  %y = f32[8] parameter(1)
  %f = f32[8] fusion(%x, %y), kind=loop, calls=%fused
  %n = f32[8] neg(%f)
  ROOT %t = (f32[8], f32[8]) tuple(%n, %f)
}
)");
  ASSERT_NE(module, nullptr);
  Schedule schedule;
  std::unique_ptr<ir::Module> after;
  EXPECT_FALSE(RunPassAndCompare(schedule, *module, after));
  EXPECT_EQ(ir::PrintModule(*after), ir::PrintModule(*module));
}

TEST(ScheduleTest, MovesParametersFirstAndKeepsTuples) {
  auto module = ParseOrDie(R"(module late_parameter
%fused {
  %a = f32[256] parameter(0)
  %e = f32[256] exp(%a)
  %n = f32[256] neg(%a)
  ROOT %t = (f32[256], f32[256]) tuple(%e, %n)
}
ENTRY %main {
  %x = f32[256] parameter(0)
  %big0 = f32[256] exp(%x)
  %big1 = f32[256] tanh(%x)
  %f = (f32[256], f32[256]) fusion(%x), kind=loop, calls=%fused
  %f0 = f32[256] get-tuple-element(%f), index=0
  %f1 = f32[256] get-tuple-element(%f), index=1
  %r = f32[16,16] reshape(%f1)
  %y = f32[16,16] parameter(1)
  %ry = f32[16,16] add(%r, %y)
  %s0 = f32[] reduce(%big0), dimensions={0}, kind=sum
  %s1 = f32[] reduce(%big1), dimensions={0}, kind=sum
  %s = f32[] add(%s0, %s1)
  ROOT %out = (f32[], f32[16,16], f32[256]) tuple(%s, %ry, %f0)
}
)");
  ASSERT_NE(module, nullptr);
  Schedule schedule;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(schedule, *module, after, 3, 1e-6));
  EXPECT_EQ(Position(*after->entry(), "x"), 0);
  EXPECT_EQ(Position(*after->entry(), "y"), 1);
  EXPECT_LT(PeakLiveBytesOf(*after->entry(), Order(*after->entry())),
            PeakLiveBytesOf(*module->entry(), Order(*module->entry())));
}

// Without the all-reduce chain the greedy choice would issue the cheap %ar2 first.
TEST(ScheduleTest, NeverReordersAllReduces) {
  auto module = ParseOrDie(R"(module all_reduces
ENTRY %main {
  %x = f32[4096] parameter(0)
  %y = f32[4] parameter(1)
  %big = f32[4096] exp(%x)
  %ar1 = f32[4096] all-reduce(%big), kind=sum
  %s = f32[] reduce(%ar1), dimensions={0}, kind=sum
  %ar2 = f32[4] all-reduce(%y), kind=sum
  %sy = f32[] reduce(%ar2), dimensions={0}, kind=sum
  ROOT %r = f32[] add(%s, %sy)
}
)");
  ASSERT_NE(module, nullptr);
  const ir::Computation& entry = *module->entry();
  std::vector<ir::Instruction*> order = MemoryGreedyOrder(entry);
  auto at = [&](std::string_view name) {
    return std::find(order.begin(), order.end(), entry.FindInstruction(name)) - order.begin();
  };
  EXPECT_LT(at("ar1"), at("ar2"));
  Schedule schedule;
  std::unique_ptr<ir::Module> after;
  RunPassAndCompare(schedule, *module, after);
  EXPECT_LT(Position(*after->entry(), "ar1"), Position(*after->entry(), "ar2"));
}

}  // namespace
}  // namespace gptc::passes
