// Instruction patterns shared by the passes and the emitters
// (compiler/ir/patterns.h).
#include "compiler/ir/patterns.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "compiler/ir/module.h"
#include "compiler/ir/parser.h"

namespace gptc::ir {
namespace {

// Three [2, 4] pieces padded into [2, 12] at columns 0, 4 and 8 (the packed
// qkv gradient's form), and sums that overlap, leave a gap or pad with 1.
constexpr char kPads[] = R"(module pads
ENTRY %main {
  %a = f32[2,4] parameter(0)
  %b = f32[2,4] parameter(1)
  %c = f32[2,4] parameter(2)
  %zero = f32[] constant(0)
  %one = f32[] constant(1)
  %pa = f32[2,12] pad(%a, %zero), low={0,0}, high={0,8}
  %pb = f32[2,12] pad(%b, %zero), low={0,4}, high={0,4}
  %pc = f32[2,12] pad(%c, %zero), low={0,8}, high={0,0}
  %ab = f32[2,12] add(%pa, %pb)
  %packed = f32[2,12] add(%ab, %pc)
  %pb2 = f32[2,12] pad(%b, %zero), low={0,2}, high={0,6}
  %overlap = f32[2,12] add(%pa, %pb2)
  %ac = f32[2,12] add(%pa, %pc)
  %pb1 = f32[2,12] pad(%b, %one), low={0,4}, high={0,4}
  %ab1 = f32[2,12] add(%pa, %pb1)
  %ones = f32[2,12] add(%ab1, %pc)
  ROOT %out = (f32[2,12], f32[2,12], f32[2,12], f32[2,12]) tuple(%packed, %overlap, %ac, %ones)
}
)";

TEST(PatternsTest, ZeroPadTilesFindConcatenationsOnly) {
  StatusOr<std::unique_ptr<Module>> m = ParseModule(kPads);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const Computation& e = *(*m)->entry();
  std::vector<const Instruction*> adds;
  const std::vector<const Instruction*> pads = ZeroPadTiles(e.FindInstruction("packed"), &adds);
  ASSERT_EQ(pads.size(), 3u);
  EXPECT_EQ(adds.size(), 2u);
  for (const char* name : {"pa", "pb", "pc"}) {
    EXPECT_NE(std::find(pads.begin(), pads.end(), e.FindInstruction(name)), pads.end()) << name;
  }
  EXPECT_TRUE(ZeroPadTiles(e.FindInstruction("overlap")).empty());  // columns 2-3 twice
  EXPECT_TRUE(ZeroPadTiles(e.FindInstruction("ac")).empty());       // columns 4-7 in none
  EXPECT_TRUE(ZeroPadTiles(e.FindInstruction("ones")).empty());     // padded with 1
  EXPECT_TRUE(ZeroPadTiles(e.FindInstruction("pa")).empty());       // one pad is no sum
}

// Splats: a constant of one value, directly or through broadcasts; a
// constant of several values, a parameter or an add of splats is none.
TEST(PatternsTest, SplatsAreConstantsOfOneValueThroughBroadcasts) {
  StatusOr<std::unique_ptr<Module>> m = ParseModule(R"(module splats
ENTRY %main {
  %p = f32[2] parameter(0)
  %two = f32[] constant(2)
  %b = f32[3] broadcast(%two), dimensions={}
  %bb = f32[2,3] broadcast(%b), dimensions={1}
  %same = f32[2] constant({-0, 0})
  %mixed = f32[2] constant({1, 2})
  %sum = f32[] add(%two, %two)
  ROOT %out = (f32[2], f32[2,3], f32[2], f32[2], f32[]) tuple(%p, %bb, %same, %mixed, %sum)
}
)");
  ASSERT_TRUE(m.ok()) << m.status().message();
  const Computation& e = *(*m)->entry();
  EXPECT_EQ(SplatValue(e.FindInstruction("two")), 2.0);
  EXPECT_EQ(SplatValue(e.FindInstruction("bb")), 2.0);
  EXPECT_TRUE(IsSplat(e.FindInstruction("bb"), 2.0));
  EXPECT_FALSE(IsSplat(e.FindInstruction("bb"), 3.0));
  EXPECT_EQ(SplatValue(e.FindInstruction("same")), 0.0);  // -0 and 0 compare equal
  EXPECT_TRUE(IsSplat(e.FindInstruction("same"), 0.0));
  for (const char* name : {"p", "mixed", "sum"}) {
    EXPECT_FALSE(SplatValue(e.FindInstruction(name)).has_value()) << name;
    EXPECT_FALSE(IsSplat(e.FindInstruction(name), 2.0)) << name;
  }
}

}  // namespace
}  // namespace gptc::ir
