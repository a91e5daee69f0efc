#include "passes/dce.h"

#include <gtest/gtest.h>

#include "tests/testing/pass_harness.h"

namespace gptc::passes {
namespace {

using ::gptc::testing::ParseOrDie;
using ::gptc::testing::RunPassAndCompare;

TEST(DceTest, RemovesDeadChainsAndKeepsResults) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[3,4] parameter(0)
  %y = f32[4] parameter(1)
  %dead1 = f32[3,4] exp(%x)
  %dead2 = f32[3,4] mul(%dead1, %dead1)
  %dead3 = f32[3] reduce(%dead2), dimensions={1}, kind=sum
  %b = f32[3,4] broadcast(%y), dimensions={1}
  ROOT %r = f32[3,4] add(%x, %b)
}
)");
  ASSERT_NE(module, nullptr);
  Dce dce;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(dce, *module, after));
  EXPECT_EQ(after->entry()->instruction_count(), 4);
  EXPECT_EQ(after->entry()->FindInstruction("dead1"), nullptr);
  EXPECT_EQ(after->entry()->FindInstruction("dead3"), nullptr);
}

TEST(DceTest, RemovesUncalledComputations) {
  auto module = ParseOrDie(R"(module m
%fused {
  %p = f32[2] parameter(0)
  ROOT %e = f32[2] exp(%p)
}
ENTRY %main {
  %x = f32[2] parameter(0)
  %f = f32[2] fusion(%x), kind=loop, calls=%fused
  ROOT %r = f32[2] neg(%x)
}
)");
  ASSERT_NE(module, nullptr);
  Dce dce;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(dce, *module, after));
  EXPECT_EQ(after->computations().size(), 1u);
  EXPECT_EQ(after->FindComputation("fused"), nullptr);
}

TEST(DceTest, KeepsParametersRootAndAllReduce) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[2] parameter(0)
  %unused = f32[5] parameter(1)
  %ar = f32[2] all-reduce(%x), kind=sum
  ROOT %r = f32[2] neg(%x)
}
)");
  ASSERT_NE(module, nullptr);
  Dce dce;
  std::unique_ptr<ir::Module> after;
  EXPECT_FALSE(RunPassAndCompare(dce, *module, after));
  EXPECT_EQ(ir::PrintModule(*after), ir::PrintModule(*module));
}

TEST(DceTest, LeavesLiveModuleAlone) {
  auto module = ParseOrDie(R"(module m
%fused {
  %p = f32[2] parameter(0)
  ROOT %e = f32[2] exp(%p)
}
ENTRY %main {
  %x = f32[2] parameter(0)
  %f = f32[2] fusion(%x), kind=loop, calls=%fused
  ROOT %t = (f32[2], f32[2]) tuple(%f, %x)
}
)");
  ASSERT_NE(module, nullptr);
  Dce dce;
  std::unique_ptr<ir::Module> after;
  EXPECT_FALSE(RunPassAndCompare(dce, *module, after));
  EXPECT_EQ(ir::PrintModule(*after), ir::PrintModule(*module));
}

}  // namespace
}  // namespace gptc::passes
