// What a kernel's emulated counters predict of its time on an H100.
//
// Note [H100 time estimate]
// A deliberately simple model of one launch on an H100 SXM (132
// multiprocessors at 1.755 GHz), from Note [emulated memory counters] and
// Note [emulated instruction counters]; each term spreads over the
// multiprocessors the grid fills (all 132, or one a block when fewer):
//   memory  the bytes of the sectors it moves: its compulsory bytes (its
//           arguments read and written once, or the sectors when fewer, as a
//           gather's) from DRAM at kDramBytesPerUs, the rest (re-reads) from
//           L2 at kL2BytesPerUs;
//   shared  its shared-memory wavefronts, one a clock a multiprocessor;
//   issue   its warp instructions, four a clock a multiprocessor (one a
//           scheduler), kSassPerLlvm machine instructions each;
//   launch  kLaunchUs, the gap an eager launch costs between kernels;
// time = max(memory, shared, issue) + launch. The bandwidths are what
// copies reach (about 90% of the 3.35 TB/s peak; L2 about twice that); a
// kernel with too few warps in flight to cover DRAM latency, or a chain of
// dependent mma and shuffles, takes longer than this says. Calibrated
// against the H100 measurements in docs/PERFORMANCE.md. The model that sees
// latency (a kernel's PTX walked and simulated on a multiprocessor) is
// compiler/perf's, Note [kernel model]; --profile prints both.
#ifndef GPTC_RUNTIME_EMU_KERNEL_ESTIMATE_H_
#define GPTC_RUNTIME_EMU_KERNEL_ESTIMATE_H_

#include <cstdint>
#include <string_view>

#include "runtime/emu/emu_device.h"

namespace gptc::rt::emu {

inline constexpr double kH100Multiprocessors = 132;
inline constexpr double kH100ClockPerUs = 1755;  // cycles a microsecond
inline constexpr double kDramBytesPerUs = 3.0e6;
inline constexpr double kL2BytesPerUs = 6.0e6;
inline constexpr double kSassPerLlvm = 1.0;
inline constexpr double kLaunchUs = 2.0;
// The fusion report's memory roofline (compiler/analysis/fusion_report.h: 3.35 TB/s).
inline constexpr double kRooflineBytesPerUs = 3.35e6;

// Per launch, microseconds.
struct KernelEstimate {
  // The compulsory bytes at kRooflineBytesPerUs: its arguments, or the
  // sectors it moved when fewer (a gather; the last kernel of a split
  // reduction, which reads the partials, not its instruction's operands).
  double roofline_us = 0;
  double memory_us = 0, shared_us = 0, issue_us = 0;
  double us = 0;
  std::string_view bound;  // "memory", "shared" or "issue"
};

KernelEstimate EstimateH100(const KernelCounters& k);

// "gmem", "smem", "mma", "float", "int", "control", "barrier", "shuffle":
// emu_abi.h's InstructionClass in tables and JSON.
std::string_view InstructionClassName(uint32_t instruction_class);

}  // namespace gptc::rt::emu

#endif  // GPTC_RUNTIME_EMU_KERNEL_ESTIMATE_H_
