// The kernels a gemm's plan carries for a GPU whose cuBLASLt refuses the
// epilogue (Note [epilogue fallback] in compiler/program/plan.h), built
// from the gemm fusion's epilogue record (Note [gemm epilogue records]).
// For a bias gradient (BGRADA, BGRADB: a column sum of a gemm operand) the
// kernel is the gemm fusion's reduce alone, as a reduction fusion of its own
// compiled by the column-reduction emitter (with its host code for the
// emulator). For the other epilogues (BIAS, GELU, GELU_AUX and their
// combinations, and DGELU, which reads the GELU's aux as one more operand)
// it is the rest of the gemm fusion after the dot, as a loop fusion reading
// the dot's result from scratch (Note [split column reductions] has
// the scratch): the runtime then runs the plain gemm into scratch, in f32, and
// that kernel after it, computing exactly what the IR says (a bf16 dot
// result is rounded by the kernel). A bias gradient summed in f32 and then
// rounded to bf16 and back (the gradient of a bf16 bias copy) is summed
// without the round trip, as cuBLASLt sums it.
#ifndef GPTC_COMPILER_CODEGEN_GEMM_FALLBACK_H_
#define GPTC_COMPILER_CODEGEN_GEMM_FALLBACK_H_

#include <memory>
#include <optional>

#include "compiler/ir/module.h"
#include "compiler/support/status.h"

namespace gptc::codegen {

struct GemmFallbackFusion {
  std::unique_ptr<ir::Module> module;       // holds `fusion` and its computation
  const ir::Instruction* fusion = nullptr;  // kind=reduction, one operand, one result
  int64_t gemm_operand = -1;  // the gemm fusion's operand the kernel's operand 0 stands for
  int64_t gemm_output = -1;   // the gemm fusion's result the kernel's result 0 stands for
};

// The bias-gradient fallback of gemm fusion `gemm`, or nullopt when its
// epilogue record (Note [gemm epilogue records]) has no bias-gradient output.
StatusOr<std::optional<GemmFallbackFusion>> BiasGradientFallback(const ir::Instruction& gemm);

// The epilogue fallback of gemm fusion `gemm` (bias, GELU, aux, residual,
// GELU backward after the dot), or nullopt when its epilogue record has none
// of them (the dot's result reaches D through converts and a transpose
// alone): the gemm fusion's
// computation with the dot replaced by one more parameter (f32, converted to
// the dot's dtype), as a loop fusion whose operands are the gemm's and then
// the dot's f32 result (`gemm_operand` = the gemm's operand count: the plain
// gemm writes that result to scratch).
StatusOr<std::optional<GemmFallbackFusion>> EpilogueFallback(const ir::Instruction& gemm);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_GEMM_FALLBACK_H_
