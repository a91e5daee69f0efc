// Mixed precision: bf16 matmul operands with f32 accumulation, f32 everywhere else.
//
// Under PrecisionPolicy::kBF16 every dot of the entry whose operands are f32
// gets bf16 operands through visible `convert` instructions and keeps an f32
// result (the tensor cores accumulate in f32):
//   %w = f32[64,256] parameter(3)                 %w = f32[64,256] parameter(3)
//   %x = f32[32,64] ...                           %x = f32[32,64] ...
//   %y = f32[32,256] dot(%x, %w), ...      =>     %x.bf16 = bf16[32,64] convert(%x)
//                                                 %w.bf16 = bf16[64,256] convert(%w)
//                                                 %y = f32[32,256] dot(%x.bf16, %w.bf16), ...
// One convert per converted value, placed right before its first dot user
// and shared by the others, named `NAME.bf16` with the metadata of that dot.
// What stays f32, and why:
//   - parameters (master weights): they are converted at each use, so the
//     optimizer state and the update stay f32 (the optimizer pass sees f32
//     parameters and gradients only);
//   - dot results: f32 accumulation; bias adds, residual stream and GELU run
//     in f32 on them;
//   - layer-norm statistics (mean / variance reductions), softmax and the
//     attention logits: the attention composite takes f32 q/k/v (its
//     decomposition is traced per dtype, and the fused kernel computes
//     logits and softmax in f32 anyway; widened from the bf16 projection
//     where Note [bf16 attention projection] applies), and dots inside
//     called computations are left alone. Its BACKWARD's matmuls do go bf16
//     (below);
//   - the softmax-cross-entropy and the loss: the CE math is f32, but the
//     logits it reads are STORED in bf16: a dot whose only uses are the
//     logits of softmax-cross-entropy ops (the lm_head) produces bf16, and a
//     convert back to f32 feeds the CE (Note [bf16 logits] in the .cc):
//       %lm_head.dot.bf16 = bf16[B,T,V] dot(...)
//       %lm_head.dot.f32 = f32[B,T,V] convert(%lm_head.dot.bf16)
//     so no f32 [B,T,V] tensor is stored once fusion puts the convert in the
//     cross_entropy kernel, and dlogits (converted to bf16 by autodiff's
//     convert rule) leave that kernel as bf16.
// The activations the backward keeps for the dots are their bf16 operands
// (the converts), so the saved dot inputs take half the memory.
//
// Note [bf16 GELU epilogue]: a GELU after a dot and an f32 bias, whose
// activation only dots read (the MLP's c_fc), gets its bias and its input in
// bf16, as cuBLASLt's GELU epilogues take them (Note [GELU epilogues] in
// gelu_epilogue.h: bias and aux of D's type, D being the bf16 activation):
//   %pre = f32 add(%fc, broadcast(%b))         %b.bf16 = bf16 convert(%b)
//   %act = GELU(%pre)                   =>     %b.f32 = f32 convert(%b.bf16)
//                                              %pre = f32 add(%fc, broadcast(%b.f32))
//                                              %pre.bf16 = bf16 convert(%pre)
//                                              %pre.f32 = f32 convert(%pre.bf16)
//                                              %act = GELU(%pre.f32)
// Autodiff then differentiates the GELU at %pre.f32, so the backward needs
// %pre.bf16 alone (half the bytes of the f32 pre-activation it kept before),
// and the bias gradient is rounded to bf16 like every weight gradient (the
// dot rule's bf16 results); the gemm epilogues skip both roundings (noted
// in their plans). It is done here rather than in fusion because it decides
// what is rounded, which the IR must show before autodiff and every pass
// after it: fusion only groups what the IR already computes.
//
// Note [bf16 attention projection]: a bf16 attention rounds its q, k, v to
// bf16 (Note [bf16 attention] in autodiff_attention.h), so where they are
// slices of one projection %y = add(%dot, broadcast(%b)) that nothing else
// reads (GPT-2's c_attn: [B, T, 3C] -> slice -> reshape -> transpose), %y is
// rounded once where its gemm writes it, with its bias rounded to bf16 as
// cuBLASLt's bias epilogue takes it (a bias of D's type, as PyTorch's
// autocast rounds a linear's bias too):
//   %b.bf16 = convert(%b); %b.f32 = convert(%b.bf16)
//   %y = add(%dot, broadcast(%b.f32))          the gemm, its bias epilogue
//   %y.bf16 = convert(%y)                      and its bf16 D
//   %q = f32 convert(transpose(reshape(slice(%y.bf16))))   (the chain in bf16)
// The attention kernels then read q, k, v straight out of the bf16
// projection (Note [strided operands] in compiler/codegen/attention_mma.h):
// no copy kernels, and the gemm writes half the bytes. The backward keeps
// %y.bf16 (autodiff's bf16 copies of q, k, v simplify to its slices), and,
// through the widening converts, dq, dk and dv leave their kernels in bf16,
// the dtype the projection's backward dots take anyway. Nothing happens when
// anything else reads %y or a slice of it, or the last dim is not a multiple
// of 8.
//
// Note [bf16 attention backward]: an f32 attention gets grad_dtype=bf16.
// Autodiff's attention rule then gives its five backward matmuls (S = q k^T,
// dP = dO v^T, dV = P^T dO, dQ = dS k, dK = dS^T q) bf16 operands with f32
// results, and the forward's two (q k^T, P v) get them too: its decomposition
// becomes the bf16-rounded one (Note [bf16 attention] in
// autodiff_attention.h), which tensor-core kernels compute. Without it they ran as f32 gemms and
// read and wrote f32 [B,H,T,T] scores and probabilities: on gpt2-124m the
// fusion report's roofline gave them over twenty times the forward
// attention's time (docs/PERFORMANCE.md, the Notes' measurements), and it
// counts every gemm at the bf16 tensor-core peak, so f32 gemms cost more
// still. Now S and dP are f32, as flash attention
// keeps them, and P and dS are stored in bf16, as flash attention feeds them to its tensor cores.
//
// Order: run it on the traced FORWARD graph, before autodiff. This deviates
// from DESIGN.md's pipeline (which lists it after simplify/CSE on the train
// step) on purpose: autodiff then differentiates through the converts (its
// convert rule converts the gradient back to f32), so every parameter
// gradient is f32 and the optimizer needs no precision logic; converting
// the backward's dots after the fact would have to tell gradient dots from
// forward ones. Remat and fusion run after autodiff; fusion folds the
// converts into their producers' kernels. Running it twice changes nothing
// (no f32 dot is left); PrecisionPolicy::kF32 never changes the module.
#ifndef GPTC_PASSES_MIXED_PRECISION_H_
#define GPTC_PASSES_MIXED_PRECISION_H_

#include <optional>
#include <string_view>

#include "compiler/pass/pass.h"
#include "compiler/program/precision.h"

namespace gptc::passes {

// The policies, as the manifest records them: compiler/program/precision.h.
using program::ParsePrecisionPolicy;
using program::PrecisionPolicy;
using program::PrecisionPolicyName;

struct MixedPrecisionOptions {
  PrecisionPolicy policy = PrecisionPolicy::kBF16;
};

class MixedPrecision : public pass::Pass {
 public:
  explicit MixedPrecision(MixedPrecisionOptions options = {}) : options_(options) {}
  std::string_view Name() const override { return "mixed-precision"; }
  StatusOr<bool> Run(ir::Module& module) override;

 private:
  MixedPrecisionOptions options_;
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_MIXED_PRECISION_H_
