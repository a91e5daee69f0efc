// The per-rank state of compiler/program/rank_state.h and the ZeRO-1 shard
// arithmetic of program.h / zero_shards.h, on hand-computed cases.
#include "compiler/program/rank_state.h"

#include <gtest/gtest.h>

#include "compiler/program/program.h"
#include "compiler/program/zero_shards.h"

namespace gptc::program {
namespace {

std::vector<ParamSpec> TwoParams() {
  ParamSpec w, b;
  w.name = "w";
  w.shape = ir::Shape(ir::DType::kF32, {5, 3});  // 15 elements: shards of 4 over 4 ranks
  b.name = "b";
  b.shape = ir::Shape(ir::DType::kF32, {4});  // shards of 1
  return {w, b};
}

TEST(RankStateTest, ZeroOneShardsTheOptimizerStateOnly) {
  const RankState z = RankStateOf(TwoParams(), 1, 4, 1);
  EXPECT_EQ(z.parameters, 4 * 19);
  EXPECT_EQ(z.gradients, 4 * (4 + 1));
  EXPECT_EQ(z.accumulators, 0);
  EXPECT_EQ(z.moments, 2 * 4 * (4 + 1));
  EXPECT_EQ(z.master, 4 * (4 + 1));
  EXPECT_EQ(z.total(), 76 + 20 + 40 + 20);
  const RankState plain = RankStateOf(TwoParams(), 2, 4, 0);
  EXPECT_EQ(plain.gradients, 76);
  EXPECT_EQ(plain.accumulators, 76);
  EXPECT_EQ(plain.moments, 152);
  EXPECT_EQ(plain.master, 0);
  // One rank has nothing to shard over.
  EXPECT_EQ(RankStateOf(TwoParams(), 1, 1, 1).master, 0);
}

TEST(RankStateTest, TablePutsZeroOneBesideZeroZero) {
  const std::string table = RenderRankState(TwoParams(), 1, 4, 1);
  EXPECT_NE(table.find("== per-rank state: 4 ranks, --zero 1 beside --zero 0"), std::string::npos)
      << table;
  EXPECT_NE(table.find("ZeRO-1 keeps 51.3% of the state"), std::string::npos) << table;  // 156/304
  EXPECT_EQ(RenderRankState(TwoParams(), 1, 1, 0).find("beside"), std::string::npos);
}

TEST(ZeroShardsTest, ShardsPadWithZerosAndJoinBack) {
  EXPECT_EQ(ShardElements(15, 4), 4);
  EXPECT_EQ(ShardElements(16, 4), 4);
  EXPECT_EQ(ShardElements(3, 4), 1);
  EXPECT_EQ(StateSlotShape(SlotRole::kAdamM, ir::Shape(ir::DType::kF32, {5, 3}), 1, 4),
            ir::Shape(ir::DType::kF32, {4}));
  EXPECT_EQ(StateSlotShape(SlotRole::kParam, ir::Shape(ir::DType::kF32, {5, 3}), 1, 4),
            ir::Shape(ir::DType::kF32, {5, 3}));
  EXPECT_EQ(StateSlotShape(SlotRole::kAdamV, ir::Shape(ir::DType::kF32, {5, 3}), 0, 4),
            ir::Shape(ir::DType::kF32, {5, 3}));
  std::vector<float> whole(15);
  for (int i = 0; i < 15; ++i) whole[i] = static_cast<float>(i + 1);
  std::vector<double> gathered;
  for (int64_t r = 0; r < 4; ++r) {
    std::vector<double> shard = ShardOf<double, float>(whole, r, 4);
    ASSERT_EQ(shard.size(), 4u);
    gathered.insert(gathered.end(), shard.begin(), shard.end());
  }
  EXPECT_EQ(gathered.back(), 0.0);  // the padding
  EXPECT_EQ(gathered[11], 12.0);
  EXPECT_EQ((Unshard<float, double>(gathered, 15)), whole);
  // More ranks than elements: the last shards are all padding.
  EXPECT_EQ((ShardOf<double, float>(std::span<const float>(whole.data(), 2), 3, 4)),
            std::vector<double>{0.0});
}

}  // namespace
}  // namespace gptc::program
