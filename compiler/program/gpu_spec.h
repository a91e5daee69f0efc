// The peaks of the GPUs gptc plans for: the fusion report's and the HTML
// report's rooflines, and `--memory-budget`'s card sizes. Data only, so that
// gptrun's reports use the same figures as the compiler's.
#ifndef GPTC_COMPILER_PROGRAM_GPU_SPEC_H_
#define GPTC_COMPILER_PROGRAM_GPU_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gptc::program {

struct GpuSpec {
  std::string name = "h100";
  double peak_tflops = 989.0;  // dense bf16 tensor-core TFLOP/s
  double hbm_gbps = 3350.0;    // HBM GB/s
  // Device memory as nvidia-smi reports its total (the SXM cards: 81,559,
  // 143,771 and 81,920 MiB).
  int64_t memory_bytes = int64_t{81559} << 20;

  static GpuSpec H100() { return {"h100", 989.0, 3350.0, int64_t{81559} << 20}; }
  static GpuSpec H200() { return {"h200", 989.0, 4800.0, int64_t{143771} << 20}; }
  static GpuSpec A100() { return {"a100", 312.0, 2039.0, int64_t{81920} << 20}; }

  // The roofline time of `flops` and `bytes` moved: max(compute, memory).
  double RooflineUs(double flops, double bytes) const;
  bool ComputeBound(double flops, double bytes) const;
};

// "h100", "h200" or "a100" (case-insensitive); nullopt otherwise.
std::optional<GpuSpec> FindGpuSpec(std::string_view name);
// The card a device name the driver reports names ("NVIDIA H100 80GB HBM3"),
// or nullopt for another one.
std::optional<GpuSpec> GpuSpecOfDevice(std::string_view device_name);

}  // namespace gptc::program

#endif  // GPTC_COMPILER_PROGRAM_GPU_SPEC_H_
