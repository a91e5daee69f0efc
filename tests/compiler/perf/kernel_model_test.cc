// compiler/perf/kernel_model.h: a launch's H100 time (Note [kernel model])
// on kernels whose time follows from the machine's bandwidth or latencies.
#include "compiler/perf/kernel_model.h"

#include <gtest/gtest.h>

#include <string>

namespace gptc::perf {
namespace {

// Thread t of block b copies 16 bytes: out[b * 256 + t] = in[b * 256 + t].
constexpr char kCopy[] = R"(
.visible .entry copy(
	.param .u64 copy_param_0,
	.param .u64 copy_param_1
)
.maxntid 256, 1, 1
{
	.reg .b32 	%r<6>;
	.reg .f32 	%f<5>;
	.reg .b64 	%rd<7>;
	ld.param.u64 	%rd1, [copy_param_0];
	ld.param.u64 	%rd2, [copy_param_1];
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %tid.x;
	shl.b32 	%r3, %r1, 8;
	add.s32 	%r4, %r3, %r2;
	mul.wide.u32 	%rd3, %r4, 16;
	add.s64 	%rd4, %rd1, %rd3;
	add.s64 	%rd5, %rd2, %rd3;
	ld.global.v4.f32 	{%f1, %f2, %f3, %f4}, [%rd4];
	st.global.v4.f32 	[%rd5], {%f1, %f2, %f3, %f4};
	ret;
}
)";

PtxKernel Parse(const char* ptx) {
  auto parsed = ParsePtx(ptx);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  return std::move((*parsed)[0]);
}

TEST(KernelModelTest, ACopyMovesItsBytesAtDramSpeed) {
  PtxKernel k = Parse(kCopy);
  const int64_t blocks = 132 * 64;
  const int64_t bytes = blocks * 256 * 16;  // each way: 34.6 MB
  KernelLaunch launch{&k, {}, 16};
  launch.shape.grid = {blocks, 1, 1};
  launch.shape.block = {256, 1, 1};
  launch.shape.param_bytes = {bytes, bytes};
  auto t = EstimateKernel(launch, H100());
  ASSERT_TRUE(t.ok()) << t.status().message();
  const double dram_us = 2.0 * bytes / 3.0e6;  // read and write at 3.0 TB/s
  EXPECT_NEAR(t->us, dram_us + H100().launch_us, 0.1 * dram_us);
  EXPECT_EQ(t->bound, "memory");
  EXPECT_EQ(t->blocks_per_sm, 8);
  EXPECT_EQ(t->kinds, 1);
  EXPECT_NEAR(t->dram_bytes, 2.0 * bytes, 0.01 * bytes);
}

TEST(KernelModelTest, AFewBlocksWaitOutTheLatency) {
  // One block: a load's DRAM latency and nothing to hide it behind.
  PtxKernel k = Parse(kCopy);
  KernelLaunch launch{&k, {}, 16};
  launch.shape.grid = {1, 1, 1};
  launch.shape.block = {256, 1, 1};
  launch.shape.param_bytes = {4096, 4096};
  auto t = EstimateKernel(launch, H100());
  ASSERT_TRUE(t.ok()) << t.status().message();
  const double latency_us = H100().dram_latency / H100().clock_mhz;
  EXPECT_GT(t->us - H100().launch_us, latency_us);
  EXPECT_LT(t->us - H100().launch_us, 2 * latency_us);
  EXPECT_EQ(t->bound, "latency");
  EXPECT_EQ(t->blocks_per_sm, 1);  // no more than the grid puts there
}

TEST(KernelModelTest, RegistersSetOccupancy) {
  PtxKernel k = Parse(kCopy);
  KernelLaunch launch{&k, {}, 255};  // 255 registers: one 256-thread block
  launch.shape.grid = {132 * 8, 1, 1};
  launch.shape.block = {256, 1, 1};
  launch.shape.param_bytes = {1 << 22, 1 << 22};
  auto t = EstimateKernel(launch, H100());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->blocks_per_sm, 1);
  EXPECT_EQ(t->warps_per_scheduler, 2);
}

TEST(KernelModelTest, ABlockThatDoesNotFitIsAnError) {
  PtxKernel k = Parse(kCopy);
  KernelLaunch launch{&k, {}, 16};
  launch.shape.grid = {4, 1, 1};
  launch.shape.block = {256, 1, 1};
  launch.shape.dynamic_shared_bytes = 300 * 1024;
  auto t = EstimateKernel(launch, H100());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "kernel copy: a block of 256 threads at 16 registers with 307200 bytes of shared "
            "memory does not fit an H100 multiprocessor");
}

}  // namespace
}  // namespace gptc::perf
