// Attention fusion (fusion's rule 3, passes/fusion.h): each attention op
// with the slice/reshape/transpose chains of its operands and the
// transpose/reshape of its result (the attention kernel reads q, k, v out of
// the packed qkv and writes [B,T,C]), the q/k/v bias add and layout chains
// (remat clones included) when nothing else reads them, the convert of its
// output, and the attention-lse of the same q, k. The backward's
// attention-grad ops make two flash kernels, dk + dv and dq (Note [attention
// backward] in attention_fusion.cc), one fusion writing the packed [B, T, 3C]
// gradient (Note [packed attention gradient]). Run after the operand
// rewrites of passes/attention_operands.h.
#ifndef GPTC_PASSES_ATTENTION_FUSION_H_
#define GPTC_PASSES_ATTENTION_FUSION_H_

#include "compiler/pass/pass.h"
#include "passes/fusion.h"

namespace gptc::passes {

namespace fusion_internal {
class Planner;
void FuseAttention(Planner& p);
void FuseAttentionGrads(Planner& p);  // Note [attention backward]
}  // namespace fusion_internal

// The rules alone, as a pass: gptc-opt --pass=attention-fusion.
class AttentionFusion : public FusionRulePass {
 public:
  AttentionFusion()
      : FusionRulePass("attention-fusion",
                       {&fusion_internal::FuseAttention, &fusion_internal::FuseAttentionGrads}) {}
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_ATTENTION_FUSION_H_
