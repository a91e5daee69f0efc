// The CUDA runtime (linked statically: it finds libcuda.so.1 itself when the
// process first calls it, and reports cudaErrorInsufficientDriver or
// cudaErrorNoDevice where there is none) and the few driver-API entry points
// the runtime needs (module loading, kernel launch), fetched from the driver
// through cudaGetDriverEntryPointByVersion so that no binary links libcuda.
//
// Internal to runtime/gpu: this header includes the CUDA headers.
#ifndef GPTC_RUNTIME_GPU_CUDA_API_H_
#define GPTC_RUNTIME_GPU_CUDA_API_H_

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "compiler/support/status.h"
#include "runtime/gpu/api_fn.h"

namespace gptc::rt::gpu {

// The driver ABI we ask for: CUDA 12.0's signatures, which every CUDA 12/13
// driver provides.
inline constexpr unsigned kDriverAbiVersion = 12000;

struct DriverApi {
  ApiFn<decltype(::cuGetErrorName)> GetErrorName;
  ApiFn<decltype(::cuGetErrorString)> GetErrorString;
  ApiFn<decltype(::cuModuleLoadDataEx)> ModuleLoadDataEx;
  ApiFn<decltype(::cuModuleUnload)> ModuleUnload;
  ApiFn<decltype(::cuModuleGetFunction)> ModuleGetFunction;
  ApiFn<decltype(::cuFuncSetAttribute)> FuncSetAttribute;
  ApiFn<decltype(::cuFuncGetAttribute)> FuncGetAttribute;
  ApiFn<decltype(::cuLaunchKernel)> LaunchKernel;

  // "CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed)".
  std::string ErrorText(CUresult result) const;
};

// The driver entry points of the active backend (backend.h): CUDA's are
// resolved once, after the runtime is initialized (e.g. by OpenDevice);
// errors name the missing symbol.
StatusOr<const DriverApi*> GetDriverApi();
// CUDA's driver entry points (the CUDA backend's `driver`).
StatusOr<const DriverApi*> LoadCudaDriverApi();

// "cudaErrorMemoryAllocation (out of memory)", from the active backend.
std::string CudaErrorText(cudaError_t error);

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_CUDA_API_H_
