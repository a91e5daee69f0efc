// The attention ops' decompositions: the VJP rule (internal to autodiff),
// which builds the flash-attention backward ops, and the bf16-rounded forward
// that mixed precision gives an attention (Note [bf16 attention]).
//
// Note [flash attention ops]: the backward of o = attention(q, k, v) (each
// [B,H,T,D]; k, v may have S keys) is three ops over the forward's row
// statistics, so no [B,H,T,S] tensor is stored between kernels:
//   lse   = attention-lse(q, k)          f32[B,H,T]: log sum_j exp(s_tj)
//   delta = reduce-sum(do * o, dim 3)    f32[B,H,T]: a plain row reduction
//   dX    = attention-grad(q, k, v, do, lse, delta), wrt=X   (X in q, k, v)
// with s = scale * q k^T (causal: -inf where key > query), p = exp(s - lse),
//   dv = p^T do,   dp = do v^T,   ds = scale * p * (dp - delta),
//   dq = ds k,     dk = ds^T q.
// (delta equals rowsum(dp * p), the softmax backward's row term.)
// Each op is a composite whose decomposition (built here) defines it for the
// evaluator; codegen runs attention-lse inside the forward attention kernel
// and attention-grad as FlashAttention-2's tiles (attention_backward_emitter).
// attention-grad's q, k, v, do are the matmul operands, in grad_dtype under
// bf16 (Note [bf16 attention backward]); p and ds are rounded to that dtype
// before their matmuls, as a tensor-core kernel feeds them; s and dp are f32.
// lse is computed from the forward's own operands, rounded as the forward
// rounds them (Note [bf16 attention]), so the forward kernel writes it beside
// o and the backward, recomputing s from the same bf16 values, gets the
// forward's s.
//
// Note [bf16 attention]: an attention with grad_dtype=bf16 (set by mixed
// precision) runs ALL its matmuls on bf16 operands with f32 results, as a
// tensor-core FlashAttention does: its decomposition (RoundedAttention-
// Decomposition) rounds q, k, v and the probabilities to bf16 and keeps the
// scores, the softmax and o in f32; the op's shapes stay f32, so no other
// pass sees a difference. attention-lse carries the same grad_dtype and
// rounds q, k likewise. Codegen runs such ops on mma.sync tiles
// (compiler/codegen/attention_mma.h); without grad_dtype they stay exact f32
// and run on CUDA cores.
#ifndef GPTC_PASSES_AUTODIFF_ATTENTION_H_
#define GPTC_PASSES_AUTODIFF_ATTENTION_H_

#include "passes/autodiff_rules.h"

namespace gptc::passes::autodiff {

// The VJP of `attention` (Note [flash attention ops]).
StatusOr<std::vector<Instruction*>> AttentionRule(RuleContext& c, const Instruction& y,
                                                  Instruction* dy, const std::vector<bool>& w);

// The decomposition of `attention` (an attention op of `caller`) with its
// matmul operands rounded to `operands` (Note [bf16 attention]); shared by
// every attention of the same shapes and attributes.
StatusOr<ir::Computation*> RoundedAttentionDecomposition(ir::Computation* caller,
                                                         const Instruction& attention,
                                                         ir::DType operands);

}  // namespace gptc::passes::autodiff

#endif  // GPTC_PASSES_AUTODIFF_ATTENTION_H_
