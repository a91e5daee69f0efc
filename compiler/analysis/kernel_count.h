// Which entry instructions launch kernels, and how many by kind and by
// transformer layer: read by the fusion report, the compile summary and the
// thunk plan (compiler/artifact/plan.cc).
#ifndef GPTC_COMPILER_ANALYSIS_KERNEL_COUNT_H_
#define GPTC_COMPILER_ANALYSIS_KERNEL_COUNT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "compiler/ir/module.h"

namespace gptc::analysis {

// Whether an entry instruction launches a kernel: fusions and unfused compute
// ops (gather, scatter-add, all-reduce, a stray dot); not parameters,
// constants, tuples and get-tuple-elements.
bool IsKernel(const ir::Instruction& inst);

// The first position at which `value` is read by work that launches: the
// least `launch_position(reader)` over its readers, looking through the
// readers for which it is nullopt (tuples, get-tuple-elements, reshapes:
// they launch nothing) to theirs; `end` when no launching reader is found
// (only the computation's caller reads it). The positions are the caller's:
// instruction order (the all-reduce combiner) or thunk indexes (the plan).
int64_t FirstLaunchingReader(
    const ir::Instruction& value,
    const std::function<std::optional<int64_t>(const ir::Instruction&)>& launch_position,
    int64_t end);

// Kernels of the entry computation by kind: fusion kinds by FusionKindName
// ("loop", "gemm", ...), unfused kernels by opcode name ("scatter-add").
std::map<std::string, int64_t> CountKernels(const ir::Module& module);

// Kernels per transformer layer: a kernel whose role has layer N (forward,
// backward or recompute; not the optimizer's, which are per parameter)
// counts for layer N. Layers with no kernel are absent.
std::map<int64_t, int64_t> KernelsPerLayer(const ir::Module& module);

}  // namespace gptc::analysis

#endif  // GPTC_COMPILER_ANALYSIS_KERNEL_COUNT_H_
