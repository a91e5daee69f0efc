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

// Note [memory beside the arenas]: what gptrun needs on a card besides its
// arenas. The GPU trainer leaves kGpuReserveBytes free (GpuOptions::
// reserve_bytes) and allocates the cuBLASLt workspace, which the plan sizes
// and kGemmWorkspaceAllowanceBytes bounds from above; the CUDA context and the
// kernels' modules take kCudaContextBytes or less before a trainer can
// measure the free memory. One budget is taken from a card's total memory
// (gptc compile --memory-budget h100), the other from its free memory once
// CUDA is up (gptrun --model --remat auto on a GPU).
inline constexpr int64_t kGpuReserveBytes = int64_t{512} << 20;
inline constexpr int64_t kGemmWorkspaceAllowanceBytes = int64_t{256} << 20;
inline constexpr int64_t kCudaContextBytes = int64_t{768} << 20;
inline constexpr int64_t kGpuFreeMemoryBesideArenas =
    kGpuReserveBytes + kGemmWorkspaceAllowanceBytes;
inline constexpr int64_t kGpuMemoryBesideArenas = kCudaContextBytes + kGpuFreeMemoryBesideArenas;

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
