#include "compiler/support/ptx_stats.h"

#include <gtest/gtest.h>

#include <string>

namespace gptc {
namespace {

// Two entries: one with a loop holding two mma (an mma's operands over
// several lines, a guarded back branch, a comment), one without.
constexpr char kPtx[] = R"(
.version 8.4
.target sm_90a
.address_size 64

.visible .entry first(
	.param .u64 first_param_0
)
.maxntid 128, 1, 1
{
	.reg .pred 	%p<4>;
	.reg .f32 	%f<20>;
	// demoted variable
	.shared .align 16 .b8 first_k[18432];
	.shared .align 16 .b8 first_v[9216];
	ld.param.u64 	%rd1, [first_param_0];
	mov.u32 	%r1, %tid.x;
$L__BB0_1:
	cp.async.wait_group 0;
	bar.sync 	0;
	ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r2, %r3, %r4, %r5}, [%rd2];
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
		{%f1, %f2, %f3, %f4},
		{%r6, %r7, %r8, %r9},
		{%r2, %r3},
		{%f1, %f2, %f3, %f4};
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
		{%f5, %f6, %f7, %f8},
		{%r6, %r7, %r8, %r9},
		{%r4, %r5},
		{%f5, %f6, %f7, %f8};
	fma.rn.f32 	%f9, %f1, 0f3FB8AA3B, %f10;  // s * c - m c
	ex2.approx.ftz.f32 	%f11, %f9;
	cvt.rn.bf16x2.f32 	%r10, %f11, %f12;
	add.s32 	%r11, %r11, 1;
	setp.lt.u32 	%p1, %r11, %r12;
	@%p1 bra 	$L__BB0_1;
	st.global.f32 	[%rd1], %f11;
	ret;
}

.visible .entry second(
	.param .u64 second_param_0
)
{
	shfl.sync.bfly.b32	%f1, %f2, 1, 31, -1;
	max.NaN.f32 	%f3, %f1, %f2;
	ret;
}
)";

TEST(PtxStatsTest, CountsEveryStatementOfEachEntryByClass) {
  const std::vector<PtxKernelStats> kernels = AnalyzePtx(kPtx);
  ASSERT_EQ(kernels.size(), 2u);
  const PtxKernelStats& k = kernels[0];
  EXPECT_EQ(k.name, "first");
  EXPECT_EQ(k.static_shared_bytes, 18432 + 9216);
  EXPECT_EQ(k.whole.total(), 15);
  EXPECT_EQ(k.whole.of(PtxClass::kMma), 2);
  EXPECT_EQ(k.whole.of(PtxClass::kLdmatrix), 1);
  EXPECT_EQ(k.whole.of(PtxClass::kExp), 1);
  EXPECT_EQ(k.whole.of(PtxClass::kFloat), 1);
  EXPECT_EQ(k.whole.of(PtxClass::kConvert), 1);
  EXPECT_EQ(k.whole.of(PtxClass::kMask), 1);
  EXPECT_EQ(k.whole.of(PtxClass::kInteger), 1);
  EXPECT_EQ(k.whole.of(PtxClass::kLoad), 1);
  EXPECT_EQ(k.whole.of(PtxClass::kMove), 1);
  EXPECT_EQ(k.whole.of(PtxClass::kStore), 1);
  EXPECT_EQ(k.whole.of(PtxClass::kAsyncCopy), 1);
  EXPECT_EQ(k.whole.of(PtxClass::kBarrier), 1);
  EXPECT_EQ(k.whole.of(PtxClass::kControl), 2);
  EXPECT_DOUBLE_EQ(k.whole.PerMma(), 7.5);
  // The loop: from the label to the guarded branch back to it.
  ASSERT_EQ(k.mma_loops.size(), 1u);
  EXPECT_EQ(k.mma_loops[0].total(), 11);
  EXPECT_EQ(k.mma_loops[0].of(PtxClass::kMma), 2);

  const PtxKernelStats& s = kernels[1];
  EXPECT_EQ(s.name, "second");
  EXPECT_EQ(s.whole.total(), 3);
  EXPECT_EQ(s.whole.of(PtxClass::kShuffle), 1);
  EXPECT_EQ(s.whole.of(PtxClass::kFloat), 1);
  EXPECT_EQ(s.whole.PerMma(), 0.0);
  EXPECT_TRUE(s.mma_loops.empty());
}

// A wgmma in its inline asm scope (the braces and .reg of wgmma_asm.h's
// text): one mma doing 8 m16n8k16 a warp at N = 64, its fence, commit and
// wait barriers.
TEST(PtxStatsTest, CountsWgmmaWorkInWarpProducts) {
  const std::string ptx = R"(.visible .entry k()
{
	wgmma.fence.sync.aligned;
	{
.reg .pred p;
setp.ne.b32 p, %r5, 0;
wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%f1, %f2}, {%r1, %r2, %r3, %r4}, %rd1, p, 1, 1, 1;
}
	wgmma.commit_group.sync.aligned;
	wgmma.wait_group.sync.aligned 0;
	ret;
})";
  const std::vector<PtxKernelStats> kernels = AnalyzePtx(ptx);
  ASSERT_EQ(kernels.size(), 1u);
  const PtxCounts& c = kernels[0].whole;
  EXPECT_EQ(c.total(), 6);
  EXPECT_EQ(c.of(PtxClass::kMma), 1);
  EXPECT_EQ(c.of(PtxClass::kBarrier), 3);
  EXPECT_EQ(c.of(PtxClass::kMask), 1);
  EXPECT_DOUBLE_EQ(c.mma_tiles, 8);
  EXPECT_DOUBLE_EQ(c.PerMma(), 6.0 / 8);
}

TEST(PtxStatsTest, ClassifiesByOpcodeAndType) {
  EXPECT_EQ(ClassifyPtx("add.s64"), PtxClass::kInteger);
  EXPECT_EQ(ClassifyPtx("add.rn.f32"), PtxClass::kFloat);
  EXPECT_EQ(ClassifyPtx("mul.hi.u32"), PtxClass::kInteger);
  EXPECT_EQ(ClassifyPtx("max.NaN.f32"), PtxClass::kFloat);
  EXPECT_EQ(ClassifyPtx("selp.f32"), PtxClass::kMask);
  EXPECT_EQ(ClassifyPtx("ld.global.v4.u32"), PtxClass::kLoad);
  EXPECT_EQ(ClassifyPtx("cp.async.cg.shared.global"), PtxClass::kAsyncCopy);
  EXPECT_EQ(ClassifyPtx("lg2.approx.ftz.f32"), PtxClass::kExp);
  EXPECT_EQ(ClassifyPtx("brev.b32"), PtxClass::kInteger);
  EXPECT_EQ(ClassifyPtx("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"), PtxClass::kMma);
  EXPECT_EQ(ClassifyPtx("wgmma.wait_group.sync.aligned"), PtxClass::kBarrier);
  EXPECT_EQ(ClassifyPtx("tex.2d"), PtxClass::kOther);
  EXPECT_EQ(PtxClassName(PtxClass::kAsyncCopy), "async");
}

TEST(PtxStatsTest, LoopsWithoutMmaAndOuterLoopsAreNotReported) {
  // An outer loop around an inner mma loop, and a loop without mma after.
  const std::string ptx = R"(.visible .entry k()
{
$L__outer:
	add.s32 %r1, %r1, 1;
$L__inner:
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1,%f2,%f3,%f4}, {%r1,%r2,%r3,%r4}, {%r5,%r6}, {%f1,%f2,%f3,%f4};
	@%p1 bra $L__inner;
	@%p2 bra $L__outer;
$L__copy:
	st.global.f32 [%rd1], %f1;
	@%p3 bra $L__copy;
	ret;
})";
  const std::vector<PtxKernelStats> kernels = AnalyzePtx(ptx);
  ASSERT_EQ(kernels.size(), 1u);
  ASSERT_EQ(kernels[0].mma_loops.size(), 1u);
  EXPECT_EQ(kernels[0].mma_loops[0].total(), 2);
}

TEST(PtxStatsTest, OverlappingBackBranchesAreOneLoop) {
  // The body branches on a uniform flag; each side branches back to a
  // different label of the same loop.
  const std::string ptx = R"(.visible .entry k()
{
	mov.u32 %r1, 0;
$L__a:
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1,%f2,%f3,%f4}, {%r1,%r2,%r3,%r4}, {%r5,%r6}, {%f1,%f2,%f3,%f4};
	@%p1 bra $L__masked;
$L__b:
	add.f32 %f5, %f5, %f1;
	@%p2 bra $L__a;
	bra.uni $L__done;
$L__masked:
	selp.f32 %f1, %f1, 0f00000000, %p3;
	bra.uni $L__b;
$L__done:
	ret;
})";
  const std::vector<PtxKernelStats> kernels = AnalyzePtx(ptx);
  ASSERT_EQ(kernels.size(), 1u);
  ASSERT_EQ(kernels[0].mma_loops.size(), 1u);
  EXPECT_EQ(kernels[0].mma_loops[0].total(), 7);  // mma to the masked side's branch back
  EXPECT_EQ(kernels[0].mma_loops[0].of(PtxClass::kMma), 1);
}

TEST(PtxStatsTest, BlocksPerSmFollowRegistersSharedMemoryAndThreads) {
  EXPECT_EQ(BlocksPerSm(128, 254, 0), 2);  // 256 x 32 x 4 = 32K registers a block
  EXPECT_EQ(BlocksPerSm(128, 151, 0), 3);  // rounded to 152
  EXPECT_EQ(BlocksPerSm(128, 128, 0), 4);
  EXPECT_EQ(BlocksPerSm(128, 32, 0), 16);     // the thread limit
  EXPECT_EQ(BlocksPerSm(32, 0, 0), 32);       // the block limit
  EXPECT_EQ(BlocksPerSm(128, 64, 73728), 3);  // 72 KiB + 1 KiB a block of 228 KiB
  EXPECT_EQ(BlocksPerSm(0, 64, 0), 0);
}

}  // namespace
}  // namespace gptc
