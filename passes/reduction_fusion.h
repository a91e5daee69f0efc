// Reduction fusion (fusion's rule 5, passes/fusion.h): each remaining
// reduce is a fusion root. Row reductions (over the last dim) grow over the
// row-local region around them: elementwise ops of the input shape or the
// row shape, and further row reductions of the same input shape (layer norm
// forward and backward are one kernel each); a forward row reduction takes
// no remat clone (remat made it for the backward, whose kernel computes it
// instead of storing it). Column and full reductions absorb their
// elementwise producers; sibling reductions of the same shape and dims that
// share an input share one multi-output fusion (dgamma and dbeta); column
// sums over all but the last dim (dgamma, dbeta) join the row reduction
// (layer-norm backward) sharing their input.
#ifndef GPTC_PASSES_REDUCTION_FUSION_H_
#define GPTC_PASSES_REDUCTION_FUSION_H_

#include "compiler/pass/pass.h"
#include "passes/fusion.h"

namespace gptc::passes {

namespace fusion_internal {
class Planner;
void FuseReductions(Planner& p);
}  // namespace fusion_internal

// The rule alone, as a pass: gptc-opt --pass=reduction-fusion.
class ReductionFusion : public FusionRulePass {
 public:
  ReductionFusion() : FusionRulePass("reduction-fusion", {&fusion_internal::FuseReductions}) {}
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_REDUCTION_FUSION_H_
