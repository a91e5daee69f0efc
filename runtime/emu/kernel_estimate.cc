#include "runtime/emu/kernel_estimate.h"

#include <algorithm>
#include <iterator>

namespace gptc::rt::emu {

KernelEstimate EstimateH100(const KernelCounters& k) {
  KernelEstimate e;
  if (k.launches <= 0) return e;
  const double n = static_cast<double>(k.launches);
  const LaunchCounters& c = k.counts;
  const double moved = static_cast<double>(c.SectorBytes()) / n;
  const double compulsory = std::min(moved, static_cast<double>(k.argument_bytes) / n);
  const double blocks = static_cast<double>(k.blocks) / n;
  // The share of the machine the grid fills.
  const double fill = std::clamp(blocks / kH100Multiprocessors, 1.0 / kH100Multiprocessors, 1.0);
  e.roofline_us = compulsory / kRooflineBytesPerUs;
  e.memory_us = (compulsory / kDramBytesPerUs + (moved - compulsory) / kL2BytesPerUs) / fill;
  const double per_clock = kH100Multiprocessors * fill * kH100ClockPerUs;
  e.shared_us =
      static_cast<double>(c.shared_load_wavefronts + c.shared_store_wavefronts) / n / per_clock;
  e.issue_us = static_cast<double>(c.Instructions()) / n * kSassPerLlvm / (4 * per_clock);
  e.us = std::max({e.memory_us, e.shared_us, e.issue_us});
  e.bound = e.us == e.memory_us ? "memory" : e.us == e.shared_us ? "shared" : "issue";
  e.us += kLaunchUs;
  return e;
}

std::string_view InstructionClassName(uint32_t instruction_class) {
  static constexpr std::string_view kNames[] = {"gmem", "smem",    "mma",     "float",
                                                "int",  "control", "barrier", "shuffle"};
  static_assert(std::size(kNames) == program::emu::kNumInstructionClasses);
  return instruction_class < std::size(kNames) ? kNames[instruction_class] : "?";
}

}  // namespace gptc::rt::emu
