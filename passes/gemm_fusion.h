// Gemm fusion (fusion's rule 4, passes/fusion.h): every dot not taken by
// an earlier rule is the root of a kind=gemm fusion with what cuBLASLt can
// do around it: last-two-dims transposes and reshapes of the operands,
// converts of the result (but a bare bf16 dot's f32 widening that only later
// loop or reduction kernels read is left to them, so the gemm writes bf16:
// Note [narrow gemm results] in gemm_fusion.cc), a bias add (broadcast along
// the last dim; a widening convert of the bias joins too), an activation of
// compiler/analysis/gemm_activations.h's table or the tanh GELU of the
// frontend (only when its intermediates are not used elsewhere; of the
// widened bf16 pre-activation, which is then an output: cuBLASLt's aux), a
// residual add of a same-shaped tensor (not after a GELU), converts, a 2-D
// transpose of the result, the bias gradient (a column sum of an operand
// over the contracting dims, or of its f32 widening, with a round trip
// through bf16 after it: cuBLASLt's BGRADA/BGRADB epilogues), and, after a
// bare dot, the GELU backward: the ops computing dy * GELU'(aux) from the
// dot's result and the recomputed GELU intermediates, down to an aux of D's
// dtype left outside (cuBLASLt's DGELU; Note [GELU epilogues] in
// compiler/analysis/gelu_epilogue.h). GELU regions are checked on sample
// points. The rule writes each gemm's epilogue record as it takes each op,
// and every later stage reads it (Note [gemm epilogue records] in
// compiler/analysis/gemm_epilogue.h); cuBLASLt's limits on the bias and aux
// are asked of one table (Note [cuBLASLt epilogue limits], same file).
#ifndef GPTC_PASSES_GEMM_FUSION_H_
#define GPTC_PASSES_GEMM_FUSION_H_

#include <vector>

#include "compiler/pass/pass.h"
#include "passes/fusion.h"
#include "passes/fusion_planner.h"

namespace gptc::passes {

namespace fusion_internal {

// Groups each dot with its epilogue and writes the group's epilogue record
// (Group::gemm_epilogue) as it takes each op.
void FuseGemms(Planner& p);

// Adds to gemm group `g` the column sum of one of dot `d`'s operands over
// its contracting dims, and a round trip through bf16 after it: cuBLASLt's
// bias-gradient epilogues (BGRADA, BGRADB), in gemm_fusion_epilogues.cc.
// Writes the sum's output and the operand it sums into `e`.
void FuseBiasGradients(Planner& p, int g, const ir::Instruction* d, GemmEpilogueValues& e);

// A GELU epilogue of FuseGemms (gemm_fusion_epilogues.cc, Note [GELU
// epilogues] in gelu_epilogue.h): its ops in order, the value they end at
// last (empty when there is none); and the pre-activation, which the
// forward writes as aux (when anything else reads it) and the backward reads.
struct GeluEpilogueOps {
  std::vector<const ir::Instruction*> ops;
  const ir::Instruction* aux = nullptr;
};
// The tanh GELU of `x` (a value of gemm group `group`), or of its widened
// copy when `x` is the bf16 pre-activation the backward keeps.
GeluEpilogueOps MatchGeluEpilogue(const Planner& p, const ir::Instruction* x, const InstSet& group);
// dy * GELU'(aux): the ops computed from `dy` and the recomputed GELU
// intermediates they read, down to the aux, a value of D's dtype left outside.
GeluEpilogueOps MatchGeluGradEpilogue(const Planner& p, const ir::Instruction* dy);

}  // namespace fusion_internal

// The rule alone, as a pass: gptc-opt --pass=gemm-fusion.
class GemmFusion : public FusionRulePass {
 public:
  GemmFusion() : FusionRulePass("gemm-fusion", {&fusion_internal::FuseGemms}) {}
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_GEMM_FUSION_H_
