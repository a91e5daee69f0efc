// What one kernel of a fused module costs by the fusion report's model: its
// FLOPs and the bytes it must move. The fusion report (compiler/analysis/fusion_report.h)
// turns them into roofline times for a GPU; the thunk plan records them per
// thunk (program::ThunkCost), so that a reader without the IR (gptrun's
// report, the profile) can do the same.
//
// Bytes read are the kernel's distinct operands (a fusion parameter read only
// through slices costs the slices), bytes written its results; FLOPs count
// 2*M*N*K per dot (batch included), one per output element per elementwise
// op, one per input element per reduction, and the attention /
// cross-entropy composites by formula (Note [attention FLOPs] in
// kernel_cost.cc).
#ifndef GPTC_COMPILER_ANALYSIS_KERNEL_COST_H_
#define GPTC_COMPILER_ANALYSIS_KERNEL_COST_H_

#include <cstdint>
#include <string>

#include "compiler/ir/instruction.h"

namespace gptc::analysis {

struct KernelCost {
  std::string kind;  // fusion kind, or the opcode of an unfused kernel
  int64_t ops = 0;   // instructions inside (1 for an unfused kernel)
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  double flops = 0;
  std::string source;  // the most common metadata inside the kernel
};

// The cost of entry instruction `kernel` (one for which IsKernel holds).
KernelCost AnalyzeKernelCost(const ir::Instruction& kernel);

}  // namespace gptc::analysis

#endif  // GPTC_COMPILER_ANALYSIS_KERNEL_COST_H_
