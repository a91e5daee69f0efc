// The artifact's kernels loaded into the current context: one CUmodule per
// kernel (each PTX/cubin in the artifact is a whole module). The cubin is
// loaded where the device is exactly the artifact's target; elsewhere the
// driver JIT-compiles the PTX (docs/ARTIFACT.md, "Container").
//
// Internal to runtime/gpu (CUDA headers).
#ifndef GPTC_RUNTIME_GPU_KERNEL_MODULES_H_
#define GPTC_RUNTIME_GPU_KERNEL_MODULES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/program/container.h"
#include "runtime/gpu/cuda_api.h"
#include "runtime/gpu/device.h"
#include "runtime/gpu/plan_reader.h"

namespace gptc::rt::gpu {

// The parameters of `.entry NAME(...)` in PTX text, or -1 when not found.
int64_t CountPtxParams(std::string_view ptx, std::string_view name);

class KernelModules {
 public:
  // Loads every kernel of the artifact's manifest index; `artifact_path`
  // prefixes the errors, which name the kernel, the API call and the JIT log.
  static StatusOr<std::unique_ptr<KernelModules>> Load(const DriverApi& cu,
                                                       const program::Artifact& artifact,
                                                       std::string_view artifact_path,
                                                       const DeviceInfo& device);
  ~KernelModules();
  KernelModules(const KernelModules&) = delete;
  KernelModules& operator=(const KernelModules&) = delete;

  // Kernel `name` of entry `entry` (a kernel thunk's name), or an error.
  StatusOr<CUfunction> Find(std::string_view entry, std::string_view name) const;
  // The number of parameters its PTX `.entry` declares (Note [kernel ABI]:
  // one pointer per operand and result), or -1 when unknown.
  int64_t ParamCount(std::string_view entry, std::string_view name) const;

  // Checks that `function` can launch `threads` threads with `dynamic_smem`
  // bytes of dynamic shared memory, raising its dynamic shared memory limit
  // above the default 48 KiB when needed. `what` names the thunk in errors.
  Status PrepareLaunch(CUfunction function, int64_t threads, int64_t dynamic_smem,
                       std::string_view what);

  int64_t cubins_loaded() const { return cubins_; }
  int64_t ptx_jitted() const { return jitted_; }

 private:
  KernelModules(const DriverApi& cu, const DeviceInfo& device) : cu_(cu), device_(device) {}

  const DriverApi& cu_;
  DeviceInfo device_;
  std::vector<CUmodule> modules_;
  std::map<std::pair<std::string, std::string>, CUfunction, std::less<>> functions_;
  std::map<std::pair<std::string, std::string>, int64_t, std::less<>> param_counts_;
  std::map<CUfunction, int64_t> dynamic_smem_limit_;
  int64_t cubins_ = 0, jitted_ = 0;
};

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_KERNEL_MODULES_H_
