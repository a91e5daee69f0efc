// Loading an NVIDIA library at run time (cuBLASLt, NCCL) instead of linking
// it, so gptrun starts on machines without it: where to look, and binding
// its functions. The handle stays open for the process.
#ifndef GPTC_RUNTIME_GPU_DYNAMIC_LIBRARY_H_
#define GPTC_RUNTIME_GPU_DYNAMIC_LIBRARY_H_

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/gpu/api_fn.h"

namespace gptc::rt::gpu {

// Where to look for `library` ("libnccl.so.2"), in order: $`env_var` when
// set, the loader's own search (the bare name), /usr/local/cuda/lib64, then
// pip's wheels `<site-packages>/<pip_dir>/<library>` for each of `pip_dirs`
// ("nvidia/nccl/lib") under the usual Python prefixes (/usr/lib,
// /usr/local/lib, /opt/*/lib, ~/.local/lib, $VIRTUAL_ENV, $CONDA_PREFIX).
std::vector<std::string> LibraryCandidates(const char* env_var, std::string_view library,
                                           std::initializer_list<std::string_view> pip_dirs);

// The first of `candidates` that dlopen loads (its path in `path`), or null
// with every path tried appended to `tried`.
void* OpenFirst(const std::vector<std::string>& candidates, std::string* path,
                std::vector<std::string>* tried);

// Binds the functions of an opened library; remembers the first symbol missing.
class SymbolBinder {
 public:
  explicit SymbolBinder(void* handle) : handle_(handle) {}
  template <typename F>
  void operator()(const char* symbol, F* out) {
    *out = reinterpret_cast<F>(Lookup(symbol));
    if (*out == nullptr && missing_ == nullptr) missing_ = symbol;
  }
  template <typename Signature>
  void operator()(const char* symbol, ApiFn<Signature>* out) {
    *out = reinterpret_cast<typename ApiFn<Signature>::Plain>(Lookup(symbol));
    if (!*out && missing_ == nullptr) missing_ = symbol;
  }
  // The first symbol not found, or null.
  const char* missing() const { return missing_; }

 private:
  void* Lookup(const char* symbol) const;
  void* handle_;
  const char* missing_ = nullptr;
};

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_DYNAMIC_LIBRARY_H_
