// The GPU peaks' lookups (compiler/program/gpu_spec.h): by the flag's name
// and by the name the driver reports for a device.
#include "compiler/program/gpu_spec.h"

#include <gtest/gtest.h>

namespace gptc::program {
namespace {

TEST(GpuSpecTest, FoundByFlagName) {
  ASSERT_TRUE(FindGpuSpec("H200").has_value());
  EXPECT_EQ(FindGpuSpec("H200")->hbm_gbps, 4800.0);
  EXPECT_FALSE(FindGpuSpec("v100").has_value());
}

TEST(GpuSpecTest, FoundByDeviceName) {
  EXPECT_EQ(GpuSpecOfDevice("NVIDIA H100 80GB HBM3")->name, "h100");
  EXPECT_EQ(GpuSpecOfDevice("NVIDIA H200")->name, "h200");
  EXPECT_EQ(GpuSpecOfDevice("NVIDIA A100-SXM4-80GB")->peak_tflops, 312.0);
  EXPECT_FALSE(GpuSpecOfDevice("cpu (reference evaluator)").has_value());
}

TEST(GpuSpecTest, RooflineIsTheSlowerOfComputeAndMemory) {
  const GpuSpec h100 = GpuSpec::H100();
  EXPECT_DOUBLE_EQ(h100.RooflineUs(989e6, 0), 1.0);  // 989 TFLOP/s: 989 MFLOP a microsecond
  EXPECT_DOUBLE_EQ(h100.RooflineUs(0, 3350e3), 1.0);
  EXPECT_TRUE(h100.ComputeBound(2 * 989e6, 3350e3));
  EXPECT_FALSE(h100.ComputeBound(989e6, 2 * 3350e3));
}

}  // namespace
}  // namespace gptc::program
