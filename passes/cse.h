// Common subexpression elimination.
//
// Merges instructions that compute the same value: same opcode, shape,
// attributes, called computation and operands (add and mul also with their
// operands swapped). The first in order stays; later ones are replaced by it
// and removed:
//   %a = f32[4] exp(%x)                 %a = f32[4] exp(%x)
//   %b = f32[4] exp(%x)           =>    ROOT %r = f32[4] add(%a, %a)
//   ROOT %r = f32[4] add(%a, %b)
// Constants merge when their values are bitwise equal (0 and -0 do not).
// Never merged: parameters (distinct inputs) and collectives (all-reduce,
// reduce-scatter, all-gather: every replica issues them in the same order;
// merging two changes the sequence of collectives, see dce.h). Runs per
// computation with a hash table, in linear time; it leaves other dead values
// to dce.
//
// Before: best after simplify, which canonicalizes values so more of them match.
// Must not run after: remat. CSE after remat undoes it: the recomputed values
// are exactly the duplicates CSE merges back into the saved ones.
#ifndef GPTC_PASSES_CSE_H_
#define GPTC_PASSES_CSE_H_

#include "compiler/pass/pass.h"

namespace gptc::passes {

class Cse : public pass::Pass {
 public:
  std::string_view Name() const override { return "cse"; }
  StatusOr<bool> Run(ir::Module& module) override;
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_CSE_H_
