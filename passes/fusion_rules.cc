// The rule phases of the fusion pass (see passes/fusion.h for the rules).
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

namespace {

using ir::FusionKind;
using ir::Instruction;
using ir::Opcode;

// Whether every use of `inst` is by a member of `s`, looking through free ops.
bool AllUsesIn(const Planner& p, const Instruction* inst, const InstSet& s) {
  std::vector<const Instruction*> users;
  p.NonFreeUsers(inst, users);
  if (p.computation()->root() == inst) return false;
  return std::all_of(users.begin(), users.end(), [&](auto* u) { return s.contains(u); });
}

// Whether every non-free operand of `inst` is in `s`.
bool AllOperandsIn(const Planner& p, const Instruction* inst, const InstSet& s) {
  std::vector<const Instruction*> sources;
  for (const Instruction* op : inst->operands()) p.NonFreeSources(op, sources);
  return std::all_of(sources.begin(), sources.end(), [&](auto* x) { return s.contains(x); });
}

// Grows `s` with claimable producers carrying `meta` whose uses all lie in `s`
// (masks, layout changes feeding only the region).
void AddOwnedProducers(const Planner& p, InstSet& s, const std::string& meta) {
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<const Instruction*> sources;
    for (const Instruction* m : s) {
      for (const Instruction* op : m->operands()) p.NonFreeSources(op, sources);
    }
    for (const Instruction* x : sources) {
      if (s.contains(x) || !p.Claimable(x) || x->metadata() != meta) continue;
      if (!AllUsesIn(p, x, s)) continue;
      s.insert(x);
      changed = true;
    }
  }
}

// Claimable instructions carrying `meta` reachable from `from` (forward via
// users, or backward via operands), passing through free ops.
InstSet ReachWithMeta(const Planner& p, const std::vector<const Instruction*>& from,
                      const std::string& meta, bool backward) {
  InstSet out;
  std::vector<const Instruction*> stack(from.begin(), from.end());
  while (!stack.empty()) {
    const Instruction* x = stack.back();
    stack.pop_back();
    std::vector<const Instruction*> next;
    if (backward) {
      for (const Instruction* op : x->operands()) p.NonFreeSources(op, next);
    } else {
      p.NonFreeUsers(x, next);
    }
    for (const Instruction* n : next) {
      if (n->metadata() != meta || !p.Claimable(n) || !out.insert(n).second) continue;
      stack.push_back(n);
    }
  }
  return out;
}

bool IsLastTwoTranspose(const Instruction* t) {
  if (t->opcode() != Opcode::kTranspose) return false;
  const auto& perm = t->attrs().dimensions;
  int64_t r = static_cast<int64_t>(perm.size());
  if (r < 2) return false;
  for (int64_t i = 0; i < r - 2; ++i) {
    if (perm[i] != i) return false;
  }
  return perm[r - 2] == r - 1 && perm[r - 1] == r - 2;
}

// The single user of `inst`, or nullptr.
const Instruction* SingleUser(const Planner& p, const Instruction* inst) {
  if (inst->users().size() != 1 || p.computation()->root() == inst) return nullptr;
  return inst->users().front();
}

// Absorbs a chain of single-use converts after `cur`; returns the new end.
const Instruction* AbsorbConverts(Planner& p, int g, const Instruction* cur) {
  for (const Instruction* u = SingleUser(p, cur);
       u != nullptr && u->opcode() == Opcode::kConvert && p.Claimable(u) && p.TryAdd(g, u);
       u = SingleUser(p, cur)) {
    cur = u;
  }
  return cur;
}

bool IsWidening(const Instruction* x) {
  return x->opcode() == Opcode::kConvert &&
         ir::DTypeBytes(x->shape().dtype()) > ir::DTypeBytes(x->operand(0)->shape().dtype());
}

// The other operand of a binary `user` of `value`.
const Instruction* OtherOperand(const Instruction* user, const Instruction* value) {
  return user->operand(0) == value ? user->operand(1) : user->operand(0);
}

}  // namespace

void FuseOptimizer(Planner& p) {
  InstSet s;
  const Instruction* hero = nullptr;
  for (const Instruction* inst : p.optimizer_ops()) {
    if (p.Claimable(inst)) s.insert(inst);
  }
  p.MakeConvex(s);
  for (const Instruction* inst : s) {  // the last in entry order
    if (hero == nullptr || p.pos(inst) > p.pos(hero)) hero = inst;
  }
  if (!s.empty()) p.NewGroup(FusionKind::kOptimizer, hero, s);
}

void FuseGradNorm(Planner& p) {
  // sum_i sum(g_i * g_i) over every parameter gradient: the squares-sums
  // are full reductions of `optimizer.*` ops the optimizer fusion had to
  // leave out (every update depends on the global norm); one horizontal
  // multi-output reduction computes them all, with the norm and clip scale.
  InstSet s;
  for (const Instruction* r : p.WithOpcode(Opcode::kReduce)) {
    if (!p.Claimable(r) || !r->metadata().starts_with("optimizer.")) {
      continue;
    }
    s.insert(r);
    for (const Instruction* op : r->operands()) {
      if (p.Claimable(op) && ir::IsElementwise(op->opcode()) &&
          op->metadata().starts_with("optimizer.") && AllUsesIn(p, op, {r})) {
        s.insert(op);
      }
    }
  }
  if (s.empty()) return;
  // The scalar epilogue (sum of the sums, sqrt, clip scale).
  for (bool grew = true; grew;) {
    grew = false;
    std::vector<const Instruction*> users;
    for (const Instruction* m : s) p.NonFreeUsers(m, users);
    for (const Instruction* u : users) {
      if (s.contains(u) || !p.Claimable(u) || !ir::IsElementwise(u->opcode()) ||
          u->shape().rank() != 0 || !AllOperandsIn(p, u, s)) {
        continue;
      }
      s.insert(u);
      grew = true;
    }
  }
  p.MakeConvex(s);
  if (s.empty()) return;
  const Instruction* hero = *std::min_element(
      s.begin(), s.end(), [&](auto* x, auto* y) { return p.pos(x) < p.pos(y); });
  int g = p.NewGroup(FusionKind::kReduction, hero, s);
  p.groups()[g].name = "optimizer.grad_norm";
  p.groups()[g].metadata = "optimizer.grad_norm";
}

void FuseParameterConverts(Planner& p) {
  // Every convert of a master weight (f32 -> bf16) in one horizontal loop
  // kernel at the start of the step, instead of one kernel per use.
  InstSet s;
  for (const Instruction* c : p.WithOpcode(Opcode::kConvert)) {
    if (p.Claimable(c) && c->operand(0)->opcode() == Opcode::kParameter) {
      s.insert(c);
    }
  }
  if (s.size() < 2) return;
  const Instruction* hero = *std::min_element(
      s.begin(), s.end(), [&](auto* x, auto* y) { return p.pos(x) < p.pos(y); });
  int g = p.NewGroup(FusionKind::kLoop, hero, s);
  p.groups()[g].name = "parameters.bf16";
  p.groups()[g].metadata = "parameters.bf16";
}

void FuseConvertsIntoProducers(Planner& p) {
  // x = <group g>; c = convert(x)  =>  c joins g as one more output (or
  // replaces x's output when c is x's only user). Not into gemms: cuBLASLt
  // writes one result (their epilogue converts are absorbed by FuseGemms).
  for (const Instruction* c : p.WithOpcode(Opcode::kConvert)) {
    if (!p.Claimable(c)) continue;
    std::vector<const Instruction*> sources;
    p.NonFreeSources(c->operand(0), sources);
    if (sources.size() != 1) continue;
    int g = p.group_of(sources.front());
    if (g < 0 || p.groups()[g].kind == FusionKind::kGemm ||
        p.groups()[g].kind == FusionKind::kOptimizer) {
      continue;
    }
    p.TryAdd(g, c);
  }
}

void FuseCrossEntropy(Planner& p) {
  for (const Instruction* ce : p.WithOpcode(Opcode::kSoftmaxCrossEntropy)) {
    if (!p.Claimable(ce)) continue;
    // dlogits: the backward ops of this op's scope computed from its logits.
    std::string meta = "grad." + ce->metadata();
    // The logits, and their clone when remat recomputes them for the
    // backward (passes/remat.h names it `remat.NAME`).
    std::vector<const Instruction*> logits = {ce->operand(0)};
    if (const Instruction* clone =
            p.computation()->FindInstruction("remat." + ce->operand(0)->name())) {
      logits.push_back(clone);
    }
    InstSet s = ReachWithMeta(p, logits, meta, /*backward=*/false);
    s.insert(ce);
    // bf16 logits are widened in the kernel (Note [bf16 logits] in
    // mixed_precision.cc): the f32 [B, T, V] copy is never stored.
    for (const Instruction* l : logits) {
      for (const Instruction* x = l;
           x->opcode() == Opcode::kConvert && p.Claimable(x) && AllUsesIn(p, x, s);
           x = x->operand(0)) {
        s.insert(x);
      }
    }
    AddOwnedProducers(p, s, meta);
    // dlogits leave the kernel in the dtype the backward dots read.
    for (bool grew = true; grew;) {
      grew = false;
      std::vector<const Instruction*> users;
      for (const Instruction* m : s) p.NonFreeUsers(m, users);
      for (const Instruction* u : users) {
        if (u->opcode() != Opcode::kConvert || s.contains(u) || !p.Claimable(u)) continue;
        s.insert(u);
        grew = true;
      }
    }
    p.MakeConvex(s);
    if (!s.contains(ce)) s = {ce};
    p.NewGroup(FusionKind::kCrossEntropy, ce, s);
  }
}

namespace {

// Whether `x` is a bias add: x = add(y, broadcast(b)) along the last dim.
// A convert to fewer bytes an element (the rounding of an f32 to bf16).
bool IsNarrowing(const Instruction* convert) {
  return ir::DTypeBytes(convert->shape().dtype()) <
         ir::DTypeBytes(convert->operand(0)->shape().dtype());
}

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
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<const Instruction*> sources;
    for (const Instruction* m : s) {
      for (const Instruction* op : m->operands()) p.NonFreeSources(op, sources);
    }
    for (const Instruction* x : sources) {
      Opcode o = x->opcode();
      // Not a rounding convert: a gemm writes the bf16 projection with its
      // bias (Note [bf16 attention projection] in mixed_precision.h).
      bool layout = o == Opcode::kSlice || o == Opcode::kReshape || o == Opcode::kTranspose ||
                    (o == Opcode::kConvert && !IsNarrowing(x)) || IsBiasAdd(x);
      if (s.contains(x) || !layout || !p.Claimable(x) || !AllUsesIn(p, x, s)) continue;
      s.insert(x);
      changed = true;
    }
  }
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
// the dq kernel copying dk's and dv's elements, it once made dq 0.29 ms
// slower a call on an H100). No [B, H, T, S] tensor is stored anywhere in
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
            (o != Opcode::kConvert || IsNarrowing(x))) {
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

std::vector<Instruction*> AttentionOps(const ir::Computation& entry) {
  std::vector<Instruction*> ops;
  const auto& insts = entry.instructions();
  for (size_t i = 0; i < insts.size(); ++i) {
    if (i + kPrefetchAhead < insts.size()) PrefetchInstruction(insts[i + kPrefetchAhead].get());
    const Instruction* inst = insts[i].get();
    const Opcode o = inst->opcode();
    if (o == Opcode::kAttention || o == Opcode::kAttentionLse || o == Opcode::kAttentionGrad) {
      ops.push_back(insts[i].get());
    }
  }
  return ops;
}

bool ReadRoundedAttentionOperands(ir::Computation& entry,
                                  std::span<Instruction* const> attention_ops) {
  // Each attention (or attention-lse) operand and the 16-bit copy the
  // backward keeps of it.
  std::map<Instruction*, std::vector<std::pair<int64_t, Instruction*>>> reads;
  std::vector<Instruction*> readers;  // in order
  std::set<Instruction*> rounded;
  for (Instruction* inst : attention_ops) {
    const Opcode o = inst->opcode();
    if ((o != Opcode::kAttention && o != Opcode::kAttentionLse) || !inst->attrs().grad_dtype) {
      continue;
    }
    const ir::DType narrow = *inst->attrs().grad_dtype;
    for (int64_t i = 0; i < inst->operand_count(); ++i) {
      const Instruction* x = inst->operand(i);
      if (ir::DTypeBytes(narrow) >= ir::DTypeBytes(x->shape().dtype())) continue;
      for (Instruction* u : x->users()) {
        if (u->opcode() == Opcode::kConvert && u->shape().dtype() == narrow) {
          if (!reads.contains(inst)) readers.push_back(inst);
          reads[inst].push_back({i, u});
          rounded.insert(u);
          break;
        }
      }
    }
  }
  if (reads.empty()) return false;
  // The copies move up to just before the first op that will read them (the
  // backward made them after the forward); their operands come first anyway.
  std::vector<Instruction*> order;
  std::set<Instruction*> placed;
  for (const auto& inst : entry.instructions()) {
    if (auto it = reads.find(inst.get()); it != reads.end()) {
      for (auto& [i, r] : it->second) {
        if (placed.insert(r).second) order.push_back(r);
      }
    }
    if (!rounded.contains(inst.get())) order.push_back(inst.get());
  }
  entry.ReorderInstructions(order);
  // One widening of each copy, shared by the attention and its lse.
  std::map<Instruction*, Instruction*> widened;
  for (Instruction* op : readers) {
    for (auto& [i, r] : reads[op]) {
      Instruction*& wide = widened[r];
      if (wide == nullptr) {
        const Instruction* x = op->operand(i);
        ir::Attrs attrs;
        auto convert = std::make_unique<Instruction>(entry.UniqueName(r->name() + ".widened"),
                                                     Opcode::kConvert, x->shape(),
                                                     std::vector<Instruction*>{r}, attrs);
        convert->set_metadata(op->metadata());
        wide = entry.InsertInstructionBefore(std::move(convert), op);
      }
      op->ReplaceOperandWith(i, wide);
    }
  }
  return true;
}

bool SplitAttentionOperandChains(ir::Computation& entry,
                                 std::span<Instruction* const> attention_ops) {
  // The backward's kernels: dq alone, dk and dv of the same operands together.
  std::vector<std::vector<Instruction*>> kernels;
  for (Instruction* inst : attention_ops) {
    if (inst->opcode() != Opcode::kAttentionGrad) continue;
    auto same = std::find_if(kernels.begin(), kernels.end(), [&](const auto& k) {
      return (k[0]->attrs().index == 0) == (inst->attrs().index == 0) &&
             k[0]->operands() == inst->operands();
    });
    if (same == kernels.end()) {
      kernels.push_back({inst});
    } else {
      same->push_back(inst);
    }
  }
  bool changed = false;
  for (const std::vector<Instruction*>& ops : kernels) {
    Instruction* first = ops[0];
    auto is_op = [&](const Instruction* u) {
      return std::find(ops.begin(), ops.end(), u) != ops.end();
    };
    for (int64_t i = 0; i < first->operand_count(); ++i) {
      // Down to the narrowest value: a rounding convert is where the chain
      // starts (the bf16 projection, not the f32 sum it rounds).
      std::vector<Instruction*> chain;  // operand first
      Instruction* x = first->operand(i);
      for (; x->opcode() == Opcode::kTranspose || x->opcode() == Opcode::kReshape ||
             x->opcode() == Opcode::kSlice || (x->opcode() == Opcode::kConvert && !IsNarrowing(x));
           x = x->operand(0)) {
        chain.push_back(x);
      }
      // A wider source (an f32 projection the forward rounds) would be read,
      // and kept for the backward, instead of the 16-bit values it reads now.
      if (chain.empty() ||
          ir::DTypeBytes(x->shape().dtype()) > ir::DTypeBytes(first->operand(i)->shape().dtype())) {
        continue;
      }
      // Shared: some op of the chain has a reader besides the next one down
      // the chain (or, for the operand itself, this kernel's ops).
      bool shared = false;
      for (size_t c = 0; c < chain.size(); ++c) {
        for (const Instruction* u : chain[c]->users()) {
          shared |= c == 0 ? !is_op(u) : u != chain[c - 1];
        }
      }
      if (!shared) continue;
      Instruction* below = x;
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        const Instruction& c = **it;
        auto clone =
            std::make_unique<Instruction>(entry.UniqueName(c.name()), c.opcode(), c.shape(),
                                          std::vector<Instruction*>{below}, c.attrs());
        clone->set_metadata(c.metadata());
        below = entry.InsertInstructionBefore(std::move(clone), first);
      }
      const Instruction* operand = first->operand(i);
      for (Instruction* op : ops) {
        for (int64_t k = 0; k < op->operand_count(); ++k) {
          if (op->operand(k) == operand) op->ReplaceOperandWith(k, below);
        }
      }
      // The last kernel to take a copy leaves the original to no one.
      for (Instruction* c : chain) {
        if (!c->users().empty() || entry.root() == c) break;
        entry.RemoveInstruction(c);
      }
      changed = true;
    }
  }
  return changed;
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

namespace {

// Note [narrow gemm results]: a bf16 dot whose f32 widening only feeds
// kernels fused later (a layer-norm backward's rows, a loop: not a gemm, the
// optimizer, an attention kernel or the entry's outputs) leaves the widening
// to them. cuBLASLt then writes bf16, half the bytes, and the consumer reads
// half; the value is the same (the widening of a bf16 is exact). The
// buffer between them halves too: at gpt2-124m's peak the lm_head weight
// gradient (f32 [V, C], 147 MiB) lives from its gemm to the end of the
// backward, where the embedding's gradient is added to it.
bool WidenedByConsumers(const Planner& p, const Instruction* convert) {
  if (p.computation()->root() == convert) return false;
  std::vector<const Instruction*> users;
  p.NonFreeUsers(convert, users);
  return !users.empty() && std::all_of(users.begin(), users.end(), [&](const Instruction* u) {
    const Opcode o = u->opcode();
    return p.group_of(u) < 0 && !u->metadata().starts_with("optimizer") &&
           (ir::IsElementwise(o) || o == Opcode::kReduce || o == Opcode::kReshape ||
            o == Opcode::kTranspose);
  });
}

}  // namespace

void FuseGemms(Planner& p) {
  for (const Instruction* d : p.WithOpcode(Opcode::kDot)) {
    if (!p.Claimable(d)) continue;
    int g = p.NewGroup(FusionKind::kGemm, d, {d});
    // Operand layouts cuBLASLt expresses: reshapes and last-two-dims transposes.
    for (const Instruction* op : d->operands()) {
      for (const Instruction* x = op;; x = x->operand(0)) {
        if (x->opcode() != Opcode::kReshape && !IsLastTwoTranspose(x)) break;
        if (!p.Claimable(x) || !AllUsesIn(p, x, p.groups()[g].members) || !p.TryAdd(g, x)) break;
      }
    }
    // Bias gradient: a column sum of an operand over its contracting dims.
    if (d->attrs().dot.lhs_batch.empty()) FuseBiasGradients(p, g, d);
    // Epilogue: converts, bias, GELU, residual, converts; or a 2-D transpose.
    const Instruction* cur = AbsorbConverts(p, g, d);
    const Instruction* u = SingleUser(p, cur);
    // Note [bias of D's type]: the group before the bias, and the bias's type.
    std::optional<InstSet> before_bias;
    ir::DType bias_dtype = ir::DType::kF32;
    if (u != nullptr && u->opcode() == Opcode::kAdd && p.Claimable(u)) {
      const Instruction* b = OtherOperand(u, cur);
      int64_t rank = cur->shape().rank();
      if (b->opcode() == Opcode::kBroadcast && b->operand(0)->shape().rank() == 1 &&
          b->attrs().dimensions == std::vector<int64_t>{rank - 1}) {
        InstSet members = p.groups()[g].members;
        if (p.TryAdd(g, u)) {
          before_bias = std::move(members);
          // A bias widened from D's type is widened by cuBLASLt: the convert
          // joins the gemm (Note [bf16 GELU epilogue] in mixed_precision.h).
          const Instruction* bias = b->operand(0);
          if (IsWidening(bias) && p.Claimable(bias) && AllUsesIn(p, bias, p.groups()[g].members) &&
              p.TryAdd(g, bias)) {
            bias = bias->operand(0);
          }
          bias_dtype = bias->shape().dtype();
          cur = AbsorbConverts(p, g, u);
        }
      }
    }
    // Note [GELU epilogues]: the GELU (with the pre-activation as aux), or,
    // after a bare dot, the GELU backward reading that aux.
    std::vector<const Instruction*> gelu = MatchGeluEpilogue(p, cur, p.groups()[g].members);
    if (gelu.empty() && !before_bias) gelu = MatchGeluGradEpilogue(p, cur);
    bool activation = false;
    if (!gelu.empty()) {
      InstSet s = p.groups()[g].members;
      s.insert(gelu.begin(), gelu.end());
      if (!p.CreatesCycle(s)) {
        for (const Instruction* x : gelu) p.TryAdd(g, x);
        cur = AbsorbConverts(p, g, gelu.back());
        activation = true;
      }
    }
    // A residual, not after an activation (cuBLASLt adds C before it).
    u = SingleUser(p, cur);
    if (!activation && u != nullptr && u->opcode() == Opcode::kAdd && p.Claimable(u) &&
        OtherOperand(u, cur)->shape() == cur->shape() && OtherOperand(u, cur) != cur &&
        p.TryAdd(g, u)) {
      cur = AbsorbConverts(p, g, u);
    }
    // Note [bias of D's type]: cuBLASLt's bias has D's type (cublasLt.h,
    // BIAS_DATA_TYPE); an f32 bias before a bf16 result (GELU then a bf16
    // store) stays out of the gemm, with the rest of the epilogue after it.
    if (before_bias && bias_dtype != cur->shape().dtype()) {
      p.ShrinkTo(g, *before_bias);
      continue;
    }
    u = SingleUser(p, cur);
    if (cur == d && d->shape().rank() == 2 && u != nullptr && u->opcode() == Opcode::kTranspose &&
        p.Claimable(u) && p.TryAdd(g, u)) {
      AbsorbConverts(p, g, u);
    }
    if (IsWidening(cur) && cur->operand(0) == d && WidenedByConsumers(p, cur)) {
      InstSet members = p.groups()[g].members;
      members.erase(cur);
      p.ShrinkTo(g, members);
    }
  }
}

namespace {

// Whether `inst` is one of the forward's own ops: not the backward's
// (`grad.*`), nor a recomputation remat made for it (`remat.*`).
bool IsForwardOp(const Instruction* inst) {
  return !inst->metadata().starts_with("grad") && !inst->metadata().starts_with("remat");
}

// Grows a row-reduction group over the row-local region: elementwise ops of
// the input or row shape, and other row reductions of the same input shape.
// A forward group takes no remat clone: remat made it so that the backward
// computes the value instead of storing it (the layer norm's x-hat from
// x - mean and rstd), and the forward kernel would store it again.
void GrowRowGroup(Planner& p, int g, const std::vector<int64_t>& in_dims,
                  const std::vector<int64_t>& row_dims) {
  const bool forward = IsForwardOp(p.groups()[g].hero);
  // By position (Note [adjacency by position]): only reductions are read.
  const int32_t in_class = p.FindDimsClass(in_dims), row_class = p.FindDimsClass(row_dims);
  auto admissible = [&](int32_t i) {
    if (forward && p.remat_at(i)) return false;
    if (p.opcode_at(i) == Opcode::kReduce) {
      const Instruction* x = p.order()[i];
      return ir::IsRowReduce(*x) && x->operand(0)->shape().dims() == in_dims;
    }
    const int32_t c = p.dims_class_at(i);
    return ir::IsElementwise(p.opcode_at(i)) && c >= 0 && (c == in_class || c == row_class);
  };
  // Rounds over the neighbours of what the last round added, and the
  // candidates refused so far (a later member may make them acyclic; a round
  // that adds nothing ends the growth): each
  // member's neighbours are gathered once, so a region grows in time linear
  // in its size, not quadratic (a 4000-op row-local chain took 13.5 s).
  // By position (Note [adjacency by position]), in entry order (the
  // neighbours are sorted below anyway): growing again after the merges
  // starts from every member of the group.
  std::vector<int32_t> fresh = p.MemberPositions(g);
  std::vector<int32_t> refused;
  while (!fresh.empty()) {
    std::vector<int32_t> near = std::move(refused);
    refused.clear();
    for (int32_t m : fresh) {
      for (std::span<const int32_t> next : {p.sources_at(m), p.users_at(m)}) {
        near.insert(near.end(), next.begin(), next.end());
      }
    }
    fresh.clear();
    p.Count(static_cast<int64_t>(near.size()));
    std::sort(near.begin(), near.end());
    near.erase(std::unique(near.begin(), near.end()), near.end());
    for (int32_t i : near) {
      // Members first: growing again after the merges (in FuseReductions)
      // finds most neighbours inside already.
      int other = p.group_at(i);
      if (other == g || !admissible(i)) continue;
      if (other >= 0) {
        const Group& o = p.groups()[other];
        if (o.kind == FusionKind::kReduction && ir::IsRowReduce(*o.hero) &&
            o.hero->operand(0)->shape().dims() == in_dims) {
          std::vector<int32_t> joining = p.MemberPositions(other);
          if (p.TryMerge(g, other)) {
            fresh.insert(fresh.end(), joining.begin(), joining.end());
          } else {
            refused.push_back(i);
          }
        }
        continue;
      }
      if (!p.ClaimableAt(i)) continue;
      if (p.TryAddAt(g, i)) {
        fresh.push_back(i);
      } else {
        refused.push_back(i);
      }
    }
  }
}

// Adds the elementwise producers of the reduction input's shape.
void GrowProducers(Planner& p, int g, const std::vector<int64_t>& in_dims) {
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<const Instruction*> near;
    for (const Instruction* m : p.groups()[g].members) {
      for (const Instruction* op : m->operands()) p.NonFreeSources(op, near);
    }
    for (const Instruction* x : near) {
      if (!p.Claimable(x) || !ir::IsElementwise(x->opcode()) || x->shape().dims() != in_dims) {
        continue;
      }
      if (p.TryAdd(g, x)) changed = true;
    }
  }
}

// The values group `g` reads from outside.
InstSet Inputs(Planner& p, int g) {
  InstSet in;
  const InstSet& members = p.groups()[g].members;
  for (const Instruction* m : members) {
    std::vector<const Instruction*> sources;
    for (const Instruction* op : m->operands()) p.NonFreeSources(op, sources);
    for (const Instruction* s : sources) {
      if (!members.contains(s)) in.insert(s);
    }
  }
  return in;
}

}  // namespace

namespace {

// Whether `r` sums over every dim but the last (a per-channel column sum of
// a [..., C] value: dgamma, dbeta).
bool IsChannelSum(const Instruction* r) {
  int64_t rank = r->operand(0)->shape().rank();
  if (rank < 2 || r->shape().rank() != 1) return false;
  std::vector<int64_t> dims = r->attrs().dimensions;
  std::sort(dims.begin(), dims.end());
  for (int64_t i = 0; i < rank - 1; ++i) {
    if (i >= static_cast<int64_t>(dims.size()) || dims[i] != i) return false;
  }
  return static_cast<int64_t>(dims.size()) == rank - 1;
}

// Whether `x`, a member of `members`, is computed from a reduction among them.
bool ReadsReductionIn(const Planner& p, const Instruction* x, const InstSet& members) {
  std::vector<const Instruction*> stack = {x};
  InstSet seen;
  while (!stack.empty()) {
    const Instruction* y = stack.back();
    stack.pop_back();
    if (!members.contains(y) || !seen.insert(y).second) continue;
    if (y->opcode() == Opcode::kReduce) return true;
    for (const Instruction* op : y->operands()) p.NonFreeSources(op, stack);
  }
  return false;
}

// Layer-norm backward as one kernel (llm.c's layernorm_backward): the
// channel sums (dgamma, dbeta) join the row reduction computing dx from
// the same [..., C] values; each block adds its partial sums. Not when the
// column sums would read a row statistic computed in the same kernel (a
// rematerialized layer-norm forward merged with its backward): the column
// part runs after the row part and cannot see per-row values that are not
// stored, so such a column sum stays a kernel of its own.
void MergeChannelSumsIntoRows(Planner& p) {
  int n = static_cast<int>(p.groups().size());
  // To a fixed point: a merge can remove the cycle that kept another column
  // sum out (dbeta read the widened dy that dgamma's group reads, and the rows
  // read dgamma's x-hat: with dgamma merged, dbeta can join).
  for (bool merged = true; merged;) {
    merged = false;
    for (int c = 0; c < n; ++c) {
      const Group& col = p.groups()[c];
      if (!col.live || col.kind != FusionKind::kReduction || !IsChannelSum(col.hero)) continue;
      const std::vector<int64_t>& in_dims = col.hero->operand(0)->shape().dims();
      InstSet col_in = Inputs(p, c);
      for (int r = 0; r < n; ++r) {
        const Group& row = p.groups()[r];
        if (!row.live || r == c || row.kind != FusionKind::kReduction ||
            !ir::IsRowReduce(*row.hero) || row.hero->operand(0)->shape().dims() != in_dims) {
          continue;
        }
        InstSet row_in = Inputs(p, r);
        // They read a common input, or the rows read what the column sums
        // computed from it (the widening of a bf16 gemm result both read:
        // Note [narrow gemm results]).
        bool shared =
            std::any_of(col_in.begin(), col_in.end(),
                        [&](auto* x) { return row_in.contains(x) || row.members.contains(x); }) ||
            std::any_of(row_in.begin(), row_in.end(),
                        [&](auto* x) { return col.members.contains(x); });
        bool reads_row_stats = std::any_of(col_in.begin(), col_in.end(), [&](auto* x) {
          return row.members.contains(x) && ReadsReductionIn(p, x, row.members);
        });
        if (shared && !reads_row_stats && p.TryMerge(r, c)) {
          merged = true;
          break;
        }
      }
    }
  }
}

}  // namespace

void FuseReductions(Planner& p) {
  std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>, std::vector<int>> siblings;
  for (const Instruction* r : p.WithOpcode(Opcode::kReduce)) {
    if (!p.Claimable(r)) continue;
    const std::vector<int64_t>& in_dims = r->operand(0)->shape().dims();
    int g = p.NewGroup(FusionKind::kReduction, r, {r});
    if (ir::IsRowReduce(*r)) {
      GrowRowGroup(p, g, in_dims, r->shape().dims());
    } else {
      GrowProducers(p, g, in_dims);
      // Elementwise epilogue on the reduced values (the mean's division).
      for (bool grew = true; grew;) {
        grew = false;
        std::vector<const Instruction*> users;
        for (const Instruction* m : p.groups()[g].members) p.NonFreeUsers(m, users);
        for (const Instruction* u : users) {
          if (p.Claimable(u) && ir::IsElementwise(u->opcode()) &&
              u->shape().dims() == r->shape().dims() && p.TryAdd(g, u)) {
            grew = true;
          }
        }
      }
      siblings[{in_dims, r->attrs().dimensions}].push_back(g);
    }
  }
  // Column sums of the same shape reading a common input share a kernel.
  for (auto& [key, groups] : siblings) {
    for (size_t i = 0; i < groups.size(); ++i) {
      if (!p.groups()[groups[i]].live) continue;
      for (size_t j = i + 1; j < groups.size(); ++j) {
        if (!p.groups()[groups[j]].live) continue;
        InstSet a = Inputs(p, groups[i]), b = Inputs(p, groups[j]);
        bool shared = std::any_of(b.begin(), b.end(), [&](auto* x) { return a.contains(x); });
        if (shared) p.TryMerge(groups[i], groups[j]);
      }
    }
  }
  MergeChannelSumsIntoRows(p);
  // The channel sums may have taken producers the rows read too (x-hat,
  // recomputed from x - mean and rstd); merged, the rows can now take the
  // row-shaped values between (rstd's remat clone).
  for (int g = 0; g < static_cast<int>(p.groups().size()); ++g) {
    const Group& row = p.groups()[g];
    if (row.live && row.kind == FusionKind::kReduction && ir::IsRowReduce(*row.hero)) {
      GrowRowGroup(p, g, row.hero->operand(0)->shape().dims(), row.hero->shape().dims());
    }
  }
}

void FuseLoops(Planner& p) {
  for (size_t i = 0; i < p.order().size(); ++i) {
    // Grouped and free ops are passed over by position, without reading the
    // instruction: on 40k-instruction graphs most are grouped by now, and
    // each read missed the caches.
    if (p.group_at(i) >= 0 || p.free_at(i)) continue;
    const Instruction* x = p.order()[i];
    if (!IsLoopOp(*x) || !p.Claimable(x)) continue;
    std::vector<const Instruction*> sources;
    for (const Instruction* op : x->operands()) p.NonFreeSources(op, sources);
    int joined = -1;
    for (const Instruction* s : sources) {
      int g = p.group_of(s);
      if (g < 0 || p.groups()[g].kind != FusionKind::kLoop || g == joined) continue;
      if (joined < 0) {
        if (p.TryAdd(g, x)) joined = g;
      } else {
        p.TryMerge(joined, g);
      }
    }
    // A reshape no loop kernel computes is a view of its operand: left
    // unfused, it costs nothing, where a kernel of its own would copy it.
    if (joined < 0 && x->opcode() != Opcode::kReshape) p.NewGroup(FusionKind::kLoop, x, {x});
  }
  // Free ops (other than constants) an unfused op reads must be materialized.
  // By position: the instruction is read only when it is needed.
  for (size_t i = 0; i < p.order().size(); ++i) {
    if (!p.free_at(i)) continue;
    const Instruction* x = p.order()[i];
    bool needed = p.computation()->root() == x;
    for (int32_t u : p.readers_at(i)) needed |= !p.free_at(u) && p.group_at(u) < 0;
    if (needed && x->opcode() != Opcode::kConstant) p.NewGroup(FusionKind::kLoop, x, {x});
  }
}

}  // namespace gptc::passes::fusion_internal
