// Fusion: groups the entry computation's instructions into kernels.
//
// Every group becomes one `fusion` instruction calling a fused computation
// (defined right before the entry) whose parameters are the group's inputs
// and whose root is its result, or a tuple of results (multi-output fusion;
// users read them with get-tuple-element):
//   %a = f32[8] exp(%x)                %f = f32[8] fusion(%x), kind=loop, calls=%fused.0
//   %b = f32[8] neg(%a)        =>
// Rules, applied in this order (an instruction joins at most one group):
//  1. optimizer: every instruction whose metadata starts with `optimizer.`
//     (the per-parameter AdamW updates) in ONE horizontal fusion, kind=optimizer.
//  1b. grad norm: the per-parameter square sums the optimizer fusion leaves
//     out (`optimizer.*` reduces) and their scalar epilogue: ONE horizontal
//     reduction fusion, metadata `optimizer.grad_norm`.
//  1c. parameters: every convert of an entry parameter (f32 master weight to
//     bf16) in ONE horizontal loop fusion, metadata `parameters.bf16`.
//  2. cross_entropy: each softmax-cross-entropy op together with the backward
//     ops computing dlogits from the same logits (metadata `grad.<ce scope>`),
//     one multi-output fusion (loss rows, dlogits): probabilities are never stored.
//  3. attention: each attention op with the slice/reshape/transpose chains of
//     its operands and the transpose/reshape of its result (the attention
//     kernel reads q, k, v out of the packed qkv and writes [B,T,C]), and the
//     attention-lse of the same q, k. The backward's attention-grad ops make
//     two flash kernels, dk + dv and dq (Note [attention backward] in
//     fusion_rules.cc). Before planning, a bf16 attention's operands become
//     the rounded [B, H, T, D] copies the backward keeps (Note [rounded
//     attention operands]), which loop kernels write, and the dq op gets its
//     own copy of operand layout chains it shares with dk + dv (Note
//     [per-kernel operand chains]).
//  4. gemm: every other dot is the root of a kind=gemm fusion with what
//     cuBLASLt can do around it: last-two-dims transposes and reshapes of the
//     operands, converts of the result (but a bare bf16 dot's f32 widening
//     that only later loop or reduction kernels read is left to them, so the
//     gemm writes bf16: Note [narrow gemm results] in fusion_rules.cc), a
//     bias add (broadcast along the last dim; a widening
//     convert of the bias joins too), the tanh GELU of the frontend (only
//     when its intermediates are not used elsewhere; of the widened bf16
//     pre-activation, which is then an output: cuBLASLt's aux), a residual
//     add of a same-shaped tensor (not after a GELU), converts, a 2-D
//     transpose of the result, the bias gradient (a column sum of an operand
//     over the contracting dims, or of its f32 widening, with a round trip
//     through bf16 after it: cuBLASLt's BGRADA/BGRADB epilogues), and, after
//     a bare dot, the GELU backward: the ops computing dy * GELU'(aux) from
//     the dot's result and the recomputed GELU intermediates, down to an
//     aux of D's dtype left outside (cuBLASLt's DGELU; Note [GELU
//     epilogues] in gelu_epilogue.h). GELU regions are checked on sample
//     points. Each gemm fusion then carries its epilogue record, which every
//     later stage reads (Note [gemm epilogue records] in
//     compiler/analysis/gemm_epilogue.h).
//  5. reduction: each remaining reduce is a fusion root. Row reductions (over
//     the last dim) grow over the row-local region around them: elementwise
//     ops of the input shape or the row shape, and further row reductions of
//     the same input shape (layer norm forward and backward are one kernel
//     each); a forward row reduction takes no remat clone (`remat.*`: remat
//     made it for the backward, whose kernel computes it instead of storing
//     it). Column and full reductions absorb their elementwise producers;
//     sibling reductions of the same shape and dims that share an input share
//     one multi-output fusion (dgamma and dbeta).
//  6. loop: remaining elementwise / layout / select / compare / convert ops
//     form maximal connected kind=loop groups; a reshape no loop group
//     takes stays unfused: a view of its operand, no kernel (IsKernel).
//     Also in the cross_entropy fusion: the widening convert of bf16 logits
//     (and of their remat clone `remat.NAME`) and the converts of dlogits.
//     The attention kernels also take the q/k/v bias add and layout chains
//     (remat clones included) when nothing else reads them, and the forward
//     one the convert of its output. The bias-gradient column sum may read
//     the f32 value whose convert the gemm takes. Column sums over all but
//     the last dim (dgamma, dbeta) join the row reduction (layer-norm
//     backward) sharing their input. After rule 5, a convert whose producer
//     is in a non-gemm group joins it.
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
#include <map>
#include <string>

#include "compiler/pass/pass.h"

namespace gptc::passes {

class Fusion : public pass::Pass {
 public:
  std::string_view Name() const override { return "fusion"; }
  StatusOr<bool> Run(ir::Module& module) override;
};


// The most kernels (gemms included) one GPT-2 layer's forward + backward may
// take without remat (remat adds its recomputations); tests hold the fusion
// rules to it. It was 27 while the attention backward was 7 kernels around
// [B, H, T, T] tensors; the flash backward (Note [attention backward] in
// fusion_rules.cc) made it 25 (the bf16 copy of do, delta, the dk + dv and
// dq kernels, and the packing into the [B, T, 3C] gradient), and Note [packed
// attention gradient] 23: the dk + dv and dq kernels are one fusion writing
// the packed gradient. (An instruction counts once, however many kernels it
// launches: Note [multi-kernel instructions].)
inline constexpr int64_t kMaxKernelsPerLayer = 23;

// The same for the bf16 train step (mixed precision, as gptc compiles by
// default; remat none): the GELU and its backward run in the gemms around
// them (Note [GELU epilogues] in gelu_epilogue.h); delta sums rows of do and
// o where the output projection's gemms leave them (Note [delta in the stored
// layout] in autodiff_attention.cc) and both flash kernels read do through
// its transpose (Note [per-kernel operand chains] in fusion_planner.h). The
// qkv projection's gemm writes q, k and v in bf16 with its bias, and the
// attention kernels read them out of it (Note [bf16 attention projection] in
// mixed_precision.h: no copies); the dk + dv and dq kernels write the packed
// [B, T, 3C] gradient of the qkv projection, one fusion of two kernels (Note
// [packed attention gradient] in fusion_rules.cc): 19.
inline constexpr int64_t kBf16KernelsPerLayer = 19;

}  // namespace gptc::passes

#endif  // GPTC_PASSES_FUSION_H_
