// Note [H100 time estimate] (runtime/emu/kernel_estimate.h) on counters
// whose estimate follows by hand from the model's constants.
#include "runtime/emu/kernel_estimate.h"

#include <gtest/gtest.h>

namespace gptc::rt::emu {
namespace {

namespace abi = program::emu;

// A copy of 30 MB each way over 1,000 blocks, every sector one it must move.
KernelCounters Copy() {
  KernelCounters k;
  k.launches = 2;
  k.blocks = 2 * 1000;
  k.argument_bytes = 2 * 60'000'000;
  k.counts.global_load_sectors = 2 * 30'000'000 / 32;
  k.counts.global_store_sectors = 2 * 30'000'000 / 32;
  k.counts.instructions[abi::kGlobalMemoryClass] = 2 * 1000;
  return k;
}

TEST(KernelEstimateTest, ACopyTakesItsBytesAtDramBandwidth) {
  const KernelEstimate e = EstimateH100(Copy());
  EXPECT_DOUBLE_EQ(e.roofline_us, 60e6 / kRooflineBytesPerUs);
  EXPECT_DOUBLE_EQ(e.memory_us, 60e6 / kDramBytesPerUs);
  EXPECT_EQ(e.bound, "memory");
  EXPECT_DOUBLE_EQ(e.us, 60e6 / kDramBytesPerUs + kLaunchUs);
}

TEST(KernelEstimateTest, ReReadSectorsComeFromL2) {
  KernelCounters k = Copy();
  k.counts.global_load_sectors *= 3;  // the operand read three times
  const KernelEstimate e = EstimateH100(k);
  EXPECT_DOUBLE_EQ(e.memory_us, 60e6 / kDramBytesPerUs + 60e6 / kL2BytesPerUs);
}

TEST(KernelEstimateTest, AGatherIsChargedTheSectorsItMoves) {
  KernelCounters k = Copy();
  k.argument_bytes *= 10;  // a table it reads a tenth of
  EXPECT_DOUBLE_EQ(EstimateH100(k).memory_us, 60e6 / kDramBytesPerUs);
  EXPECT_DOUBLE_EQ(EstimateH100(k).roofline_us, 60e6 / kRooflineBytesPerUs);
}

TEST(KernelEstimateTest, InstructionsBoundAKernelThatIssuesMoreThanItMoves) {
  KernelCounters k = Copy();
  // Four warp instructions a clock on each of the 132 multiprocessors.
  const double per_us = 4 * kH100Multiprocessors * kH100ClockPerUs;
  k.counts.instructions[abi::kFloatClass] = static_cast<uint64_t>(2 * 100 * per_us);
  const KernelEstimate e = EstimateH100(k);
  EXPECT_EQ(e.bound, "issue");
  EXPECT_NEAR(e.issue_us, 100, 0.01);
  EXPECT_NEAR(e.us, 100 + kLaunchUs, 0.01);
}

TEST(KernelEstimateTest, SharedWavefrontsCountAClockEach) {
  KernelCounters k = Copy();
  k.counts.shared_load_wavefronts =
      static_cast<uint64_t>(2 * 50 * kH100Multiprocessors * kH100ClockPerUs);
  const KernelEstimate e = EstimateH100(k);
  EXPECT_EQ(e.bound, "shared");
  EXPECT_NEAR(e.shared_us, 50, 0.01);
}

TEST(KernelEstimateTest, AGridSmallerThanTheMachineUsesFewerMultiprocessors) {
  KernelCounters k = Copy();
  k.blocks = 2 * 33;  // a quarter of the 132 multiprocessors
  EXPECT_DOUBLE_EQ(EstimateH100(k).memory_us, 4 * 60e6 / kDramBytesPerUs);
}

TEST(KernelEstimateTest, NoLaunchesNoEstimate) {
  const KernelEstimate e = EstimateH100(KernelCounters{});
  EXPECT_EQ(e.us, 0);
  EXPECT_EQ(InstructionClassName(abi::kMmaClass), "mma");
  EXPECT_EQ(InstructionClassName(abi::kNumInstructionClasses), "?");
}

}  // namespace
}  // namespace gptc::rt::emu
