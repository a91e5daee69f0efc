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

std::optional<GpuSpec> GpuSpecOfDevice(std::string_view device_name) {
  for (const GpuSpec& g : {GpuSpec::H200(), GpuSpec::H100(), GpuSpec::A100()}) {
    std::string upper = g.name;
    std::transform(upper.begin(), upper.end(), upper.begin(),
                   [](unsigned char c) { return std::toupper(c); });
    if (device_name.find(upper) != std::string_view::npos) return g;
  }
  return std::nullopt;
}

}  // namespace gptc::program
