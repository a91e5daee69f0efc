#include "runtime/gpu/device.h"

#include <algorithm>

#include "compiler/support/text.h"
#include "runtime/gpu/backend.h"
#include "runtime/gpu/cuda_api.h"

namespace gptc::rt::gpu {

namespace {

std::string Version(int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); }

}  // namespace

Status CheckMemoryFits(const std::vector<MemoryNeed>& needs, int64_t reserve_bytes,
                       const DeviceInfo& device, std::string_view artifact) {
  int64_t total = reserve_bytes, arenas = 0;
  std::string parts;
  for (const MemoryNeed& n : needs) {
    total += n.bytes;
    if (n.arena) arenas += n.bytes;
    parts += fmt::format("{} {}, ", n.what, FormatBytes(n.bytes));
  }
  if (total <= device.free_bytes) return Status::Ok();
  // What the arenas may take with everything else in place.
  const int64_t budget = std::max<int64_t>(0, device.free_bytes - (total - arenas));
  return Error(
      "{}: needs {} of device memory ({}{} reserved for CUDA and cuBLASLt), {} has "
      "{} free of {}: compile with --remat auto --memory-budget {}B (or a smaller --batch, "
      "or --no-logits; gptc compile)",
      artifact, FormatBytes(total), parts, FormatBytes(reserve_bytes), device.name,
      FormatBytes(device.free_bytes), FormatBytes(device.total_bytes), budget);
}

std::string DeviceInfo::Describe() const {
  return fmt::format("gpu {} ({}, sm_{}{}, {} of {} free, {} SMs, driver {})", ordinal, name,
                     capability.major, capability.minor, FormatBytes(free_bytes),
                     FormatBytes(total_bytes), sm_count, Version(driver_version));
}

int CountDevices() {
  int n = 0;
  if (Cuda().GetDeviceCount(&n) != cudaSuccess) {
    Cuda().GetLastError();  // clear it, so that no later cudaGetLastError reports it
    return 0;
  }
  return n;
}

namespace {

// CheckGpuAvailable on `cuda`.
Status CheckAvailable(const RuntimeApi& cuda) {
  int n = 0;
  cudaError_t e = cuda.GetDeviceCount(&n);
  if (e == cudaErrorInsufficientDriver) {
    int driver = 0;
    cuda.DriverGetVersion(&driver);
    if (driver == 0) {
      return Error(
          "no GPU: no NVIDIA driver on this machine (libcuda.so.1 was not found; "
          "cudaGetDeviceCount: {})",
          cuda.ErrorText(e));
    }
    return Error(
        "no GPU: the NVIDIA driver supports CUDA {}, this gptrun needs {} "
        "(cudaGetDeviceCount: {})",
        Version(driver), Version(CUDART_VERSION), cuda.ErrorText(e));
  }
  if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
    return Error("no GPU: the NVIDIA driver sees no device (cudaGetDeviceCount: {})",
                 cuda.ErrorText(e == cudaSuccess ? cudaErrorNoDevice : e));
  }
  if (e != cudaSuccess) return Error("no GPU: cudaGetDeviceCount: {}", cuda.ErrorText(e));
  return Status::Ok();
}

}  // namespace

Status CheckGpuAvailable() { return CheckAvailable(Cuda()); }

StatusOr<DeviceInfo> OpenDevice(const RuntimeApi& cuda, int ordinal) {
  RETURN_IF_ERROR(CheckAvailable(cuda));
  int count = 0;
  RETURN_IF_ERROR(cuda.Check(cuda.GetDeviceCount(&count), "cudaGetDeviceCount"));
  if (ordinal < 0 || ordinal >= count) {
    return Error("gpu {} does not exist: this machine has {} GPU{}", ordinal, count,
                 count == 1 ? "" : "s");
  }
  RETURN_IF_ERROR(cuda.Check(cuda.SetDevice(ordinal), fmt::format("cudaSetDevice({})", ordinal)));
  // cudaSetDevice creates the primary context since CUDA 12; cudaFree(0) makes
  // sure of it, so that driver-API calls find a current context.
  RETURN_IF_ERROR(cuda.Check(cuda.Free(nullptr), "cudaFree(0) (context creation)"));
  DeviceInfo info;
  info.ordinal = ordinal;
  cudaDeviceProp prop{};
  RETURN_IF_ERROR(cuda.Check(cuda.GetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties"));
  info.name = prop.name;
  info.capability = {prop.major, prop.minor};
  info.sm_count = prop.multiProcessorCount;
  info.max_shared_per_block = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  RETURN_IF_ERROR(cuda.Check(cuda.DriverGetVersion(&info.driver_version), "cudaDriverGetVersion"));
  RETURN_IF_ERROR(
      cuda.Check(cuda.RuntimeGetVersion(&info.runtime_version), "cudaRuntimeGetVersion"));
  RETURN_IF_ERROR(QueryMemory(cuda, &info.free_bytes, &info.total_bytes));
  return info;
}

StatusOr<DeviceInfo> OpenDevice(int ordinal) { return OpenDevice(Cuda(), ordinal); }

Status QueryMemory(const RuntimeApi& cuda, int64_t* free_bytes, int64_t* total_bytes) {
  size_t free = 0, total = 0;
  RETURN_IF_ERROR(cuda.Check(cuda.MemGetInfo(&free, &total), "cudaMemGetInfo"));
  *free_bytes = static_cast<int64_t>(free);
  *total_bytes = static_cast<int64_t>(total);
  return Status::Ok();
}

}  // namespace gptc::rt::gpu
