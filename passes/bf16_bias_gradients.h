// Bias gradients summed from the bf16 copy of the output gradient.
//
// Note [bf16 bias gradients]
// Under mixed precision (mixed_precision.h) a linear layer's backward takes
// the bf16 copy of its output gradient dY as the weight-gradient dot's
// operand, while autodiff's bias gradient sums the f32 dY. The weight-
// gradient gemm then reads dY twice: in bf16 for the dot and in f32 for the
// column sum its BGRAD epilogue computes (fusion puts both in one gemm) —
// and the epilogue can only sum the bf16 operand it loads anyway, so the IR
// and the GPU disagreed by a bf16 rounding. This pass makes the IR sum the
// bf16 copy, widened, with f32 accumulation — what cuBLASLt's epilogue and
// PyTorch's autocast (whose bias gradient sums the bf16 grad_output)
// compute:
//   %db = f32[N] reduce(%dy), dimensions={0,1}, kind=sum
//   %dy.bf16 = bf16[B,T,N] convert(%dy)
//   %dw = bf16[K,N] dot(%x.bf16, %dy.bf16), lhs_contracting={0,1}, rhs_contracting={0,1}
// =>
//   %dy.bf16 = bf16[B,T,N] convert(%dy)
//   %dy.bf16.f32 = f32[B,T,N] convert(%dy.bf16)
//   %db = f32[N] reduce(%dy.bf16.f32), dimensions={0,1}, kind=sum
//   %dw = ...
// so the gemm fusion's operands are bf16 only: reading the f32 dY as well
// made a small weight-gradient gemm memory-bound (docs/PERFORMANCE.md has
// the figures). A reduce is rewritten when it is a rank-1 sum of an f32
// value over exactly the dims a dot contracts of that value's bf16 convert.
// Runs after autodiff, under the bf16 policy (passes/train_step.cc).
#ifndef GPTC_PASSES_BF16_BIAS_GRADIENTS_H_
#define GPTC_PASSES_BF16_BIAS_GRADIENTS_H_

#include "compiler/pass/pass.h"

namespace gptc::passes {

class Bf16BiasGradients : public pass::Pass {
 public:
  std::string_view Name() const override { return "bf16-bias-gradients"; }
  StatusOr<bool> Run(ir::Module& module) override;
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_BF16_BIAS_GRADIENTS_H_
