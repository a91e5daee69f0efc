// Gemm epilogues: cuBLASLt's limits on an epilogue's buffers, one table that
// the fusion rule and the gemm plan both read, and the roundings of a gemm
// fusion's IR that cuBLASLt skips.
//
// Note [gemm epilogue records]
// The fusion pass's gemm rule (passes/gemm_fusion.h) decides what joins a
// dot: the operands' layout ops, converts, a bias, an activation (the GELU
// or its backward: Note [GELU epilogues] in gelu_epilogue.h; the one-op
// ones: Note [gemm activations] in gemm_activations.h), a residual, a
// transpose of the result, the bias gradient. It writes each decision into
// the group's record as it takes the op (passes/fusion_planner.h,
// GemmEpilogueValues), and the materializer numbers the record in the
// fusion's operands and outputs and stores it on the fusion
// (`epilogue={...}` in the text; the verifier checks that it fits the
// fusion). Nothing matches the fused computation again: the cuBLASLt plan
// maps the record to an epilogue and its buffers (compiler/artifact/
// gemm_plan.h), and the fallback kernels take the bias-gradient output and
// the epilogue from it (Note [epilogue fallback] in compiler/program/plan.h).
//
// Note [adding a gemm epilogue]
// An epilogue cuBLASLt offers joins gptc as one rule and one table entry:
//  - the rule that takes its ops into the gemm and writes the record: for a
//    one-op activation a row of gemm_activations.cc and its enumerator in
//    GPTC_GEMM_ACTIVATIONS (compiler/ir/gemm_epilogue.h); a larger region
//    a matcher in passes/gemm_fusion_epilogues.cc called from FuseGemms;
//  - its row of GPTC_GEMM_EPILOGUES (Note [gemm epilogue table] in
//    compiler/program/plan.h): name, value, activation, bias and aux use.
// The limits below, the verifier, the plan, the runtime's enum check and
// the fallback kernel (the fused computation after the dot) follow. A new
// limit cuBLASLt documents is one row of kGemmEpilogueLimits.
#ifndef GPTC_COMPILER_ANALYSIS_GEMM_EPILOGUE_H_
#define GPTC_COMPILER_ANALYSIS_GEMM_EPILOGUE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir/instruction.h"

namespace gptc::analysis {

// What cuBLASLt's epilogue limits look at: D and the buffers beside it. A
// buffer left out (nullopt, null, false) is not checked.
struct GemmEpilogueBuffers {
  ir::Shape d;                           // the result D
  int64_t d_ld = 0;                      // D's column-major leading dim: the row-major last dim
  int64_t batch = 1;                     // matrices in the call
  std::optional<ir::DType> bias;         // the bias vector read (BIAS epilogues)
  std::optional<ir::DType> residual;     // C, added whole (beta = 1)
  const ir::Instruction* aux = nullptr;  // the aux matrix written (GELU_AUX) or read (DGELU)
  bool bias_grad = false;                // a bias gradient written (BGRADA, BGRADB)
};

// Note [cuBLASLt epilogue limits]
// What cuBLASLt asks of an epilogue's buffers beyond which ones it uses (the
// epilogue table, Note [gemm epilogue table]): one row per limit, naming the
// cublasLt.h attribute it comes from. The fusion rule asks before it takes
// an op (so that what it records can be planned) and the gemm plan asks
// again of the record (a record parsed from text may break them); neither
// spells a limit itself.
struct GemmEpilogueLimit {
  std::string_view source;  // "CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE"
  // The breach as a sentence about `b` ("a f32 bias with a bf16 result
  // (...)"), or nullopt when `b` keeps the limit.
  std::optional<std::string> (*check)(const GemmEpilogueBuffers& b);
};
std::span<const GemmEpilogueLimit> GemmEpilogueLimits();

// The first limit `b` breaks, as its sentence, or nullopt.
std::optional<std::string> BrokenGemmEpilogueLimit(const GemmEpilogueBuffers& b);

// The roundings in `fusion`'s IR that cuBLASLt, computing in f32, does not
// repeat (a narrow value widened again; the bias gradient rounded after the
// sum), and the bias gradient summed from a narrower copy of its operand: one
// sentence each, for the plan's notes. Which output is the bias gradient or
// the aux, and which operand cuBLASLt sums, come from the record; the
// fused computation gives the converts' names and types.
std::vector<std::string> SkippedRoundings(const ir::Instruction& fusion,
                                          const ir::GemmEpilogue& epilogue);

}  // namespace gptc::analysis

#endif  // GPTC_COMPILER_ANALYSIS_GEMM_EPILOGUE_H_
