// Dots -> cuBLASLt matmul descriptors (see docs/ARTIFACT.md, "GEMMs").
//
// A kind=gemm fusion (passes/fusion.h rule 4) or a stray unfused dot becomes
// one cublasLtMatmul call. The fusion's epilogue record (Note [gemm epilogue
// records] in compiler/analysis/gemm_epilogue.h) says what follows the dot;
// here it becomes cuBLASLt's epilogue and buffers. Everything the runtime needs to build the
// descriptors is here, in program::GemmConfig (compiler/program/plan.h:
// cuBLASLt's enums without a CUDA header); the algorithm is chosen at run
// time (heuristic, then autotuned).
//
// Note [row-major on cuBLASLt]
// IR arrays are row-major; cuBLASLt is column-major. A row-major X[r, c] is
// the same memory as a column-major X^T[c, r] with ld = c, so the row-major
//   D[M, N] = A[M, K] . B[K, N]
// is computed as the column-major
//   D^T[N, M] = B^T[N, K] . A^T[K, M]
// i.e. cuBLASLt's A is the dot's rhs, its B the dot's lhs, m = N, n = M. An
// operand stored the other way round ([K, M] for the lhs, [N, K] for the rhs,
// from the dot's dimension numbers or a fused last-two-dims transpose) flips
// that operand's transa/transb. A fused 2-D transpose of the result swaps the
// roles of lhs and rhs (D^T = B^T A^T). Bias vectors run along the row-major
// last dim N, which is cuBLASLt's m: the BIAS epilogues' layout. The bias
// gradient of the rhs (reduced over K) is BGRADA, of the lhs BGRADB. The
// GELU's aux (the pre-activation, written by GELU_AUX, read by DGELU) has
// D's shape, so its column-major ld is D's, m (Note [GELU epilogues] in
// compiler/analysis/gelu_epilogue.h).
//
// Layouts that need a copy (batch dims not leading, contracting or free dims
// not contiguous, a transpose that does not swap whole blocks) are refused
// with a reason; the plan then records an "unsupported" thunk.
#ifndef GPTC_COMPILER_ARTIFACT_GEMM_PLAN_H_
#define GPTC_COMPILER_ARTIFACT_GEMM_PLAN_H_

#include <cstdint>

#include "compiler/ir/instruction.h"
#include "compiler/program/plan.h"
#include "compiler/support/status.h"

namespace gptc::artifact {

// cuBLASLt's default workspace for every call (llm.c uses the same).
inline constexpr int64_t kGemmWorkspaceBytes = 32 << 20;

// A cuBLASLt matmul (program::GemmConfig, the plan's descriptor) and where
// its buffers come from.
struct GemmPlan : program::GemmConfig {
  GemmPlan() { workspace_bytes = kGemmWorkspaceBytes; }

  // Operand numbers of the fusion (or dot), and result leaves of the fusion.
  // -1: absent. C is D's buffer without residual.
  int64_t a_operand = -1;
  int64_t b_operand = -1;
  int64_t c_operand = -1;
  int64_t bias_operand = -1;
  int64_t d_output = 0;
  int64_t aux_output = -1;        // GELU_AUX: the pre-activation, laid out as D
  int64_t aux_operand = -1;       // DGELU: the pre-activation it reads, laid out as D
  int64_t bias_grad_output = -1;  // BGRADA / BGRADB
  bool operator==(const GemmPlan&) const = default;
};

// The descriptor of a kind=gemm fusion or an unfused dot. Errors say why the
// layout or the recorded epilogue has no cuBLASLt equivalent, naming the
// instruction.
StatusOr<GemmPlan> PlanGemm(const ir::Instruction& inst);

}  // namespace gptc::artifact

#endif  // GPTC_COMPILER_ARTIFACT_GEMM_PLAN_H_
