// Loop fusion (fusion's rule 6, passes/fusion.h): first a convert whose
// producer is in a non-gemm, non-optimizer group joins it (cuBLASLt writes
// one result; the gemm rule takes its own converts); then the remaining
// elementwise / layout / select / compare / convert ops form maximal
// connected kind=loop groups, and a reshape no loop group takes stays
// unfused: a view of its operand, no kernel (IsKernel). A free op (not a
// constant) that an unfused instruction or the root reads gets a loop kernel
// of its own.
#ifndef GPTC_PASSES_LOOP_FUSION_H_
#define GPTC_PASSES_LOOP_FUSION_H_

#include "compiler/pass/pass.h"
#include "passes/fusion.h"

namespace gptc::passes {

namespace fusion_internal {
class Planner;
void FuseConvertsIntoProducers(Planner& p);
void FuseLoops(Planner& p);
}  // namespace fusion_internal

// The rules alone, as a pass: gptc-opt --pass=loop-fusion.
class LoopFusion : public FusionRulePass {
 public:
  LoopFusion()
      : FusionRulePass("loop-fusion",
                       {&fusion_internal::FuseConvertsIntoProducers, &fusion_internal::FuseLoops}) {
  }
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_LOOP_FUSION_H_
