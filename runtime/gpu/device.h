// The GPU the runtime runs on: which one, what it can do, how much memory is
// free. CUDA-free header.
#ifndef GPTC_RUNTIME_GPU_DEVICE_H_
#define GPTC_RUNTIME_GPU_DEVICE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/support/status.h"
#include "runtime/gpu/target.h"

namespace gptc::rt::gpu {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  ComputeCapability capability;
  int64_t free_bytes = 0, total_bytes = 0;
  int sm_count = 0;
  int64_t max_shared_per_block = 0;             // opt-in maximum (dynamic shared memory attribute)
  int driver_version = 0, runtime_version = 0;  // 13000 = 13.0

  // "gpu 0 (NVIDIA H100 80GB HBM3, sm_90, 79.1 of 79.6 GiB free, driver 13.0)".
  std::string Describe() const;
};

// Number of visible CUDA devices; 0 when there is no driver or no device
// (never an error: gptrun asks this to choose its default device).
int CountDevices();

// Why there is no usable GPU, as one line ("no NVIDIA driver: libcuda.so.1 was
// not found (cudaErrorInsufficientDriver ...)"), or Ok when there is one.
Status CheckGpuAvailable();

struct RuntimeApi;

// Makes device `ordinal` of `cuda` (a backend's runtime, backend.h) current,
// creating its primary context, and queries it.
StatusOr<DeviceInfo> OpenDevice(const RuntimeApi& cuda, int ordinal);
// The same on the installed backend.
StatusOr<DeviceInfo> OpenDevice(int ordinal);

// Free and total memory of the current device, fresh.
Status QueryMemory(const RuntimeApi& cuda, int64_t* free_bytes, int64_t* total_bytes);

// One part of the device memory a run needs ("arena of entry train_step").
struct MemoryNeed {
  std::string what;
  int64_t bytes = 0;
  bool arena = false;  // an entry's arena: what gptc compile --memory-budget bounds
};

// Ok when `needs` plus `reserve_bytes` fit in the device's free memory; else
// one line naming the artifact, the sizes, and what to change: the
// --memory-budget for gptc compile --remat auto that leaves room for the rest.
Status CheckMemoryFits(const std::vector<MemoryNeed>& needs, int64_t reserve_bytes,
                       const DeviceInfo& device, std::string_view artifact);

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_DEVICE_H_
