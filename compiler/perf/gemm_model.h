// What a cuBLASLt gemm takes on an H100 (Note [gemm table]).
//
// Note [gemm table]
// cuBLASLt's kernels are not ours to walk, so a gemm's time comes from a
// table fitted to what the H100 measured of gptc's gemms
// (docs/PERFORMANCE.md): time = (flops + min(F0, flops)) / (989 TFLOP/s x
// E) + the epilogue's aux matrix (read or written) at DRAM speed, or the
// gemm's bytes at DRAM speed when longer, + the launch gap.
// E is the rate a large gemm reaches (the lm head's 16384 x 50304 x 768
// gemm: 74.4% of peak) and F0 the work a gemm loses to its ramp, tail and
// epilogue (18 GFLOP; a smaller gemm loses its own work's worth at
// most): the two numbers that put that gemm and gpt2-124m
// b16's gemms in all where the H100 measured them. A GPU run's profile
// re-fits them (scripts/fit-gemm-table).
#ifndef GPTC_COMPILER_PERF_GEMM_MODEL_H_
#define GPTC_COMPILER_PERF_GEMM_MODEL_H_

#include <cstdint>

#include "compiler/perf/h100.h"

namespace gptc::perf {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t aux_bytes = 0;  // the epilogue's aux matrix, read or written
  int64_t bytes = 0;      // every operand and result, once (a, b, c, d, bias, aux)
  double flops() const { return 2.0 * static_cast<double>(m) * n * k * batch; }
};

struct GemmTable {
  double peak_flops = 989e12;
  double efficiency = 0.744;
  double wasted_flops = 18e9;
};
const GemmTable& FittedGemmTable();

// Microseconds, the launch gap included.
double GemmMicroseconds(const GemmShape& gemm, const MachineModel& machine,
                        const GemmTable& table = FittedGemmTable());

}  // namespace gptc::perf

#endif  // GPTC_COMPILER_PERF_GEMM_MODEL_H_
