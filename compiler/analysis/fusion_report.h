// The fusion report: one row per kernel of a fused module (passes/fusion.h),
// in the entry's order, with its cost at the roofline of a target GPU.
//
//   kernel                       kind      ops   read B  written B    FLOPs   time us  source
//   h.0.attn.c_attn.dot.fusion   gemm        3   ...
// Costs are compiler/analysis/kernel_cost.h's; time = max(FLOPs / peak,
// bytes / bandwidth).
#ifndef GPTC_COMPILER_ANALYSIS_FUSION_REPORT_H_
#define GPTC_COMPILER_ANALYSIS_FUSION_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir/module.h"
#include "compiler/program/gpu_spec.h"

namespace gptc::analysis {

using program::GpuSpec;

struct KernelRow {
  std::string name;
  std::string kind;  // fusion kind, or the opcode of an unfused kernel
  int64_t ops = 0;   // instructions inside (1 for an unfused kernel)
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  double flops = 0;
  double time_us = 0;
  // Whether the roofline time is the compute or the memory time.
  bool compute_bound = false;
  std::string source;  // most common metadata inside the kernel
};

// One row per kernel of the entry computation (see IsKernel in compiler/analysis/kernel_count.h).
std::vector<KernelRow> AnalyzeKernels(const ir::Module& module, const GpuSpec& gpu);

// The report text: rows, a totals row, kernels per kind and per layer.
std::string RenderFusionReport(const ir::Module& module, const GpuSpec& gpu);
// 2747825832 -> "2.75 G" (decimal units, as FLOP counts are quoted).
std::string FormatFlops(double flops);

}  // namespace gptc::analysis

#endif  // GPTC_COMPILER_ANALYSIS_FUSION_REPORT_H_
