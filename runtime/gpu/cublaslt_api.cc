#include "runtime/gpu/cublaslt_api.h"

#include <dlfcn.h>
#include <fmt/ranges.h>


#include "runtime/gpu/dynamic_library.h"

namespace gptc::rt::gpu {

namespace {

constexpr char kLibrary[] = "libcublasLt.so.13";

}  // namespace

std::string CublasLtApi::StatusText(cublasStatus_t status) const {
  const char* name = GetStatusName ? GetStatusName(status) : nullptr;
  const char* text = GetStatusString ? GetStatusString(status) : nullptr;
  return fmt::format(
      "{} ({})", name != nullptr ? name : fmt::format("cublasStatus {}", static_cast<int>(status)),
      text != nullptr ? text : "no description");
}

std::vector<std::string> CublasLtCandidates() {
  return LibraryCandidates("GPTC_CUBLASLT", kLibrary, {"nvidia/cu13/lib", "nvidia/cublas/lib"});
}

StatusOr<CublasLtApi> LoadCublasLt(const std::vector<std::string>& candidates) {
  CublasLtApi api;
  std::vector<std::string> tried;
  void* handle = OpenFirst(candidates, &api.path, &tried);
  if (handle == nullptr) {
    return Error(
        "cuBLASLt not found: {} could not be loaded from {} (install the CUDA 13 "
        "libraries or pip's nvidia-cublas, or set GPTC_CUBLASLT=/path/to/{})",
        kLibrary, fmt::join(tried, ", "), kLibrary);
  }
  SymbolBinder bind(handle);
  bind("cublasLtCreate", &api.Create);
  bind("cublasLtDestroy", &api.Destroy);
  bind("cublasLtGetVersion", &api.GetVersion);
  bind("cublasLtGetStatusName", &api.GetStatusName);
  bind("cublasLtGetStatusString", &api.GetStatusString);
  bind("cublasLtMatmulDescCreate", &api.MatmulDescCreate);
  bind("cublasLtMatmulDescDestroy", &api.MatmulDescDestroy);
  bind("cublasLtMatmulDescSetAttribute", &api.MatmulDescSetAttribute);
  bind("cublasLtMatrixLayoutCreate", &api.MatrixLayoutCreate);
  bind("cublasLtMatrixLayoutDestroy", &api.MatrixLayoutDestroy);
  bind("cublasLtMatrixLayoutSetAttribute", &api.MatrixLayoutSetAttribute);
  bind("cublasLtMatmulPreferenceCreate", &api.MatmulPreferenceCreate);
  bind("cublasLtMatmulPreferenceDestroy", &api.MatmulPreferenceDestroy);
  bind("cublasLtMatmulPreferenceSetAttribute", &api.MatmulPreferenceSetAttribute);
  bind("cublasLtMatmulAlgoGetHeuristic", &api.MatmulAlgoGetHeuristic);
  bind("cublasLtMatmul", &api.Matmul);
  if (bind.missing() != nullptr) {
    dlclose(handle);
    return Error("{} has no symbol {} (expected cuBLASLt 13)", api.path, bind.missing());
  }
  api.version = api.GetVersion();
  return api;  // the handle stays open for the process
}

StatusOr<const CublasLtApi*> LoadNvidiaCublasLt() {
  static const StatusOr<CublasLtApi>* api =
      new StatusOr<CublasLtApi>(LoadCublasLt(CublasLtCandidates()));
  if (!api->ok()) return api->status();
  return &api->value();
}

}  // namespace gptc::rt::gpu
