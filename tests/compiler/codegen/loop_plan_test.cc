// Note [member classes] (compiler/codegen/loop_plan.h): the members of a
// horizontal loop fusion, their classes, the grid, and the kernel that
// emits each class's code once, run on the emulated device against the
// evaluator.
#include "compiler/codegen/loop_plan.h"

#include <gtest/gtest.h>

#include "compiler/codegen/codegen.h"
#include "tests/compiler/codegen/codegen_test_util.h"
#include "tests/compiler/codegen/emu_kernel_runner.h"

namespace gptc::codegen {
namespace {

// Momentum SGD over five parameters sharing the scalar %lr: three [64,32]
// alike (class A), a [64,32] one whose update also decays (class B), and a
// [100] one (its own group). Each member writes its new p and m.
constexpr std::string_view kMembersModule = R"(module members_test

%sgd {
  %lr = f32[] parameter(0)
  %p0 = f32[64,32] parameter(1)
  %g0 = f32[64,32] parameter(2)
  %m0 = f32[64,32] parameter(3)
  %p1 = f32[64,32] parameter(4)
  %g1 = f32[64,32] parameter(5)
  %m1 = f32[64,32] parameter(6)
  %p2 = f32[64,32] parameter(7)
  %g2 = f32[64,32] parameter(8)
  %m2 = f32[64,32] parameter(9)
  %p3 = f32[64,32] parameter(10)
  %g3 = f32[64,32] parameter(11)
  %m3 = f32[64,32] parameter(12)
  %p4 = f32[100] parameter(13)
  %g4 = f32[100] parameter(14)
  %m4 = f32[100] parameter(15)
  %lrw = f32[64,32] broadcast(%lr), dimensions={}
  %mn0 = f32[64,32] add(%m0, %g0)
  %s0 = f32[64,32] mul(%mn0, %lrw)
  %pn0 = f32[64,32] sub(%p0, %s0)
  %mn1 = f32[64,32] add(%m1, %g1)
  %s1 = f32[64,32] mul(%mn1, %lrw)
  %pn1 = f32[64,32] sub(%p1, %s1)
  %mn2 = f32[64,32] add(%m2, %g2)
  %s2 = f32[64,32] mul(%mn2, %lrw)
  %pn2 = f32[64,32] sub(%p2, %s2)
  %mn3 = f32[64,32] add(%m3, %g3)
  %s3 = f32[64,32] mul(%mn3, %lrw)
  %d3 = f32[64,32] mul(%p3, %lrw)
  %q3 = f32[64,32] sub(%p3, %d3)
  %pn3 = f32[64,32] sub(%q3, %s3)
  %lrb = f32[100] broadcast(%lr), dimensions={}
  %mn4 = f32[100] add(%m4, %g4)
  %s4 = f32[100] mul(%mn4, %lrb)
  %pn4 = f32[100] sub(%p4, %s4)
  ROOT %t = (f32[64,32], f32[64,32], f32[64,32], f32[64,32], f32[64,32], f32[64,32], f32[64,32], f32[64,32], f32[100], f32[100]) tuple(%pn0, %mn0, %pn1, %mn1, %pn2, %mn2, %pn3, %mn3, %pn4, %mn4)
}

ENTRY %main {
  %lr = f32[] parameter(0)
  %p0 = f32[64,32] parameter(1)
  %g0 = f32[64,32] parameter(2)
  %m0 = f32[64,32] parameter(3)
  %p1 = f32[64,32] parameter(4)
  %g1 = f32[64,32] parameter(5)
  %m1 = f32[64,32] parameter(6)
  %p2 = f32[64,32] parameter(7)
  %g2 = f32[64,32] parameter(8)
  %m2 = f32[64,32] parameter(9)
  %p3 = f32[64,32] parameter(10)
  %g3 = f32[64,32] parameter(11)
  %m3 = f32[64,32] parameter(12)
  %p4 = f32[100] parameter(13)
  %g4 = f32[100] parameter(14)
  %m4 = f32[100] parameter(15)
  ROOT %opt = (f32[64,32], f32[64,32], f32[64,32], f32[64,32], f32[64,32], f32[64,32], f32[64,32], f32[64,32], f32[100], f32[100]) fusion(%lr, %p0, %g0, %m0, %p1, %g1, %m1, %p2, %g2, %m2, %p3, %g3, %m3, %p4, %g4, %m4), kind=optimizer, calls=%sgd
}
)";

TEST(LoopPlanTest, MembersOfOneCanonicalConeShareAClass) {
  auto module = Parse(kMembersModule);
  ASSERT_NE(module, nullptr);
  StatusOr<LoopPlan> plan = PlanLoop(*module->entry()->root());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->groups.size(), 2u);
  const LoopGroup& matrices = plan->groups[0];
  EXPECT_EQ(matrices.n, 64 * 32);
  EXPECT_EQ(matrices.width, 4);
  EXPECT_EQ(matrices.iterations, 512);
  ASSERT_EQ(matrices.classes.size(), 2u);
  const LoopClass& plain = matrices.classes[0];
  ASSERT_EQ(plain.members.size(), 3u);
  for (size_t m = 0; m < 3; ++m) {
    const LoopMember& member = plain.members[m];
    // The new p and m of parameter m, in the kernel's argument order
    // (16 operands, then the outputs).
    EXPECT_EQ(member.output_slots,
              (std::vector<int64_t>{16 + 2 * int64_t(m), 17 + 2 * int64_t(m)}));
    // Position k is the same role in every member: p, m, g, and the shared %lr.
    ASSERT_EQ(member.params.size(), 4u);
    EXPECT_EQ(member.params[0]->name(), "p" + std::to_string(m));
    EXPECT_EQ(member.params[1]->name(), "m" + std::to_string(m));
    EXPECT_EQ(member.params[2]->name(), "g" + std::to_string(m));
    EXPECT_EQ(member.params[3]->name(), "lr");
  }
  ASSERT_EQ(matrices.classes[1].members.size(), 1u);  // the decaying one
  EXPECT_EQ(matrices.classes[1].members[0].outputs[0]->name(), "pn3");
  ASSERT_EQ(plan->groups[1].classes.size(), 1u);
  EXPECT_EQ(plan->groups[1].n, 100);

  // 256 threads; 512 vectors a member: 2 blocks each.
  EXPECT_EQ(plan->block, 256);
  EXPECT_EQ(plain.blocks_per_member, 2);
  EXPECT_EQ(plain.first_block, 0);
  EXPECT_EQ(matrices.classes[1].first_block, 6);
  EXPECT_EQ(plan->groups[1].classes[0].first_block, 8);
  EXPECT_EQ(plan->grid, 9);
  EXPECT_TRUE(plan->dispatch());
}

TEST(LoopPlanTest, EachClassIsEmittedOnceAndMatchesTheEvaluator) {
  auto module = Parse(kMembersModule);
  ASSERT_NE(module, nullptr);
  CompiledKernels kernels = CompileAll(*module);
  ASSERT_EQ(kernels.kernels.size(), 1u);
  EXPECT_EQ(kernels.kernels[0].spec.grid.x, 9);
  // Ten outputs, but a vector store for each output of a class's code:
  // class A's p and m, class B's p and m, the [100] member's p and m.
  const std::string& ptx = kernels.kernels[0].ptx;
  size_t stores = 0;
  for (size_t at = ptx.find("st.global.v4.f32"); at != std::string::npos;
       at = ptx.find("st.global.v4.f32", at + 1))
    ++stores;
  EXPECT_EQ(stores, 6u);

  EmuKernelRunner runner(*module);
  runner.ExpectMatchesEvaluator("opt");
}

}  // namespace
}  // namespace gptc::codegen
