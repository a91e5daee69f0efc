#include "passes/cse.h"

#include <gtest/gtest.h>

#include <string_view>

#include "tests/testing/pass_harness.h"

namespace gptc::passes {
namespace {

using ::gptc::testing::ParseOrDie;
using ::gptc::testing::RunPassAndCompare;

// Parses `text`, runs CSE through the harness (verify + evaluate before and
// after), expects `changed`, and returns the result.
std::unique_ptr<ir::Module> Csed(std::string_view text, bool changed = true) {
  auto module = ParseOrDie(text);
  EXPECT_NE(module, nullptr);
  if (module == nullptr) return nullptr;
  Cse cse;
  std::unique_ptr<ir::Module> after;
  EXPECT_EQ(RunPassAndCompare(cse, *module, after), changed);
  if (!changed) {
    EXPECT_EQ(ir::PrintModule(*after), ir::PrintModule(*module));
  }
  return after;
}

TEST(CseTest, MergesEqualInstructionsKeepingTheFirst) {
  auto m = Csed(R"(module m
ENTRY %main {
  %x = f32[4] parameter(0)
  %a = f32[4] exp(%x), meta="first"
  %b = f32[4] exp(%x), meta="second"
  ROOT %r = f32[4] add(%a, %b)
}
)");
  const ir::Instruction* root = m->entry()->root();
  EXPECT_EQ(root->operand(0)->name(), "a");
  EXPECT_EQ(root->operand(1)->name(), "a");
  EXPECT_EQ(root->operand(0)->metadata(), "first");
  EXPECT_EQ(m->entry()->FindInstruction("b"), nullptr);
  EXPECT_EQ(m->entry()->instruction_count(), 3);
}

TEST(CseTest, MergesWholeChainsInOneRun) {
  // Once %e2 is %e1, %n2 and %n1 have the same operands too.
  auto m = Csed(R"(module m
ENTRY %main {
  %x = f32[4] parameter(0)
  %e1 = f32[4] exp(%x)
  %n1 = f32[4] neg(%e1)
  %e2 = f32[4] exp(%x)
  %n2 = f32[4] neg(%e2)
  ROOT %r = f32[4] sub(%n1, %n2)
}
)");
  EXPECT_EQ(m->entry()->instruction_count(), 4);
  EXPECT_EQ(m->entry()->root()->operand(1)->name(), "n1");
}

TEST(CseTest, MergesRootDuplicate) {
  auto m = Csed(R"(module m
ENTRY %main {
  %x = f32[2,3] parameter(0)
  %t1 = f32[3,2] transpose(%x), dimensions={1,0}
  %t2 = f32[3,2] transpose(%x), dimensions={1,0}
  %u = f32[3,2] exp(%t1)
  ROOT %r = f32[3,2] add(%u, %t2)
}
)");
  EXPECT_EQ(m->entry()->root()->operand(1)->name(), "t1");
}

TEST(CseTest, CommutativeOperandsMatch) {
  auto m = Csed(R"(module m
ENTRY %main {
  %x = f32[4] parameter(0)
  %y = f32[4] parameter(1)
  %a = f32[4] add(%x, %y)
  %b = f32[4] add(%y, %x)
  %s1 = f32[4] sub(%x, %y)
  %s2 = f32[4] sub(%y, %x)
  ROOT %t = (f32[4], f32[4], f32[4], f32[4]) tuple(%a, %b, %s1, %s2)
}
)");
  EXPECT_EQ(m->entry()->FindInstruction("b"), nullptr);
  EXPECT_NE(m->entry()->FindInstruction("s2"), nullptr);  // sub does not commute
}

TEST(CseTest, ConstantsCompareByValue) {
  auto m = Csed(R"(module m
ENTRY %main {
  %c1 = f32[3] constant({1, 2, 3})
  %c2 = f32[3] constant({1, 2, 3})
  %c3 = f32[3] constant({1, 2, 4})
  %z1 = f32[] constant(0)
  %z2 = f32[] constant(-0)
  ROOT %t = (f32[3], f32[3], f32[3], f32[], f32[]) tuple(%c1, %c2, %c3, %z1, %z2)
}
)");
  EXPECT_EQ(m->entry()->FindInstruction("c2"), nullptr);
  EXPECT_NE(m->entry()->FindInstruction("c3"), nullptr);
  EXPECT_NE(m->entry()->FindInstruction("z2"), nullptr);  // 0 and -0 are different values
}

TEST(CseTest, MergesFusionsCallingTheSameComputation) {
  auto m = Csed(R"(module m
%fused {
  %p = f32[4] parameter(0)
  %e1 = f32[4] exp(%p)
  %e2 = f32[4] exp(%p)
  ROOT %r = f32[4] mul(%e1, %e2)
}
ENTRY %main {
  %x = f32[4] parameter(0)
  %f1 = f32[4] fusion(%x), kind=loop, calls=%fused
  %f2 = f32[4] fusion(%x), kind=loop, calls=%fused
  ROOT %r = f32[4] add(%f1, %f2)
}
)");
  EXPECT_EQ(m->entry()->FindInstruction("f2"), nullptr);
  EXPECT_EQ(m->FindComputation("fused")->FindInstruction("e2"), nullptr);
}

TEST(CseTest, LeavesDifferentAttributesAndShapesAlone) {
  Csed(R"(module m
ENTRY %main {
  %x = f32[2,2] parameter(0)
  %t1 = f32[2,2] transpose(%x), dimensions={1,0}
  %t2 = f32[2,2] transpose(%x), dimensions={0,1}
  %r1 = f32[2] reduce(%x), dimensions={0}, kind=sum
  %r2 = f32[2] reduce(%x), dimensions={0}, kind=max
  %c1 = bf16[2] convert(%r1)
  %c2 = f16[2] convert(%r1)
  ROOT %t = (f32[2,2], f32[2,2], f32[2], bf16[2], f16[2]) tuple(%t1, %t2, %r2, %c1, %c2)
}
)",
       /*changed=*/false);
}

TEST(CseTest, LeavesAllReduceAndOtherComputationsAlone) {
  // All-reduce is a collective every replica issues in the same sequence;
  // fusions calling distinct (even if equal) computations are not compared.
  Csed(R"(module m
%f1 {
  %p = f32[2,2] parameter(0)
  ROOT %e = f32[2,2] exp(%p)
}
%f2 {
  %p = f32[2,2] parameter(0)
  ROOT %e = f32[2,2] exp(%p)
}
ENTRY %main {
  %x = f32[2,2] parameter(0)
  %k1 = f32[2,2] fusion(%x), kind=loop, calls=%f1
  %k2 = f32[2,2] fusion(%x), kind=loop, calls=%f2
  %a1 = f32[2,2] all-reduce(%x), kind=sum
  %a2 = f32[2,2] all-reduce(%x), kind=sum
  ROOT %t = (f32[2,2], f32[2,2], f32[2,2], f32[2,2]) tuple(%k1, %k2, %a1, %a2)
}
)",
       /*changed=*/false);
}

TEST(CseTest, LeavesIdenticalParametersAlone) {
  Csed(R"(module m
ENTRY %main {
  %x = f32[4] parameter(0)
  %y = f32[4] parameter(1)
  %a = f32[4] exp(%x)
  %b = f32[4] exp(%y)
  ROOT %r = f32[4] add(%a, %b)
}
)",
       /*changed=*/false);
}

}  // namespace
}  // namespace gptc::passes
