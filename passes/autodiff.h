// Reverse-mode automatic differentiation of the entry computation.
//
// Input: a module whose entry computes a scalar float loss (ROOT is e.g.
// f32[]) from parameters 0..n-1. Every float array parameter gets a gradient;
// integer ones (tokens, targets) get none. Output: the entry returns the tuple
//   (loss, grad_p0, grad_p1, ...)
// with one gradient per float parameter in parameter order (a float parameter
// the loss does not depend on gets zeros):
//   %x = f32[4] parameter(0)                  %x = f32[4] parameter(0)
//   %e = f32[4] exp(%x)                       %e = f32[4] exp(%x)
//   ROOT %l = f32[] reduce(%e), ...     =>    %l = f32[] reduce(%e), ...
//                                             %grad.l = f32[] constant(1)
//                                             ...
//                                             %grad.e = f32[4] mul(%grad.l.1, %e)
//                                             ROOT %grad.l.2 = (f32[], f32[4]) tuple(%l, %grad.e)
//
// The driver walks the instructions that lie on a path from a float
// parameter to the root in reverse order, applies the per-opcode VJP rule of
// autodiff_rules.cc to each and sums the contributions of several users.
// Everything a rule builds for a forward instruction %y is named `grad.y`
// (made unique) and has metadata `grad.<metadata of y>`, so dumps show where
// each gradient came from. An opcode without a rule fails with
// "autodiff: no gradient rule for opcode X (%name)".
//
// Tuples: tuple and get-tuple-element are handled by the driver (per-element
// adjoints); other tuple-valued instructions on the gradient path fail.
// Fusion is differentiated through its called computation: a recomputed copy
// is inlined for the backward while the forward fusion stays. attention and
// softmax-cross-entropy have dedicated rules (recomputing the probabilities
// from their operands, with the semantics of the frontend's decompositions).
// reduce max splits the gradient equally between tied maxima; max/min give
// ties to the first operand; strided slices fail (no rule yet).
//
// `loss_scale` seeds the backward with d loss / d loss = loss_scale instead
// of 1, so every gradient comes out multiplied by it at no cost (the seed
// folds into the first backward kernel): data parallelism seeds 1/world
// (passes/data_parallel.h, Note [scale first]).
//
// Run it on the traced forward graph before any lowering; run dce after it
// (the recomputed copies of called computations can leave dead values).
// Running it twice fails: the root is then a tuple.
#ifndef GPTC_PASSES_AUTODIFF_H_
#define GPTC_PASSES_AUTODIFF_H_

#include "compiler/pass/pass.h"

namespace gptc::passes {

struct AutodiffOptions {
  double loss_scale = 1.0;
};

class Autodiff : public pass::Pass {
 public:
  explicit Autodiff(AutodiffOptions options = {}) : options_(options) {}
  std::string_view Name() const override { return "autodiff"; }
  StatusOr<bool> Run(ir::Module& module) override;

 private:
  AutodiffOptions options_;
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_AUTODIFF_H_
