// Cross-entropy fusion (fusion's rule 2, passes/fusion.h): each
// softmax-cross-entropy op together with the backward ops computing dlogits
// from the same logits (the gradient ops of its layer that are row-local:
// elementwise ops, broadcasts, row reductions) is one multi-output fusion
// (loss rows, dlogits): the probabilities are never stored. The widening
// convert of bf16 logits (and of remat's copy of them) and the converts of
// dlogits join it.
#ifndef GPTC_PASSES_CROSS_ENTROPY_FUSION_H_
#define GPTC_PASSES_CROSS_ENTROPY_FUSION_H_

#include "compiler/pass/pass.h"
#include "passes/fusion.h"

namespace gptc::passes {

namespace fusion_internal {
class Planner;
void FuseCrossEntropy(Planner& p);
}  // namespace fusion_internal

// The rule alone, as a pass: gptc-opt --pass=cross-entropy-fusion.
class CrossEntropyFusion : public FusionRulePass {
 public:
  CrossEntropyFusion()
      : FusionRulePass("cross-entropy-fusion", {&fusion_internal::FuseCrossEntropy}) {}
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_CROSS_ENTROPY_FUSION_H_
