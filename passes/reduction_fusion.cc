// The reduction rule of fusion (passes/reduction_fusion.h).
#include "passes/reduction_fusion.h"

#include <algorithm>
#include <map>
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

// Whether `inst` is one of the forward's own ops: not the backward's, nor a
// recomputation remat made for it.
bool IsForwardOp(const Instruction* inst) { return !inst->role().backward(); }

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

}  // namespace gptc::passes::fusion_internal
