#include "compiler/program/gpu_spec.h"

#include <algorithm>
#include <cctype>

namespace gptc::program {

double GpuSpec::RooflineUs(double flops, double bytes) const {
  return std::max(flops / (peak_tflops * 1e6), bytes / (hbm_gbps * 1e3));
}

bool GpuSpec::ComputeBound(double flops, double bytes) const {
  return flops / (peak_tflops * 1e6) > bytes / (hbm_gbps * 1e3);
}

std::optional<GpuSpec> FindGpuSpec(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  for (const GpuSpec& g : {GpuSpec::H100(), GpuSpec::H200(), GpuSpec::A100()}) {
    if (g.name == lower) return g;
  }
  return std::nullopt;
}

}  // namespace gptc::program
