#include "compiler/analysis/fusion_report.h"

#include <gtest/gtest.h>

#include "tests/testing/pass_harness.h"

namespace gptc::analysis {
namespace {

using ::gptc::testing::ParseOrDie;

TEST(FusionReportTest, GpuSpecs) {
  EXPECT_EQ(program::FindGpuSpec("H100")->hbm_gbps, 3350.0);
  EXPECT_EQ(program::FindGpuSpec("h200")->hbm_gbps, 4800.0);
  EXPECT_EQ(program::FindGpuSpec("a100")->peak_tflops, 312.0);
  EXPECT_FALSE(program::FindGpuSpec("v100").has_value());
}

TEST(FusionReportTest, RowsBytesFlopsAndRoofline) {
  auto module = ParseOrDie(R"(module m
%fused.d {
  %p0 = f32[64,128] parameter(0)
  %p1 = f32[128,32] parameter(1)
  ROOT %d = f32[64,32] dot(%p0, %p1), lhs_contracting={1}, rhs_contracting={0}, meta="h.0.mlp"
}
%fused.e {
  %q = f32[64,32] parameter(0)
  %e = f32[64,32] exp(%q), meta="h.0.act"
  ROOT %n = f32[64,32] neg(%e), meta="h.0.act"
}
ENTRY %main {
  %x = f32[64,128] parameter(0)
  %w = f32[128,32] parameter(1)
  %f = f32[64,32] fusion(%x, %w), kind=gemm, epilogue={d=0}, calls=%fused.d, phase=forward, layer=0, meta="h.0.mlp"
  ROOT %g = f32[64,32] fusion(%f), kind=loop, calls=%fused.e, phase=forward, layer=0, meta="h.0.act"
}
)");
  ASSERT_NE(module, nullptr);
  GpuSpec gpu = GpuSpec::H100();
  std::vector<KernelRow> rows = AnalyzeKernels(*module, gpu);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].kind, "gemm");
  EXPECT_EQ(rows[0].flops, 2.0 * 64 * 32 * 128);
  EXPECT_EQ(rows[0].bytes_read, (64 * 128 + 128 * 32) * 4);
  EXPECT_EQ(rows[0].bytes_written, 64 * 32 * 4);
  double bytes = (64 * 128 + 128 * 32 + 64 * 32) * 4.0;
  EXPECT_DOUBLE_EQ(rows[0].time_us, std::max(2.0 * 64 * 32 * 128 / 989e12, bytes / 3350e9) * 1e6);
  EXPECT_EQ(rows[1].kind, "loop");
  EXPECT_EQ(rows[1].ops, 2);
  EXPECT_EQ(rows[1].flops, 2.0 * 64 * 32);
  EXPECT_EQ(rows[1].source, "h.0.act");
  std::string text = RenderFusionReport(*module, gpu);
  EXPECT_NE(text.find("total (2 kernels)"), std::string::npos) << text;
  EXPECT_NE(text.find("gemm=1 loop=1"), std::string::npos) << text;
  EXPECT_NE(text.find("h.0=2"), std::string::npos) << text;
}

}  // namespace
}  // namespace gptc::analysis
