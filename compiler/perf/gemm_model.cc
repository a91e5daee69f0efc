#include "compiler/perf/gemm_model.h"

#include <algorithm>

namespace gptc::perf {

const GemmTable& FittedGemmTable() {
  static const GemmTable kTable;
  return kTable;
}

double GemmMicroseconds(const GemmShape& g, const MachineModel& m, const GemmTable& table) {
  const double wasted = std::min(table.wasted_flops, g.flops());
  const double dram = m.dram_bytes_per_clock * m.clock_mhz * 1e6;  // bytes a second
  const double compute = (g.flops() + wasted) / (table.peak_flops * table.efficiency) +
                         static_cast<double>(g.aux_bytes) / dram;
  return std::max(compute, static_cast<double>(g.bytes) / dram) * 1e6 + m.launch_us;
}

}  // namespace gptc::perf
