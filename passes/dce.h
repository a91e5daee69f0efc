// Dead code elimination.
//
// Removes instructions whose values nothing uses (other than the root,
// parameters, which are the computation's signature, and collectives
// (ir::IsCollective), which every replica must execute together), then
// computations nothing calls.
//   %a = f32[4] exp(%x)          // unused      =>  (removed)
//   ROOT %r = f32[4] neg(%x)                       ROOT %r = f32[4] neg(%x)
// Runs anywhere; simplify and CSE leave dead values that it collects.
#ifndef GPTC_PASSES_DCE_H_
#define GPTC_PASSES_DCE_H_

#include "compiler/pass/pass.h"

namespace gptc::passes {

class Dce : public pass::Pass {
 public:
  std::string_view Name() const override { return "dce"; }
  StatusOr<bool> Run(ir::Module& module) override;
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_DCE_H_
