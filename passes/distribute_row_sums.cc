#include "passes/distribute_row_sums.h"

#include <algorithm>
#include <map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "compiler/ir/builder.h"
#include "compiler/ir/patterns.h"

namespace gptc::passes {

using ir::DType;
using ir::Instruction;
using ir::Opcode;

namespace {

// coefficient · factor · Σ summand (no factor: 1).
struct Term {
  double coefficient = 1;
  Instruction* summand = nullptr;
  Instruction* factor = nullptr;
};

// The dims a reduce keeps, in order: what a broadcast of a row value maps.
std::vector<int64_t> KeptDims(const Instruction& reduce) {
  const std::vector<int64_t>& reduced = reduce.attrs().dimensions;
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < reduce.operand(0)->shape().rank(); ++d) {
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) kept.push_back(d);
  }
  return kept;
}

// x when `b` broadcasts an f32 x of the reduce's shape along its dims.
Instruction* RowFactor(const Instruction* b, const Instruction& reduce) {
  if (b->opcode() != Opcode::kBroadcast) return nullptr;
  Instruction* x = b->operand(0);
  if (x->shape() != reduce.shape() || b->attrs().dimensions != KeptDims(reduce)) return nullptr;
  return x;
}

// Note [distributed row sums]: `e` as a sum of terms, through adds,
// subtractions, negations and products with a row factor.
void Expand(Instruction* e, double sign, const Instruction& reduce, int depth,
            std::vector<Term>& terms) {
  if (depth < 8) {
    switch (e->opcode()) {
      case Opcode::kAdd:
      case Opcode::kSub:
        Expand(e->operand(0), sign, reduce, depth + 1, terms);
        Expand(e->operand(1), e->opcode() == Opcode::kSub ? -sign : sign, reduce, depth + 1, terms);
        return;
      case Opcode::kNeg:
        Expand(e->operand(0), -sign, reduce, depth + 1, terms);
        return;
      case Opcode::kMul:
        for (int side = 0; side < 2; ++side) {
          if (Instruction* f = RowFactor(e->operand(side), reduce)) {
            terms.push_back({sign, e->operand(1 - side), f});
            return;
          }
        }
        break;
      default:
        break;
    }
  }
  terms.push_back({sign, e, nullptr});
}

// Whether `e` is x − mean(x) over the reduce's dims: x minus the broadcast
// of Σx / n (layer norm's centered input), whose sum is zero. Summed, it
// is rounding noise of the cancellation, which no kernel should be asked
// to reproduce.
bool IsCentered(const Instruction* e, const Instruction& reduce) {
  if (e->opcode() != Opcode::kSub) return false;
  const Instruction* mean = RowFactor(e->operand(1), reduce);
  if (mean == nullptr || mean->opcode() != Opcode::kDiv) return false;
  const Instruction* sum = mean->operand(0);
  if (sum->opcode() != Opcode::kReduce || sum->attrs().reduce_kind != ir::ReduceKind::kSum ||
      sum->operand(0) != e->operand(0) || sum->attrs().dimensions != reduce.attrs().dimensions) {
    return false;
  }
  double n = 1;
  for (int64_t d : reduce.attrs().dimensions) n *= static_cast<double>(e->shape().dim(d));
  return ir::IsSplat(mean->operand(1), n);
}

// Whether `x` is computed from a reduce (a bounded walk up its operands).
bool FromReduce(const Instruction* x) {
  std::vector<const Instruction*> work{x};
  std::unordered_set<const Instruction*> seen{x};
  while (!work.empty() && seen.size() < 64) {
    const Instruction* i = work.back();
    work.pop_back();
    if (i->opcode() == Opcode::kReduce) return true;
    for (const Instruction* o : i->operands()) {
      if (seen.insert(o).second) work.push_back(o);
    }
  }
  return false;
}

// Note [distributed row sums] for one f32 sum, when it pays.
StatusOr<bool> Distribute(ir::Computation& computation, Instruction* reduce) {
  std::vector<Term> expanded;
  Expand(reduce->operand(0), 1.0, *reduce, 0, expanded);
  bool pays = false;
  for (const Term& t : expanded) pays |= t.factor != nullptr && FromReduce(t.factor);
  if (!pays) return false;
  // Like terms (the same summand and factor) add their coefficients.
  std::vector<Term> terms;
  std::map<std::pair<const Instruction*, const Instruction*>, size_t> index;
  for (const Term& t : expanded) {
    auto [it, added] = index.emplace(std::make_pair(t.summand, t.factor), terms.size());
    if (added) {
      terms.push_back(t);
    } else {
      terms[it->second].coefficient += t.coefficient;
    }
  }
  ir::Builder b(&computation);
  b.set_insertion_point(reduce);
  b.set_origin(*reduce);
  b.set_name_prefix(reduce->name());
  const std::vector<int64_t> row = reduce->shape().dims();
  Instruction* total = nullptr;
  for (const Term& t : terms) {
    if (t.coefficient == 0 || IsCentered(t.summand, *reduce)) continue;
    ASSIGN_OR_RETURN(Instruction * v, b.Reduce(t.summand, reduce->attrs().dimensions,
                                               ir::ReduceKind::kSum, DType::kF32));
    if (t.factor != nullptr) {
      ASSIGN_OR_RETURN(v, b.Binary(Opcode::kMul, v, t.factor));
    }
    if (t.coefficient == -1) {
      ASSIGN_OR_RETURN(v, b.Unary(Opcode::kNeg, v));
    } else if (t.coefficient != 1) {
      ASSIGN_OR_RETURN(Instruction * c, b.ScalarConstant(DType::kF32, t.coefficient));
      ASSIGN_OR_RETURN(c, b.Broadcast(c, row, {}));
      ASSIGN_OR_RETURN(v, b.Binary(Opcode::kMul, v, c));
    }
    if (total == nullptr) {
      total = v;
    } else {
      ASSIGN_OR_RETURN(total, b.Binary(Opcode::kAdd, total, v));
    }
  }
  if (total == nullptr) {
    ASSIGN_OR_RETURN(Instruction * zero, b.ScalarConstant(DType::kF32, 0));
    ASSIGN_OR_RETURN(total, b.Broadcast(zero, row, {}));
  }
  reduce->ReplaceAllUsesWith(total);
  return true;
}

}  // namespace

StatusOr<bool> DistributeRowSums::Run(ir::Module& module) {
  bool changed = false;
  for (const auto& computation : module.computations()) {
    std::vector<Instruction*> sums;
    for (const auto& inst : computation->instructions()) {
      Instruction* r = inst.get();
      if (r->opcode() == Opcode::kReduce && r->attrs().reduce_kind == ir::ReduceKind::kSum &&
          r->shape().dtype() == DType::kF32 && r->operand(0)->shape().dtype() == DType::kF32 &&
          r != computation->root() && !r->users().empty()) {
        sums.push_back(r);
      }
    }
    for (Instruction* r : sums) {
      ASSIGN_OR_RETURN(bool c, Distribute(*computation, r));
      changed |= c;
    }
  }
  return changed;
}

}  // namespace gptc::passes
