// compiler/perf/ptx_walker.h: paths, trip counts and memory requests from
// the integer slice of a kernel (Note [walking PTX]).
#include "compiler/perf/ptx_walker.h"

#include <gtest/gtest.h>

namespace gptc::perf {
namespace {

// Block b's 64 threads run b + 1 trips of a loop that loads out[i * 64 + t]
// (coalesced), in[t * 32] (one sector a lane), stores t * 128 bytes into
// shared memory (every lane in bank 0), and branch on a loaded value.
constexpr char kLoop[] = R"(
.visible .entry loop(
	.param .u64 loop_param_0,
	.param .u64 loop_param_1
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<10>;
	.reg .f32 	%f<4>;
	.reg .b64 	%rd<9>;
	.shared .align 4 .b8 loop_s[8192];
	ld.param.u64 	%rd1, [loop_param_0];
	ld.param.u64 	%rd5, [loop_param_1];
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %tid.x;
	add.s32 	%r3, %r1, 1;
	mov.b32 	%r4, 0;
$L__BB0_1:
	mad.lo.s32 	%r5, %r4, 64, %r2;
	mul.wide.u32 	%rd2, %r5, 4;
	add.s64 	%rd3, %rd1, %rd2;
	ld.global.f32 	%f1, [%rd3];
	mul.wide.u32 	%rd6, %r2, 128;
	add.s64 	%rd7, %rd5, %rd6;
	ld.global.f32 	%f2, [%rd7];
	shl.b32 	%r6, %r2, 7;
	mov.u64 	%rd8, loop_s;
	cvt.u64.u32 	%rd4, %r6;
	add.s64 	%rd4, %rd8, %rd4;
	st.shared.f32 	[%rd4], %f1;
	add.s32 	%r4, %r4, 1;
	setp.lt.u32 	%p1, %r4, %r3;
	@%p1 bra 	$L__BB0_1;
	ld.global.u32 	%r7, [%rd3];
	setp.eq.s32 	%p2, %r7, 0;
	@%p2 bra 	$L__BB0_3;
	add.s32 	%r8, %r7, 1;
$L__BB0_3:
	ret;
}
)";

class PtxWalkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto parsed = ParsePtx(kLoop);
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    kernel_ = std::move((*parsed)[0]);
    plan_ = PlanWalk(kernel_);
    launch_.grid = {4, 1, 1};
    launch_.block = {64, 1, 1};
    launch_.param_bytes = {1 << 20, 1 << 20};
  }
  PtxKernel kernel_;
  WalkPlan plan_;
  LaunchShape launch_;
};

TEST_F(PtxWalkerTest, LoopsRunAsTheBlockIndexSays) {
  for (int64_t b = 0; b < 4; ++b) {
    BlockWalk walk = WalkBlock(kernel_, plan_, launch_, b);
    ASSERT_EQ(walk.warps.size(), 2u);
    int64_t trips = 0;
    for (int32_t block : walk.warps[0].blocks) trips += block == 1;
    EXPECT_EQ(trips, b + 1) << "block " << b;
    // 3 memory instructions a trip, then the load after the loop.
    EXPECT_EQ(walk.warps[0].requests.size(), static_cast<size_t>(3 * (b + 1) + 1));
    EXPECT_FALSE(walk.truncated);
  }
}

TEST_F(PtxWalkerTest, RequestsCountSectorsAndBankConflicts) {
  BlockWalk walk = WalkBlock(kernel_, plan_, launch_, 0);
  const std::vector<MemoryRequest>& r = walk.warps[1].requests;
  ASSERT_GE(r.size(), 3u);
  // 32 consecutive floats: 128 bytes, 4 sectors, in buffer 0.
  EXPECT_EQ(r[0].space, PtxSpace::kGlobal);
  EXPECT_EQ(r[0].sectors, 4u);
  EXPECT_EQ(r[0].listed, 4u);
  EXPECT_EQ(r[0].param, 0);
  EXPECT_EQ(r[0].bytes, 128u);
  // A float every 128 bytes: a sector a lane, in buffer 1.
  EXPECT_EQ(r[1].sectors, 32u);
  EXPECT_EQ(r[1].param, 1);
  // Every lane's word in bank 0: 32 wavefronts.
  EXPECT_EQ(r[2].space, PtxSpace::kShared);
  EXPECT_EQ(r[2].wavefronts, 32);
  // Warp 1's lanes are threads 32-63: the sectors after warp 0's.
  EXPECT_EQ(walk.sectors[r[0].first_sector], ((uint64_t{1} << kParamShift) + 128) / 32);
}

TEST_F(PtxWalkerTest, BranchesOnLoadedDataFallThroughAndAreCounted) {
  BlockWalk walk = WalkBlock(kernel_, plan_, launch_, 2);
  EXPECT_EQ(walk.unknown_branches, 1);
  // The fallthrough block (the add) is on the path, then the ret's block.
  const std::vector<int32_t>& path = walk.warps[0].blocks;
  ASSERT_GE(path.size(), 2u);
  EXPECT_EQ(path[path.size() - 2], static_cast<int32_t>(kernel_.blocks.size()) - 2);
  // The loaded value's register is not evaluated: the slice is the loop
  // counter, the indices and the addresses.
  int evaluated = 0;
  for (uint8_t e : plan_.evaluate) evaluated += e;
  EXPECT_LT(evaluated, kernel_.inst_count);
}

TEST_F(PtxWalkerTest, FirstLaneOnlyRecordsItsSectors) {
  WalkOptions first;
  first.first_lane_only = true;
  BlockWalk walk = WalkBlock(kernel_, plan_, launch_, 1, first);
  ASSERT_EQ(walk.warps.size(), 1u);
  EXPECT_TRUE(walk.warps[0].requests.empty());
  // Two trips of two global loads, and the load after the loop.
  EXPECT_EQ(walk.first_lane_sectors.size(), 5u);
  EXPECT_EQ(walk.first_lane_sectors[0].first, 0);
  EXPECT_EQ(walk.first_lane_sectors[1].first, 1);
}

TEST_F(PtxWalkerTest, RunawayLanesStop) {
  WalkOptions options;
  options.max_lane_instructions = 30;
  BlockWalk walk = WalkBlock(kernel_, plan_, launch_, 3, options);
  EXPECT_TRUE(walk.truncated);
}

}  // namespace
}  // namespace gptc::perf
