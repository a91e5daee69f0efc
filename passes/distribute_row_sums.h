// Row sums that read another row sum's broadcast, split so that both sum in
// one pass over the rows.
//
// Note [distributed row sums]
// A sum over dims D of a + r·b, where r is a value of the sum's own shape
// broadcast along D (constant within each row), is Σa + r·Σb: the broadcast
// factor leaves the sum, and adds, subtractions and negations distribute.
// Autodiff's layer-norm backward has exactly this form: its second row sum
// reads dy·γ·rstd + c·(x − mean) twice, with c computed from its first row
// sum, so the row-reduction kernel made two passes over each row (plus the
// output pass), re-reading x − mean and dy in each:
//   %s1 = f32[B,T] reduce(%g_xc), dimensions={2}, kind=sum
//   %c = f32[B,T] ...(%s1)...
//   %m = f32[B,T,C] mul(%g, broadcast(%rstd))
//   %n = f32[B,T,C] mul(broadcast(%c), %xc)
//   %s2 = f32[B,T] reduce(neg(add(add(%m, %n), %n))), dimensions={2}, kind=sum
// =>
//   %s2 = -(rstd·Σg + 2·c·Σxc), with Σg and Σxc independent of %s1,
// so the sums share a pass (row_reduction_plan.h's batches). The sum
// is rewritten only when a factor leaving it depends on another reduce (the
// case that costs a pass); its summands' sums round differently (the f32
// results agree to a few ulps of the terms' magnitudes). A term summing
// x − mean(x) over the same dims (layer norm's centered input) is dropped:
// its sum is zero, and computed it would be the noise of a cancellation.
// Runs after autodiff (passes/train_step.cc).
#ifndef GPTC_PASSES_DISTRIBUTE_ROW_SUMS_H_
#define GPTC_PASSES_DISTRIBUTE_ROW_SUMS_H_

#include "compiler/pass/pass.h"

namespace gptc::passes {

class DistributeRowSums : public pass::Pass {
 public:
  std::string_view Name() const override { return "distribute-row-sums"; }
  StatusOr<bool> Run(ir::Module& module) override;
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_DISTRIBUTE_ROW_SUMS_H_
