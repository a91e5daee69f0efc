// The attention operand rewrites: before the attention fusion rule plans
// its kernels, the operands of a bf16 attention become the rounded copies
// its backward keeps, and each kernel of the backward gets its own copy of
// the layout chains it shares (the two Notes below). The fusion pass runs
// them first (passes/fusion.h); gptc-opt --pass=attention-operands runs them
// alone.
#ifndef GPTC_PASSES_ATTENTION_OPERANDS_H_
#define GPTC_PASSES_ATTENTION_OPERANDS_H_

#include <span>
#include <vector>

#include "compiler/pass/pass.h"

namespace gptc::passes {

class AttentionOperands : public pass::Pass {
 public:
  std::string_view Name() const override { return "attention-operands"; }
  StatusOr<bool> Run(ir::Module& module) override;
};

// Note [rounded attention operands]: a bf16 attention (grad_dtype) rounds
// q, k and v to bf16 before its matmuls, and the backward keeps exactly those
// rounded copies ([B, H, T, D], written for the flash backward kernels) where
// they are not slices of a bf16 projection already (Note [bf16 attention
// projection] in mixed_precision.h, which leaves nothing to copy). The
// forward op then reads them too, widened (the same values: rounding a bf16
// to bf16 changes nothing), instead of computing q, k, v out of the f32
// projection. A loop kernel writes the copies, and the forward kernel fills
// its k and v tiles 16 bytes a load (Note [vector tile fill] in
// compiler/codegen/attention_mma.cc): on an H100 the forward spent most of
// its issue slots on the index arithmetic of the element-by-element fill
// through the slice, reshape, transpose and bias add, and read the f32 k and
// v tiles through L2 about 8 times each. Rewrites `entry` before planning
// (the copies move up before the forward); returns whether it changed it.
// `attention_ops`: the entry's attention, attention-lse and attention-grad
// ops, in order (AttentionOps).
bool ReadRoundedAttentionOperands(ir::Computation& entry,
                                  std::span<ir::Instruction* const> attention_ops);

// Note [per-kernel operand chains]: gives each kernel of the attention
// backward (dq; dk with dv) its own copy of each layout/convert chain over an
// operand no wider than its own element (do out of the dx gemm, delta's
// transpose, q, k, v sliced out of the bf16 projection: Note [bf16 attention
// projection] in mixed_precision.h) that something else reads too, so that
// each kernel reads the source itself instead of a kernel writing the
// shared copy; the forward keeps the original.
// Rewrites `entry` before planning; returns whether it cloned anything.
bool SplitAttentionOperandChains(ir::Computation& entry,
                                 std::span<ir::Instruction* const> attention_ops);

// The attention, attention-lse and attention-grad ops of `entry`, in order:
// one pass over the entry for both rewrites above.
std::vector<ir::Instruction*> AttentionOps(const ir::Computation& entry);

}  // namespace gptc::passes

#endif  // GPTC_PASSES_ATTENTION_OPERANDS_H_
