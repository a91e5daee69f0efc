#include "runtime/gpu/cublaslt_api.h"

#include <dlfcn.h>
#include <fmt/ranges.h>
#include <glob.h>

#include <cstdlib>

namespace gptc::rt::gpu {

namespace {

constexpr char kLibrary[] = "libcublasLt.so.13";

std::vector<std::string> Glob(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g;
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  return out;
}

template <typename F>
bool Bind(void* handle, const char* symbol, F* out) {
  *out = reinterpret_cast<F>(dlsym(handle, symbol));
  return *out != nullptr;
}

}  // namespace

std::string CublasLtApi::StatusText(cublasStatus_t status) const {
  const char* name = GetStatusName != nullptr ? GetStatusName(status) : nullptr;
  const char* text = GetStatusString != nullptr ? GetStatusString(status) : nullptr;
  return fmt::format(
      "{} ({})", name != nullptr ? name : fmt::format("cublasStatus {}", static_cast<int>(status)),
      text != nullptr ? text : "no description");
}

std::vector<std::string> CublasLtCandidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("GPTC_CUBLASLT"); env != nullptr && *env != '\0') {
    out.emplace_back(env);
  }
  out.emplace_back(kLibrary);
  out.emplace_back(std::string("/usr/local/cuda/lib64/") + kLibrary);
  std::vector<std::string> prefixes = {"/usr/lib", "/usr/local/lib", "/opt/conda/lib"};
  for (std::string& p : Glob("/opt/*/lib")) {  // virtual environments under /opt
    if (p != "/opt/conda/lib") prefixes.push_back(std::move(p));
  }
  for (const char* var : {"HOME", "VIRTUAL_ENV", "CONDA_PREFIX"}) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    prefixes.push_back(std::string(v) + (std::string_view(var) == "HOME" ? "/.local/lib" : "/lib"));
  }
  for (const std::string& prefix : prefixes) {
    for (const char* packages : {"site-packages", "dist-packages"}) {
      for (const char* sub : {"nvidia/cu13/lib", "nvidia/cublas/lib"}) {
        for (std::string& p :
             Glob(fmt::format("{}/python3*/{}/{}/{}", prefix, packages, sub, kLibrary))) {
          out.push_back(std::move(p));
        }
      }
    }
  }
  return out;
}

StatusOr<CublasLtApi> LoadCublasLt(const std::vector<std::string>& candidates) {
  std::vector<std::string> tried;
  for (const std::string& path : candidates) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      tried.push_back(path);
      continue;
    }
    CublasLtApi api;
    api.path = path;
    const char* missing = nullptr;
    auto bind = [&](const char* symbol, auto* out) {
      if (missing == nullptr && !Bind(handle, symbol, out)) missing = symbol;
    };
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
    if (missing != nullptr) {
      dlclose(handle);
      return Error("{} has no symbol {} (expected cuBLASLt 13)", path, missing);
    }
    api.version = api.GetVersion();
    return api;  // the handle stays open for the process
  }
  return Error(
      "cuBLASLt not found: {} could not be loaded from {} (install the CUDA 13 "
      "libraries or pip's nvidia-cublas, or set GPTC_CUBLASLT=/path/to/{})",
      kLibrary, fmt::join(tried, ", "), kLibrary);
}

StatusOr<const CublasLtApi*> GetCublasLt() {
  static const StatusOr<CublasLtApi>* api =
      new StatusOr<CublasLtApi>(LoadCublasLt(CublasLtCandidates()));
  if (!api->ok()) return api->status();
  return &api->value();
}

}  // namespace gptc::rt::gpu
