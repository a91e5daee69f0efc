// Fusion: groups the entry computation's instructions into kernels.
//
// Every group becomes one `fusion` instruction calling a fused computation
// (defined right before the entry) whose parameters are the group's inputs
// and whose root is its result, or a tuple of results (multi-output fusion;
// users read them with get-tuple-element):
//   %a = f32[8] exp(%x)                %f = f32[8] fusion(%x), kind=loop, calls=%fused.0
//   %b = f32[8] neg(%a)        =>
// The rules, each a pass of its own with its header (gptc-opt
// --pass=NAME runs one alone), run by this pass in this order on one
// planner (passes/fusion_planner.h), and materialized once; an instruction
// joins at most one group:
//  0. attention-operands (attention_operands.h): IR rewrites before
//     planning, so that the attention kernels read the rounded bf16 copies
//     and each backward kernel its own operand chains;
//  1. horizontal-fusion (horizontal_fusion.h): the optimizer's updates, the
//     gradient norm's square sums, the parameters' bf16 converts, one
//     kernel each;
//  2. cross-entropy-fusion (cross_entropy_fusion.h): loss and dlogits in
//     one kernel per softmax-cross-entropy;
//  3. attention-fusion (attention_fusion.h): the flash kernels, forward and
//     backward, with their operand and result layout chains;
//  4. gemm-fusion (gemm_fusion.h): each remaining dot with what cuBLASLt's
//     epilogues do around it, and its epilogue record;
//  5. reduction-fusion (reduction_fusion.h): row reductions over their
//     row-local region (layer norm forward and backward), column and full
//     reductions with their producers;
//  6. loop-fusion (loop_fusion.h): converts into their producers' groups,
//     then maximal connected elementwise and layout groups.
// Run together, a later rule sees the groups of the earlier ones as taken
// (not as opaque fusions), so that for instance a convert joins the
// reduction kernel that produces its operand; run alone, a rule pass fuses
// what it would with nothing else grouped.
// Constants, iotas, broadcasts, and elementwise ops of those alone (the
// causal mask) are never stored: each group that uses one
// gets its own copy (a broadcast's operand becomes the input). Parameters,
// gather, scatter-add, all-reduce, tuple and get-tuple-element stay unfused.
// Every merge is checked to keep the groups acyclic (no path leaves a group
// and re-enters it); rule 1-3 regions are shrunk until they are convex.
//
// Runs last among the graph rewrites: after autodiff, optimizer, simplify,
// CSE, DCE, mixed_precision and remat, before schedule and buffer
// assignment. Nothing that rewrites instructions should run after it (CSE
// or simplify would not look inside fused computations); running it twice
// leaves the second run without work (fusions are not refused).
#ifndef GPTC_PASSES_FUSION_H_
#define GPTC_PASSES_FUSION_H_

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>
#include <vector>

#include "compiler/pass/pass.h"

namespace gptc::passes {

class Fusion : public pass::Pass {
 public:
  std::string_view Name() const override { return "fusion"; }
  StatusOr<bool> Run(ir::Module& module) override;
};

namespace fusion_internal {
class Planner;
// One rule (or step of one) over the planner: it makes groups of what is
// not grouped yet, and may grow the groups it made.
using FusionRule = void (*)(Planner& planner);
}  // namespace fusion_internal

// Runs `rules` in order on one planner over `module`'s entry and
// materializes the groups they made: the fusion instructions, their fused
// computations, and each gemm fusion's epilogue record. `pass` names the
// pass in errors.
StatusOr<bool> RunFusionRules(ir::Module& module,
                              std::span<const fusion_internal::FusionRule> rules,
                              std::string_view pass);

// A fusion rule run alone as a pass (the rule passes' base).
class FusionRulePass : public pass::Pass {
 public:
  FusionRulePass(std::string_view name, std::initializer_list<fusion_internal::FusionRule> rules)
      : name_(name), rules_(rules) {}
  std::string_view Name() const override { return name_; }
  StatusOr<bool> Run(ir::Module& module) override { return RunFusionRules(module, rules_, name_); }

 private:
  std::string_view name_;
  std::vector<fusion_internal::FusionRule> rules_;
};

// The most kernels (gemms included) one GPT-2 layer's forward + backward may
// take without remat (remat adds its recomputations); tests hold the fusion
// rules to it (how it came down: docs/PERFORMANCE.md, "Kernels per layer").
// An instruction counts once, however many kernels it launches: Note
// [multi-kernel instructions].
inline constexpr int64_t kMaxKernelsPerLayer = 23;

// The same for the bf16 train step (mixed precision, as gptc compiles by
// default; remat none): the GELU and its backward run in the gemms around
// them (Note [GELU epilogues] in gelu_epilogue.h); delta sums rows of do and
// o where the output projection's gemms leave them (Note [delta in the stored
// layout] in autodiff_attention.cc) and both flash kernels read do through
// its transpose (Note [per-kernel operand chains] in attention_operands.h).
// The qkv projection's gemm writes q, k and v in bf16 with its bias, and the
// attention kernels read them out of it (Note [bf16 attention projection] in
// mixed_precision.h: no copies); the dk + dv and dq kernels write the packed
// [B, T, 3C] gradient of the qkv projection, one fusion of two kernels (Note
// [packed attention gradient] in attention_fusion.cc).
inline constexpr int64_t kBf16KernelsPerLayer = 19;

}  // namespace gptc::passes

#endif  // GPTC_PASSES_FUSION_H_
