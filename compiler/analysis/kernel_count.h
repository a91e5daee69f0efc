// Which entry instructions launch kernels, and how many by kind and by
// transformer layer: read by the fusion report, the compile summary and the
// thunk plan (compiler/artifact/plan.cc).
#ifndef GPTC_COMPILER_ANALYSIS_KERNEL_COUNT_H_
#define GPTC_COMPILER_ANALYSIS_KERNEL_COUNT_H_

#include <cstdint>
#include <map>
#include <string>

#include "compiler/ir/module.h"

namespace gptc::analysis {

// Whether an entry instruction launches a kernel: fusions and unfused compute
// ops (gather, scatter-add, all-reduce, a stray dot); not parameters,
// constants, tuples and get-tuple-elements.
bool IsKernel(const ir::Instruction& inst);

// Kernels of the entry computation by kind: fusion kinds by FusionKindName
// ("loop", "gemm", ...), unfused kernels by opcode name ("scatter-add").
std::map<std::string, int64_t> CountKernels(const ir::Module& module);

// Kernels per transformer layer: a kernel whose role has layer N (forward,
// backward or recompute; not the optimizer's, which are per parameter)
// counts for layer N. Layers with no kernel are absent.
std::map<int64_t, int64_t> KernelsPerLayer(const ir::Module& module);

}  // namespace gptc::analysis

#endif  // GPTC_COMPILER_ANALYSIS_KERNEL_COUNT_H_
