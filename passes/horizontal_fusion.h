// Horizontal fusion: the rules that put many independent instructions of
// one role into one kernel each (fusion's rule 1, passes/fusion.h):
//  - optimizer: every instruction of the optimizer phase (the per-parameter
//    AdamW updates) in ONE horizontal fusion, kind=optimizer;
//  - grad norm: the per-parameter square sums the optimizer fusion leaves
//    out (the optimizer's reduces) and their scalar epilogue: ONE horizontal
//    reduction fusion, named `optimizer.grad_norm`;
//  - parameters: every convert of an entry parameter (f32 master weight to
//    bf16) in ONE horizontal loop fusion, named `parameters.bf16`.
// The names and metadata are for people (dumps, kernel names); what the
// fusions are is their role (phase optimizer, phase param_cast), which the
// plan records for its readers (Note [plan roles] in
// compiler/program/plan_role.h).
#ifndef GPTC_PASSES_HORIZONTAL_FUSION_H_
#define GPTC_PASSES_HORIZONTAL_FUSION_H_

#include "compiler/pass/pass.h"
#include "passes/fusion.h"

namespace gptc::passes {

namespace fusion_internal {
class Planner;
void FuseOptimizer(Planner& p);
void FuseGradNorm(Planner& p);
void FuseParameterConverts(Planner& p);
}  // namespace fusion_internal

// The rules alone, as a pass: gptc-opt --pass=horizontal-fusion.
class HorizontalFusion : public FusionRulePass {
 public:
  HorizontalFusion()
      : FusionRulePass("horizontal-fusion",
                       {&fusion_internal::FuseOptimizer, &fusion_internal::FuseGradNorm,
                        &fusion_internal::FuseParameterConverts}) {}
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_HORIZONTAL_FUSION_H_
