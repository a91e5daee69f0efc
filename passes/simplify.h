// Algebraic simplification and constant folding.
//
// Rewrites every computation of the module (fused computations and
// decompositions too) with a table of local rules that read like math, to a
// local fixed point (at most kMaxSweeps sweeps), then removes what became
// dead (as dce does, so the pass leaves no garbage):
//   %one = f32[4] broadcast(%c1), dimensions={}
//   %m = f32[4] mul(%x, %one)                      =>  ROOT %r = f32[4] neg(%x)
//   ROOT %r = f32[4] neg(%m)
// The rules: identities of add/sub/mul/div/pow with splat constants (also
// broadcasts of scalar constants), neg(neg(x)), convert/reshape/transpose/
// broadcast/slice/reduce/concatenate that do nothing, reshape and transpose
// and broadcast chains, select with equal branches or a constant predicate,
// an add of a scatter-add into zeros (Note [scatter into the addend]), and
// constant folding of ops over constants whose result has at most
// kMaxFoldElements elements (computed by the reference evaluator in f32 mode,
// so folding gives the values the unfolded graph gives).
//
// Note [float identities]: x + 0 => x is exact up to the sign of zero
// (-0 + 0 is +0), as in XLA. x * 0 => 0 is applied to integers only: for
// floats, inf * 0 and nan * 0 are nan, so it is not an identity.
//
// Note [scatter into the addend]: x + scatter-add(0, i, u), where the add is
// the scatter-add's only user, becomes scatter-add(x, i, u) (as ByteIR's
// hlo-fold does): u's rows are added to x's instead of to zeros. The one
// rule here that is not exact: x + (u1 + u2) becomes (x + u1) + u2, a
// reassociation in the same index order, as deterministic as before. The
// tied embedding's gradient is the lm head's gradient plus the tokens'
// gradients scattered into zeros: gpt2-124m's step wrote a 150 MiB table of
// zeros, copied it, scattered into the copy, and read both tables to add them.
//
// Parameters are never removed (they are the signature), nor all-reduce.
// Before: runs on any verified module; best after autodiff (which leaves
// x * 1, adds of broadcast zeros and transpose chains) and before fusion.
// Must not run after: schedule and buffer_assignment (it adds and removes
// instructions they have ordered and assigned).
#ifndef GPTC_PASSES_SIMPLIFY_H_
#define GPTC_PASSES_SIMPLIFY_H_

#include <cstdint>

#include "compiler/pass/pass.h"

namespace gptc::passes {

class Simplify : public pass::Pass {
 public:
  // Results larger than this stay computed at run time, not stored in the IR.
  static constexpr int64_t kMaxFoldElements = 1024;
  // Sweeps of the rule table over one computation before giving up on a fixed point.
  static constexpr int kMaxSweeps = 25;

  std::string_view Name() const override { return "simplify"; }
  StatusOr<bool> Run(ir::Module& module) override;
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_SIMPLIFY_H_
