// The artifact's target ("sm_90a") against the device's compute capability.
//
// sm_XY code runs on compute capability X.Y and, as PTX JIT-compiled by the
// driver, on any later one; an arch-specific target (sm_90a: wgmma, setmaxnreg)
// runs only on exactly X.Y. A cubin is loaded only on exactly its capability;
// otherwise the runtime JIT-compiles the PTX.
#ifndef GPTC_RUNTIME_GPU_TARGET_H_
#define GPTC_RUNTIME_GPU_TARGET_H_

#include <string>
#include <string_view>

#include "compiler/support/status.h"

namespace gptc::rt::gpu {

struct ComputeCapability {
  int major = 0, minor = 0;
  bool operator==(const ComputeCapability&) const = default;
  std::string ToString() const;  // "9.0"
};

struct Target {
  ComputeCapability capability;
  bool arch_specific = false;  // the "a" suffix
};

// "sm_90a" -> {9.0, arch-specific}. Errors name the string.
StatusOr<Target> ParseTarget(std::string_view target);

// Whether code for `target` can run on `device`; the error says what to do
// ("ARTIFACT: compiled for sm_90a, which runs only on compute capability 9.0;
// NAME is 8.0: recompile with gptc compile --target sm_80").
Status CheckTargetRuns(std::string_view target, ComputeCapability device,
                       std::string_view device_name, std::string_view artifact);

// Whether the artifact's cubins can be loaded as they are on `device`.
bool CubinLoads(std::string_view target, ComputeCapability device);

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_TARGET_H_
