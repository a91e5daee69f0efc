#include "passes/fusion_planner.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "passes/loop_fusion.h"
#include "passes/reduction_fusion.h"
#include "tests/testing/pass_harness.h"

namespace gptc::passes::fusion_internal {
namespace {

using ::gptc::testing::ParseOrDie;

// A chain of `n` elementwise ops with a row sum every 40 (broadcast back and
// added), like a deep model's layers one after another.
std::string Chain(int n) {
  std::string text = "module chain\nENTRY %main {\n  %x0 = f32[8,64] parameter(0)\n";
  for (int i = 1; i <= n; ++i) {
    if (i % 40 == 0) {
      text += fmt::format("  %r{0} = f32[8] reduce(%x{1}), dimensions={{1}}, kind=sum\n", i, i - 1);
      text += fmt::format("  %b{0} = f32[8,64] broadcast(%r{0}), dimensions={{0}}\n", i);
      text += fmt::format("  %x{0} = f32[8,64] add(%x{1}, %b{0})\n", i, i - 1);
    } else {
      text += fmt::format("  %x{0} = f32[8,64] {1}(%x{2})\n", i, i % 2 == 0 ? "exp" : "neg", i - 1);
    }
  }
  text += fmt::format("  ROOT %y = f32[8,64] copy(%x{})\n}}\n", n);
  return text;
}

// The planner's work while it plans the reductions and loops.
int64_t Visits(int n) {
  auto module = ParseOrDie(Chain(n));
  EXPECT_NE(module, nullptr);
  if (module == nullptr) return -1;
  Planner p(module->entry());
  FuseReductions(p);
  FuseLoops(p);
  return p.work();
}

// Note [reach within bounds]: the planner's work grows about linearly with
// the graph, counted, not timed (cycle checks that walked the rest of the
// graph, and a row region regathering every member's neighbours each round,
// made fusing a 10k-instruction chain take 18.6 s).
TEST(FusionPlannerTest, WorkGrowsAboutLinearlyWithTheGraph) {
  const int64_t small = Visits(1000);
  const int64_t large = Visits(4000);
  ASSERT_GT(small, 0);
  EXPECT_LT(large, 5 * small) << "1000 ops: " << small << " visits, 4000: " << large;
  EXPECT_LT(small, 50 * 1000);
}

// MemberPositions gives a group's members in entry order both ways: read
// off the group table when they fill most of the group's bounds, taken from
// the hash set and sorted when they are few and far apart.
TEST(FusionPlannerTest, MemberPositionsFollowTheEntry) {
  auto module = ParseOrDie(Chain(100));
  ASSERT_NE(module, nullptr);
  Planner p(module->entry());
  const auto& order = p.order();
  InstSet dense, sparse;
  for (size_t i = 10; i < 30; ++i) {
    if (!p.IsFree(order[i])) dense.insert(order[i]);
  }
  for (size_t i : {90, 40, 60}) sparse.insert(order[i]);
  const int d = p.NewGroup(ir::FusionKind::kLoop, order[10], dense);
  const int s = p.NewGroup(ir::FusionKind::kLoop, order[40], sparse);
  for (int g : {d, s}) {
    std::vector<int32_t> members = p.MemberPositions(g);
    ASSERT_EQ(members.size(), p.groups()[g].members.size()) << "group " << g;
    for (size_t k = 0; k < members.size(); ++k) {
      EXPECT_TRUE(p.groups()[g].members.contains(order[members[k]])) << members[k];
      if (k > 0) {
        EXPECT_LT(members[k - 1], members[k]);
      }
    }
  }
  EXPECT_EQ(p.MemberPositions(s), (std::vector<int32_t>{40, 60, 90}));
}

// Note [adjacency by position]: the stored operands and readers are the
// instructions' own, and the stored neighbours are NonFreeSources of each
// operand and NonFreeUsers, looking through the broadcasts, for every
// non-free instruction of the chain.
TEST(FusionPlannerTest, AdjacencyMatchesTheWalkThroughFreeOps) {
  auto module = ParseOrDie(Chain(200));
  ASSERT_NE(module, nullptr);
  Planner p(module->entry());
  const auto& order = p.order();
  auto positions = [&](const std::vector<const ir::Instruction*>& insts) {
    std::vector<int32_t> out;
    for (const ir::Instruction* x : insts) out.push_back(static_cast<int32_t>(p.pos(x)));
    std::sort(out.begin(), out.end());
    return out;
  };
  auto sorted = [](std::span<const int32_t> v) {
    std::vector<int32_t> out(v.begin(), v.end());
    std::sort(out.begin(), out.end());
    return out;
  };
  int through_broadcast = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    // Every instruction's own operands and readers, free ones included.
    ASSERT_EQ(p.operands_at(i).size(), order[i]->operands().size()) << order[i]->name();
    for (size_t k = 0; k < p.operands_at(i).size(); ++k) {
      EXPECT_EQ(p.operands_at(i)[k], p.pos(order[i]->operand(k))) << order[i]->name();
    }
    std::vector<const ir::Instruction*> readers(order[i]->users().begin(), order[i]->users().end());
    EXPECT_EQ(sorted(p.readers_at(i)), positions(readers)) << order[i]->name();
    // What the rules ask by position.
    EXPECT_EQ(p.opcode_at(i), order[i]->opcode()) << order[i]->name();
    EXPECT_EQ(p.dims_class_at(i), p.FindDimsClass(order[i]->shape().dims())) << order[i]->name();
    if (p.free_at(i)) continue;
    std::vector<const ir::Instruction*> sources, users;
    for (const ir::Instruction* op : order[i]->operands()) p.NonFreeSources(op, sources);
    p.NonFreeUsers(order[i], users);
    EXPECT_EQ(sorted(p.sources_at(i)), positions(sources)) << order[i]->name();
    EXPECT_EQ(sorted(p.users_at(i)), positions(users)) << order[i]->name();
    if (order[i]->opcode() == ir::Opcode::kReduce) {
      // r40's user is x40, through the broadcast b40.
      ASSERT_EQ(p.users_at(i).size(), 1u) << order[i]->name();
      EXPECT_EQ(order[p.users_at(i)[0]]->opcode(), ir::Opcode::kAdd);
      ++through_broadcast;
    }
  }
  EXPECT_EQ(through_broadcast, 5);
  // Two dims in the chain, [8, 64] and the row sums' [8]; none of them [8, 8].
  EXPECT_NE(p.FindDimsClass({8, 64}), p.FindDimsClass({8}));
  EXPECT_GE(p.FindDimsClass({8}), 0);
  EXPECT_EQ(p.FindDimsClass({8, 8}), -1);
}

}  // namespace
}  // namespace gptc::passes::fusion_internal
