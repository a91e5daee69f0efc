// The activations a gemm epilogue applies that are one elementwise op of
// the gemm's result and constants.
//
// Note [gemm activations]
// The fusion pass's gemm rule (passes/gemm_fusion.cc) asks this table
// whether the one user of a gemm's result is an activation, takes it into
// the gemm and writes it into the gemm's epilogue record (Note [gemm
// epilogue records] in gemm_epilogue.h); nothing asks again later. The tanh
// GELU and its backward are regions of a dozen ops with their own matchers
// (passes/gemm_fusion_epilogues.cc); every other activation is one row here.
// Adding one is Note [adding a gemm epilogue]: its enumerator
// (GPTC_GEMM_ACTIVATIONS in compiler/ir/gemm_epilogue.h) and row below are
// the rule, its cuBLASLt epilogues (Note [gemm epilogue table] in
// compiler/program/plan.h) the table entry; the records, the verifier, the
// cuBLASLt plan and the fallback kernel (the fused computation after the
// dot) follow from those.
#ifndef GPTC_COMPILER_ANALYSIS_GEMM_ACTIVATIONS_H_
#define GPTC_COMPILER_ANALYSIS_GEMM_ACTIVATIONS_H_

#include <optional>

#include "compiler/ir/instruction.h"

namespace gptc::analysis {

// The activation `op` applies to `x` when `op` is one elementwise op of `x`
// and splat constants that a row of the table computes; nullopt otherwise.
std::optional<ir::GemmActivation> MatchOneOpActivation(const ir::Instruction& op,
                                                       const ir::Instruction* x);

}  // namespace gptc::analysis

#endif  // GPTC_COMPILER_ANALYSIS_GEMM_ACTIVATIONS_H_
