// The attention rules of fusion (passes/attention_fusion.h; Notes
// [attention backward], [packed attention gradient]).
#include "passes/attention_fusion.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/ir/patterns.h"
#include "passes/fusion_planner.h"

namespace gptc::passes::fusion_internal {

using ir::FusionKind;
using ir::Instruction;
using ir::Opcode;

namespace {

// Whether `x` is a bias add: x = add(y, broadcast(b)) along the last dim.
bool IsBiasAdd(const Instruction* x) {
  if (x->opcode() != Opcode::kAdd) return false;
  int64_t rank = x->shape().rank();
  for (const Instruction* b : x->operands()) {
    if (b->opcode() == Opcode::kBroadcast && b->operand(0)->shape().rank() == 1 &&
        b->attrs().dimensions == std::vector<int64_t>{rank - 1}) {
      return true;
    }
  }
  return false;
}

// Grows `s` with the layout chains (slice, reshape, transpose, convert) and
// the bias add producing q, k, v, when nothing else reads them: the
// attention kernels load q, k, v out of the packed projection and add its
// bias on the fly (remat clones of these chains included).
void AddQkvProducers(const Planner& p, InstSet& s) {
  AddOwnedSources(p, s, [&](const Instruction* x) {
    const Opcode o = x->opcode();
    // Not a rounding convert: a gemm writes the bf16 projection with its
    // bias (Note [bf16 attention projection] in mixed_precision.h).
    const bool layout = o == Opcode::kSlice || o == Opcode::kReshape || o == Opcode::kTranspose ||
                        (o == Opcode::kConvert && !ir::IsNarrowingConvert(x)) || IsBiasAdd(x);
    return layout && p.Claimable(x);
  });
}

}  // namespace

// Note [attention backward]: the backward of attention is the flash ops of
// Note [flash attention ops] (passes/autodiff_attention.h). attention-lse
// joins the forward's kernel (which has the scores' row max and sum), the
// attention-grad ops with wrt=k and wrt=v of the same operands share one
// kernel (one key block per block: s, p, dp recomputed once for both) and
// wrt=q gets one of its own (one query block per block); delta is a row
// reduction of the reduction rule. Operand chains (the slices of the bf16
// projection, the layout of do) join a backward kernel when nothing else
// reads them (each backward kernel gets its own copy of shared ones: Note
// [per-kernel operand chains]);
// outputs leave through transposes, reshapes and converts, as the forward's,
// and the two kernels write the packed [B, T, 3C] gradient of the qkv
// projection themselves (Note [packed attention gradient]; as an epilogue of
// the dq kernel copying dk's and dv's elements, it made dq slower on an
// H100: docs/PERFORMANCE.md, the Notes' measurements). No [B, H, T, S] tensor is stored anywhere in
// the step.
void FuseAttention(Planner& p) {
  for (const Instruction* a : p.WithOpcode(Opcode::kAttention)) {
    if (!p.Claimable(a)) continue;
    int g = p.NewGroup(FusionKind::kAttention, a, {a});
    // The backward's row statistics of the same scores. They join last: the
    // group then spans from the forward to the backward, and every cycle
    // check after would walk all that lies between (gpt2-1558m: most of
    // the fusion pass). The operand producers count their uses by them.
    std::vector<const Instruction*> lses;
    for (const Instruction* u : a->operand(0)->users()) {
      if (u->opcode() == Opcode::kAttentionLse && u->operand(1) == a->operand(1) &&
          u->attrs().causal == a->attrs().causal && u->attrs().scale == a->attrs().scale &&
          p.Claimable(u)) {
        lses.push_back(u);
      }
    }
    // q, k, v read straight out of the packed projection (widened from its
    // bf16 copy: Note [bf16 attention projection] in mixed_precision.h).
    for (const Instruction* op : a->operands()) {
      for (const Instruction* x = op;; x = x->operand(0)) {
        Opcode o = x->opcode();
        if (o != Opcode::kTranspose && o != Opcode::kReshape && o != Opcode::kSlice &&
            (o != Opcode::kConvert || ir::IsNarrowingConvert(x))) {
          break;
        }
        if (!p.Claimable(x) || !p.TryAdd(g, x)) break;
      }
    }
    InstSet grown = p.groups()[g].members;
    grown.insert(lses.begin(), lses.end());
    AddQkvProducers(p, grown);
    for (const Instruction* u : lses) grown.erase(u);
    std::vector<const Instruction*> joining(grown.begin(), grown.end());
    p.SortByPosition(joining);
    for (auto it = joining.rbegin(); it != joining.rend(); ++it) {
      if (p.group_of(*it) != g) p.TryAdd(g, *it);  // users first
    }
    // The output written in [B, T, H*D].
    for (const Instruction* u = SingleUser(p, a);
         u != nullptr &&
         (u->opcode() == Opcode::kTranspose || u->opcode() == Opcode::kReshape ||
          u->opcode() == Opcode::kConvert) &&
         p.Claimable(u) && p.TryAdd(g, u);
         u = SingleUser(p, u)) {
    }
    for (const Instruction* u : lses) p.TryAdd(g, u);
  }
}

// Note [packed attention gradient]: the gradient of the qkv projection is
// the concatenation of dq, dk and dv in [B, T, 3C] (autodiff's slice rule:
// zero pads summed). A loop kernel packing the three cost a read and a write
// of the whole gradient (144 MiB a layer at gpt2-124m b16, f32 then); when
// the pads' operands are the outputs of a dq kernel and a dk + dv kernel
// (and nothing else reads them), the two groups, the pads and the adds
// become one fusion, which codegen runs as two kernels writing their pieces
// of the packed result: dk + dv, then dq (Note [multi-kernel instructions]
// in compiler/codegen/kernel_spec.h).
void PackAttentionGradients(Planner& p) {
  for (const Instruction* dq : p.WithOpcode(Opcode::kAttentionGrad)) {
    const int g = p.group_of(dq);
    if (dq->attrs().index != 0 || g < 0) continue;
    // The end of dq's output chain in its group, the pad over it, and the
    // packed sum above that.
    const Instruction* end = dq;
    for (const Instruction* u = SingleUser(p, end); u != nullptr && p.group_of(u) == g;
         u = SingleUser(p, u)) {
      end = u;
    }
    const Instruction* packed = SingleUser(p, end);
    if (packed == nullptr || packed->opcode() != Opcode::kPad) continue;
    for (const Instruction* u = SingleUser(p, packed); u != nullptr && u->opcode() == Opcode::kAdd;
         u = SingleUser(p, u)) {
      packed = u;
    }
    std::vector<const Instruction*> adds;
    const std::vector<const Instruction*> pads = ir::ZeroPadTiles(packed, &adds);
    if (pads.empty()) continue;
    // Every pad over the single-use output of one of two attention groups:
    // dq's and a dk + dv one.
    int other = -1;
    bool fits = true;
    InstSet all = p.groups()[g].members;
    for (const Instruction* pad : pads) {
      const Instruction* x = pad->operand(0);
      const int h = p.group_of(x);
      fits = fits && h >= 0 && p.groups()[h].kind == FusionKind::kAttention &&
             SingleUser(p, x) == pad && p.Claimable(pad) && (h == g || other < 0 || h == other);
      if (!fits) break;
      if (h != g) other = h;
      all.insert(pad);
    }
    for (const Instruction* add : adds) fits = fits && p.Claimable(add);
    if (!fits || other < 0) continue;
    all.insert(p.groups()[other].members.begin(), p.groups()[other].members.end());
    all.insert(adds.begin(), adds.end());
    if (p.CreatesCycle(all)) continue;
    if (!p.TryMerge(g, other)) continue;
    std::vector<const Instruction*> joining(pads.begin(), pads.end());
    joining.insert(joining.end(), adds.begin(), adds.end());
    p.SortByPosition(joining);
    for (const Instruction* x : joining) p.TryAdd(g, x);
  }
}

void FuseAttentionGrads(Planner& p) {
  // An attention-lse that no attention of the same q, k took in (IR that
  // asks only for the statistics): a kernel of its own, the forward's loop
  // without v.
  for (const Instruction* a : p.WithOpcode(Opcode::kAttentionLse)) {
    if (p.Claimable(a)) {
      p.NewGroup(FusionKind::kAttention, a, {a});
    }
  }
  for (const Instruction* a : p.WithOpcode(Opcode::kAttentionGrad)) {
    if (!p.Claimable(a)) continue;
    int g = p.NewGroup(FusionKind::kAttention, a, {a});
    if (a->attrs().index != 0) {  // dk and dv of the same operands share the key blocks
      for (const Instruction* u : a->operand(0)->users()) {
        if (u != a && u->opcode() == Opcode::kAttentionGrad && u->attrs().index != 0 &&
            u->attrs().index != a->attrs().index && u->operands() == a->operands() &&
            p.Claimable(u)) {
          p.TryAdd(g, u);
          break;
        }
      }
    }
    // Layout chains of the operands that only this kernel reads.
    InstSet members = p.groups()[g].members;
    for (const Instruction* m : members) {
      for (const Instruction* op : m->operands()) {
        for (const Instruction* x = op;; x = x->operand(0)) {
          Opcode o = x->opcode();
          if (o != Opcode::kTranspose && o != Opcode::kReshape && o != Opcode::kConvert &&
              o != Opcode::kSlice) {
            break;
          }
          if (!p.Claimable(x) || !AllUsesIn(p, x, p.groups()[g].members) || !p.TryAdd(g, x)) {
            break;
          }
        }
      }
    }
    for (const Instruction* m : members) {
      for (const Instruction* u = SingleUser(p, m);
           u != nullptr &&
           (u->opcode() == Opcode::kTranspose || u->opcode() == Opcode::kReshape ||
            u->opcode() == Opcode::kConvert) &&
           p.Claimable(u) && p.TryAdd(g, u);
           u = SingleUser(p, u)) {
      }
    }
  }
  PackAttentionGradients(p);
}

}  // namespace gptc::passes::fusion_internal
