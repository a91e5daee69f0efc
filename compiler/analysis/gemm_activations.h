// The activations a gemm epilogue applies that are one elementwise op of
// the gemm's result and constants.
//
// Note [gemm activations]
// An activation in a gemm's epilogue is found twice: by the fusion pass's
// gemm rule on the unfused entry (passes/gemm_fusion.cc), which decides
// what joins the gemm, and by DescribeGemmEpilogue (gemm_epilogue.h) on the
// fused computation, which writes that decision as the record. Both ask this
// table, so they cannot disagree. The tanh GELU and its backward are regions
// of a dozen ops with their own matchers (Note [GELU epilogues] in
// gelu_epilogue.h); every other activation is one row here. Adding one
// takes its enumerator (GPTC_GEMM_ACTIVATIONS in compiler/ir/gemm_epilogue.h),
// its cuBLASLt epilogues (Note [gemm epilogue table] in
// compiler/program/plan.h) and its row below; the fusion rule, the records,
// the verifier, the cuBLASLt plan and the fallback kernel (the fused
// computation after the dot) follow from those.
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
