// Internal to the autodiff pass: the attention VJP rule, which builds the
// flash-attention backward ops and their decompositions.
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
// lse is computed from the forward's own operands (f32 q, k), so the forward
// kernel writes it beside o; the backward recomputes s from the bf16 copies,
// which differs from the forward's s by bf16 rounding (rows of p then sum to
// 1 within that rounding, as in a bf16 FlashAttention).
#ifndef GPTC_PASSES_AUTODIFF_ATTENTION_H_
#define GPTC_PASSES_AUTODIFF_ATTENTION_H_

#include "passes/autodiff_rules.h"

namespace gptc::passes::autodiff {

// The VJP of `attention` (Note [flash attention ops]).
StatusOr<std::vector<Instruction*>> AttentionRule(RuleContext& c, const Instruction& y,
                                                  Instruction* dy, const std::vector<bool>& w);

}  // namespace gptc::passes::autodiff

#endif  // GPTC_PASSES_AUTODIFF_ATTENTION_H_
