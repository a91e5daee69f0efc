#include "runtime/gpu/dynamic_library.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <glob.h>

#include <cstdlib>
#include <utility>

namespace gptc::rt::gpu {

namespace {

std::vector<std::string> Glob(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g;
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  return out;
}

}  // namespace

std::vector<std::string> LibraryCandidates(const char* env_var, std::string_view library,
                                           std::initializer_list<std::string_view> pip_dirs) {
  std::vector<std::string> out;
  if (const char* env = std::getenv(env_var); env != nullptr && *env != '\0') {
    out.emplace_back(env);
  }
  out.emplace_back(library);
  out.push_back(fmt::format("/usr/local/cuda/lib64/{}", library));
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
      for (std::string_view dir : pip_dirs) {
        for (std::string& p :
             Glob(fmt::format("{}/python3*/{}/{}/{}", prefix, packages, dir, library))) {
          out.push_back(std::move(p));
        }
      }
    }
  }
  return out;
}

void* OpenFirst(const std::vector<std::string>& candidates, std::string* path,
                std::vector<std::string>* tried) {
  for (const std::string& candidate : candidates) {
    if (void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      *path = candidate;
      return handle;
    }
    tried->push_back(candidate);
  }
  return nullptr;
}

void* SymbolBinder::Lookup(const char* symbol) const { return dlsym(handle_, symbol); }

}  // namespace gptc::rt::gpu
