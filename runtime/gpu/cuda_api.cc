#include "runtime/gpu/cuda_api.h"

namespace gptc::rt::gpu {

namespace {

template <typename Signature>
Status Resolve(const char* symbol, ApiFn<Signature>* out) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  cudaError_t e =
      cudaGetDriverEntryPointByVersion(symbol, &fn, kDriverAbiVersion, cudaEnableDefault, &found);
  if (e != cudaSuccess) {
    return Error("cudaGetDriverEntryPointByVersion({}): {}", symbol, CudaErrorText(e));
  }
  if (fn == nullptr || found != cudaDriverEntryPointSuccess) {
    return Error(
        "the CUDA driver has no {} for CUDA {}.{} ({})", symbol, kDriverAbiVersion / 1000,
        kDriverAbiVersion % 1000 / 10,
        found == cudaDriverEntryPointVersionNotSufficent ? "driver too old" : "symbol not found");
  }
  *out = reinterpret_cast<typename ApiFn<Signature>::Plain>(fn);
  return Status::Ok();
}

StatusOr<DriverApi> Load() {
  DriverApi api;
  RETURN_IF_ERROR(Resolve("cuGetErrorName", &api.GetErrorName));
  RETURN_IF_ERROR(Resolve("cuGetErrorString", &api.GetErrorString));
  RETURN_IF_ERROR(Resolve("cuModuleLoadDataEx", &api.ModuleLoadDataEx));
  RETURN_IF_ERROR(Resolve("cuModuleUnload", &api.ModuleUnload));
  RETURN_IF_ERROR(Resolve("cuModuleGetFunction", &api.ModuleGetFunction));
  RETURN_IF_ERROR(Resolve("cuFuncSetAttribute", &api.FuncSetAttribute));
  RETURN_IF_ERROR(Resolve("cuFuncGetAttribute", &api.FuncGetAttribute));
  RETURN_IF_ERROR(Resolve("cuLaunchKernel", &api.LaunchKernel));
  return api;
}

}  // namespace

std::string DriverApi::ErrorText(CUresult result) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (GetErrorName) GetErrorName(result, &name);
  if (GetErrorString) GetErrorString(result, &text);
  return fmt::format("{} ({})",
                     name != nullptr ? name : fmt::format("CUresult {}", static_cast<int>(result)),
                     text != nullptr ? text : "no description");
}

StatusOr<const DriverApi*> LoadCudaDriverApi() {
  static const StatusOr<DriverApi>* api = new StatusOr<DriverApi>(Load());
  if (!api->ok()) return api->status();
  return &api->value();
}

}  // namespace gptc::rt::gpu
