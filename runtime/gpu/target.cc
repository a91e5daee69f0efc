#include "runtime/gpu/target.h"

#include <charconv>

namespace gptc::rt::gpu {

std::string ComputeCapability::ToString() const { return fmt::format("{}.{}", major, minor); }

StatusOr<Target> ParseTarget(std::string_view target) {
  std::string_view s = target;
  Target t;
  if (!s.starts_with("sm_")) return Error("target '{}' is not sm_XY or sm_XYa", target);
  s.remove_prefix(3);
  if (s.ends_with("a")) {
    t.arch_specific = true;
    s.remove_suffix(1);
  }
  int number = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), number);
  if (ec != std::errc() || end != s.data() + s.size() || s.size() < 2 || number < 10) {
    return Error("target '{}' is not sm_XY or sm_XYa", target);
  }
  t.capability = {number / 10, number % 10};
  return t;
}

Status CheckTargetRuns(std::string_view target, ComputeCapability device,
                       std::string_view device_name, std::string_view artifact) {
  StatusOr<Target> t = ParseTarget(target);
  if (!t.ok()) return t.status().WithPrefix(artifact);
  const ComputeCapability need = t->capability;
  const std::string fix =
      fmt::format("recompile with gptc compile --target sm_{}{}", device.major, device.minor);
  if (t->arch_specific && device != need) {
    return Error("{}: compiled for {}, which runs only on compute capability {}; {} is {}: {}",
                 artifact, target, need.ToString(), device_name, device.ToString(), fix);
  }
  if (device.major < need.major || (device.major == need.major && device.minor < need.minor)) {
    return Error("{}: compiled for {} (compute capability {}), {} is only {}: {}", artifact, target,
                 need.ToString(), device_name, device.ToString(), fix);
  }
  return Status::Ok();
}

bool CubinLoads(std::string_view target, ComputeCapability device) {
  StatusOr<Target> t = ParseTarget(target);
  return t.ok() && t->capability == device;
}

}  // namespace gptc::rt::gpu
