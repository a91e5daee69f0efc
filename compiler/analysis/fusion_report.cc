#include "compiler/analysis/fusion_report.h"

#include <fmt/format.h>

#include "compiler/analysis/kernel_cost.h"
#include "compiler/analysis/kernel_count.h"
#include "compiler/support/text.h"

namespace gptc::analysis {

std::vector<KernelRow> AnalyzeKernels(const ir::Module& module, const GpuSpec& gpu) {
  std::vector<KernelRow> rows;
  for (const auto& inst : module.entry()->instructions()) {
    if (!analysis::IsKernel(*inst)) continue;
    analysis::KernelCost cost = analysis::AnalyzeKernelCost(*inst);
    const double bytes = static_cast<double>(cost.bytes_read + cost.bytes_written);
    rows.push_back({.name = inst->name(),
                    .kind = std::move(cost.kind),
                    .ops = cost.ops,
                    .bytes_read = cost.bytes_read,
                    .bytes_written = cost.bytes_written,
                    .flops = cost.flops,
                    .time_us = gpu.RooflineUs(cost.flops, bytes),
                    .compute_bound = gpu.ComputeBound(cost.flops, bytes),
                    .source = std::move(cost.source)});
  }
  return rows;
}

std::string FormatFlops(double flops) {
  static constexpr const char* kNames[] = {"", "K", "M", "G", "T", "P"};
  int unit = 0;
  while (flops >= 1000.0 && unit < 5) {
    flops /= 1000.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f}", flops) : fmt::format("{:.2f} {}", flops, kNames[unit]);
}

std::string RenderFusionReport(const ir::Module& module, const GpuSpec& gpu) {
  std::vector<KernelRow> rows = AnalyzeKernels(module, gpu);
  std::string out =
      fmt::format("fusion report: module {} on {} ({:.0f} TFLOP/s bf16, {:.0f} GB/s)\n",
                  module.name(), gpu.name, gpu.peak_tflops, gpu.hbm_gbps);
  // Bytes in binary units and FLOPs in decimal ones, so a column reads at a
  // glance; the exact counts are KernelRow's (and the tests').
  out += fmt::format("{:<48} {:<13} {:>5} {:>11} {:>11} {:>12} {:>11} {:<7}  {}\n", "kernel",
                     "kind", "ops", "read", "written", "FLOPs", "time us", "bound", "source");
  KernelRow total;
  for (const KernelRow& r : rows) {
    out += fmt::format("{:<48} {:<13} {:>5} {:>11} {:>11} {:>12} {:>11.3f} {:<7}  {}\n", r.name,
                       r.kind, r.ops, FormatBytes(r.bytes_read), FormatBytes(r.bytes_written),
                       FormatFlops(r.flops), r.time_us, r.compute_bound ? "compute" : "memory",
                       r.source);
    total.ops += r.ops;
    total.bytes_read += r.bytes_read;
    total.bytes_written += r.bytes_written;
    total.flops += r.flops;
    total.time_us += r.time_us;
  }
  out += fmt::format("{:<48} {:<13} {:>5} {:>11} {:>11} {:>12} {:>11.3f}\n",
                     fmt::format("total ({} kernels)", rows.size()), "", total.ops,
                     FormatBytes(total.bytes_read), FormatBytes(total.bytes_written),
                     FormatFlops(total.flops), total.time_us);
  out += "kernels by kind:";
  for (const auto& [kind, n] : analysis::CountKernels(module))
    out += fmt::format(" {}={}", kind, n);
  out += "\nkernels per layer (forward + backward):";
  for (const auto& [layer, n] : analysis::KernelsPerLayer(module))
    out += fmt::format(" h.{}={}", layer, n);
  out += "\n";
  return out;
}

}  // namespace gptc::analysis
