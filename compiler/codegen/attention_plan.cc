#include "compiler/codegen/attention_plan.h"

#include <algorithm>
#include <map>

#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"  // Describe
#include "compiler/ir/patterns.h"

namespace gptc::codegen {
namespace {

// The CUDA-core kernels hold a head-dim row in 8 elements a lane.
constexpr int64_t kMaxHeadDim = 8 * 32;

// The attention and attention-lse ops of `fused` (at most one of each).
Status FindForwardOps(const ir::Instruction& fusion, const ir::Computation& fused,
                      AttentionForward& a) {
  for (const auto& inst : fused.instructions()) {
    const ir::Instruction** slot = inst->opcode() == ir::Opcode::kAttention      ? &a.attn
                                   : inst->opcode() == ir::Opcode::kAttentionLse ? &a.lse
                                                                                 : nullptr;
    if (slot == nullptr) continue;
    if (*slot != nullptr) {
      return Error("%{}: {}: a second {} op in one fusion", fusion.name(), Describe(*inst),
                   ir::OpcodeName(inst->opcode()));
    }
    *slot = inst.get();
  }
  if (a.attn == nullptr && a.lse == nullptr) {
    return Error("%{}: attention fusion without an attention or attention-lse op", fusion.name());
  }
  if (a.attn != nullptr && a.lse != nullptr &&
      (a.lse->operand(0) != a.attn->operand(0) || a.lse->operand(1) != a.attn->operand(1) ||
       a.lse->attrs().causal != a.attn->attrs().causal ||
       a.lse->attrs().scale != a.attn->attrs().scale)) {
    return Error("%{}: {} does not take the q, k and attributes of {}", fusion.name(),
                 Describe(*a.lse), Describe(*a.attn));
  }
  return Status::Ok();
}

// q, k, v of [B, H, T, D] (k and v of one shape) and their sizes.
Status CheckForwardShapes(const ir::Instruction& fusion, const ir::Instruction& scores,
                          AttentionForward& a) {
  const ir::Shape& qs = scores.operand(0)->shape();
  const ir::Shape& ks = scores.operand(1)->shape();
  const ir::Shape& vs = a.attn != nullptr ? a.attn->operand(2)->shape() : ks;
  if (qs.rank() != 4 || ks.rank() != 4 || vs.rank() != 4 || ks.dims() != vs.dims() ||
      qs.dim(0) != ks.dim(0) || qs.dim(1) != ks.dim(1) || qs.dim(3) != ks.dim(3) ||
      (a.attn != nullptr && a.attn->shape().dims() != qs.dims())) {
    return Error("%{}: {}: expected q, k, v of [B, H, T, D] (got {}, {}, {})", fusion.name(),
                 Describe(scores), qs.ToString(), ks.ToString(), vs.ToString());
  }
  a.batch = qs.dim(0);
  a.heads = qs.dim(1);
  a.tq = qs.dim(2);
  a.dim = qs.dim(3);
  a.tk = ks.dim(2);
  if (a.dim > kMaxHeadDim) {
    return Error("%{}: {}: head dim {} exceeds {}", fusion.name(), Describe(scores), a.dim,
                 kMaxHeadDim);
  }
  return Status::Ok();
}

// The attention-grad ops of `fused` that `part` computes, by wrt, sharing
// their operands; dq alone, or dk and dv. Returns the last one.
StatusOr<const ir::Instruction*> FindGradOps(const ir::Instruction& fusion,
                                             const ir::Computation& fused, BackwardPart part,
                                             AttentionBackward& a) {
  const ir::Instruction* any = nullptr;
  for (const auto& inst : fused.instructions()) {
    if (inst->opcode() != ir::Opcode::kAttentionGrad) continue;
    const int64_t wrt = inst->attrs().index;
    if ((part == BackwardPart::kQueries && wrt != 0) || (part == BackwardPart::kKeys && wrt == 0)) {
      continue;
    }
    if (a.grads[wrt] != nullptr || (any != nullptr && inst->operands() != any->operands())) {
      return Error(
          "%{}: {}: attention-grad ops of one fusion must differ in wrt and share "
          "their operands",
          fusion.name(), Describe(*inst));
    }
    a.grads[wrt] = any = inst.get();
  }
  if (any == nullptr) return Error("%{}: no attention-grad op", fusion.name());
  if (a.by_query() && (a.grads[1] != nullptr || a.grads[2] != nullptr)) {
    return Error(
        "%{}: dq runs by query rows, dk and dv by key rows: a fusion of both takes a kernel for "
        "each part",
        fusion.name());
  }
  return any;
}

// The root `x` comes from (its index in `roots`) and the layout ops from
// that root to `x` (first applied first); root -1 when `x` depends on none.
StatusOr<OutputChain> ChainTo(const ir::Instruction& fusion, const ir::Instruction* x,
                              const std::vector<const ir::Instruction*>& roots) {
  OutputChain c;
  for (size_t r = 0; r < roots.size() && c.root < 0; ++r) {
    std::map<const ir::Instruction*, bool> memo;
    if (ir::DependsOnAny(x, {roots[r]}, memo)) c.root = static_cast<int>(r);
  }
  if (c.root < 0) return c;
  const ir::Instruction* root = roots[c.root];
  for (const ir::Instruction* y = x; y != root; y = y->operand(0)) {
    ir::Opcode o = y->opcode();
    if (o != ir::Opcode::kTranspose && o != ir::Opcode::kReshape && o != ir::Opcode::kConvert &&
        o != ir::Opcode::kCopy) {
      return Error(
          "%{}: output {} is computed from {} by {}: only transpose, reshape, "
          "convert and copy may follow it",
          fusion.name(), Describe(*x), Describe(*root), ir::OpcodeName(o));
    }
    c.chain.push_back(y);
  }
  std::reverse(c.chain.begin(), c.chain.end());
  return c;
}

}  // namespace

std::vector<const OutputChain*> StoresOf(const OutputChain& c) {
  std::vector<const OutputChain*> stores;
  if (c.pieces.empty()) stores.push_back(&c);
  for (const OutputChain& piece : c.pieces) stores.push_back(&piece);
  return stores;
}

StatusOr<std::vector<OutputChain>> FindOutputChains(
    const ir::Instruction& fusion, const std::vector<const ir::Instruction*>& outputs,
    const std::vector<const ir::Instruction*>& roots) {
  std::vector<OutputChain> chains;
  for (const ir::Instruction* out : outputs) {
    const std::vector<const ir::Instruction*> pads = ir::ZeroPadTiles(out);
    if (pads.empty()) {
      ASSIGN_OR_RETURN(OutputChain c, ChainTo(fusion, out, roots));
      chains.push_back(std::move(c));
      continue;
    }
    OutputChain packed;
    for (const ir::Instruction* pad : pads) {
      ASSIGN_OR_RETURN(OutputChain piece, ChainTo(fusion, pad->operand(0), roots));
      if (piece.root < 0) {
        return Error("%{}: output {}: its piece {} comes from no attention op", fusion.name(),
                     Describe(*out), Describe(*pad));
      }
      piece.chain.push_back(pad);
      packed.pieces.push_back(std::move(piece));
    }
    chains.push_back(std::move(packed));
  }
  return chains;
}

// Note [longest-first tiles]: in a causal forward or dq kernel, the block
// of query tile t walks t + 1 key blocks; in the dk + dv kernel, key tile t
// walks tiles - t query blocks. Blocks start in the order of their index, so
// taken head by head with short tiles first, the grid's last wave is of long
// tiles and the multiprocessors idle while a few finish (FlashAttention-3
// schedules longest first for this). The blocks go longest first instead,
// across a group of heads at a time: every head's longest tile, then every
// head's next, ...; the group is as many heads as keep their k and v in L2
// (an 8 MiB budget of the H100's 50 MB: a wave of 400 blocks spans ~12 tile
// levels of 32 heads at T = 1024, D = 64), and it divides batch * heads so
// that the decoding is by constants.
int64_t TileGroupHeads(int64_t batch_heads, int64_t kv_bytes_per_head) {
  constexpr int64_t kL2Budget = 8 << 20;
  const int64_t most = std::max<int64_t>(1, kL2Budget / std::max<int64_t>(1, kv_bytes_per_head));
  int64_t best = 1;
  for (int64_t g = 1; g <= std::min(most, batch_heads); ++g) {
    if (batch_heads % g == 0) best = g;
  }
  return best;
}

bool UseTensorCoreForward(const AttentionForward& a, ir::DType matmul_dtype) {
  return matmul_dtype == ir::DType::kBF16 && a.dim % 16 == 0 && a.dim <= 128;
}

StatusOr<AttentionForward> PlanAttentionForward(const ir::Instruction& fusion) {
  ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
  AttentionForward a;
  RETURN_IF_ERROR(FindForwardOps(fusion, *fused, a));
  const ir::Instruction* scores = a.attn != nullptr ? a.attn : a.lse;
  RETURN_IF_ERROR(CheckForwardShapes(fusion, *scores, a));
  a.q = scores->operand(0);
  a.k = scores->operand(1);
  a.v = a.attn != nullptr ? a.attn->operand(2) : nullptr;
  a.causal = scores->attrs().causal;
  a.scale = scores->attrs().scale;
  // Outputs: chains from the result or the lse, or independent of both.
  a.outputs = FusionOutputs(*fused);
  if (a.attn != nullptr) a.roots.push_back(a.attn);
  if (a.lse != nullptr) a.roots.push_back(a.lse);
  ASSIGN_OR_RETURN(a.chains, FindOutputChains(fusion, a.outputs, a.roots));
  for (size_t out = 0; out < a.outputs.size(); ++out) {
    if (!a.chains[out].pieces.empty()) {
      return Error("%{}: output {} packs several results: only the backward's can", fusion.name(),
                   Describe(*a.outputs[out]));
    }
  }
  a.first_output = static_cast<int64_t>(fused->parameters().size());
  // Note [bf16 attention]: the ops' grad_dtype rounds their matmul operands.
  a.matmul = scores->attrs().grad_dtype;
  if (a.attn != nullptr && a.lse != nullptr && a.lse->attrs().grad_dtype != a.matmul) {
    return Error("%{}: {} and {} round their matmul operands differently", fusion.name(),
                 Describe(*a.lse), Describe(*a.attn));
  }
  a.tensor_cores = a.matmul && UseTensorCoreForward(a, *a.matmul);
  return a;
}

bool UseTensorCoreBackward(const AttentionBackward& a) {
  return a.q->shape().dtype() == ir::DType::kBF16 && a.dim % 16 == 0 && a.dim <= 64;
}

bool HasBothBackwardParts(const ir::Instruction& fusion) {
  bool query = false, key = false;
  if (fusion.called_computation() == nullptr) return false;
  for (const auto& inst : fusion.called_computation()->instructions()) {
    if (inst->opcode() != ir::Opcode::kAttentionGrad) continue;
    (inst->attrs().index == 0 ? query : key) = true;
  }
  return query && key;
}

StatusOr<AttentionBackward> PlanAttentionBackward(const ir::Instruction& fusion,
                                                  BackwardPart part) {
  ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
  AttentionBackward a;
  ASSIGN_OR_RETURN(const ir::Instruction* any, FindGradOps(fusion, *fused, part, a));
  a.q = any->operand(0);
  a.k = any->operand(1);
  a.v = any->operand(2);
  a.d_out = any->operand(3);
  a.lse = any->operand(4);
  a.delta = any->operand(5);
  const ir::Shape& qs = a.q->shape();
  a.batch = qs.dim(0);
  a.heads = qs.dim(1);
  a.tq = qs.dim(2);
  a.dim = qs.dim(3);
  a.tk = a.k->shape().dim(2);
  if (a.dim > kMaxHeadDim) {
    return Error("%{}: {}: head dim {} exceeds {}", fusion.name(), Describe(*any), a.dim,
                 kMaxHeadDim);
  }
  a.causal = any->attrs().causal;
  a.scale = any->attrs().scale;
  a.outputs = FusionOutputs(*fused);
  // Every attention-grad op of the fusion is a root, the other part's too:
  // the kernel stores what comes from its own.
  for (const auto& inst : fused->instructions()) {
    if (inst->opcode() == ir::Opcode::kAttentionGrad) a.roots.push_back(inst.get());
  }
  ASSIGN_OR_RETURN(a.chains, FindOutputChains(fusion, a.outputs, a.roots));
  for (size_t out = 0; out < a.outputs.size(); ++out) {
    if (a.chains[out].root < 0 && a.chains[out].pieces.empty()) {
      return Error("%{}: output {} does not come from an attention-grad op", fusion.name(),
                   Describe(*a.outputs[out]));
    }
  }
  a.first_output = static_cast<int64_t>(fused->parameters().size());
  a.tensor_cores = UseTensorCoreBackward(a);
  return a;
}

}  // namespace gptc::codegen
