#include "passes/simplify.h"

#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "compiler/eval/evaluator.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/patterns.h"
#include "compiler/ir/shape_inference.h"
#include "passes/dce.h"

namespace gptc::passes {

namespace {

using ir::DType;
using ir::Instruction;
using ir::IsSplat;
using ir::Opcode;

// A rule looks at one instruction and returns the value that replaces it, or
// nullptr when it does not apply. It builds new instructions only with `b`,
// which inserts them right before `inst` and gives them its metadata, and only
// when it returns them.
using Match = StatusOr<Instruction*>;
using RewriteFn = Match (*)(Instruction& inst, ir::Builder& b);

struct Rule {
  std::optional<Opcode> opcode;  // nullopt: every opcode
  RewriteFn rewrite;
};

constexpr Instruction* kNoMatch = nullptr;

// ---------------------------------------------------------------------------
// Matchers.

bool IsIdentityPermutation(std::span<const int64_t> dims) {
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// Builds `opcode(operands)` in place of `like`, named after it.
Match Make(Instruction& like, ir::Builder& b, Opcode opcode, std::vector<Instruction*> operands,
           ir::Attrs attrs, const ir::Shape& declared) {
  return b.Build(opcode, std::move(operands), std::move(attrs), declared, nullptr, like.name());
}

// ---------------------------------------------------------------------------
// Constant folding.

bool IsFoldable(Opcode opcode) {
  switch (opcode) {
    case Opcode::kBroadcast:
    case Opcode::kReshape:
    case Opcode::kTranspose:
    case Opcode::kSlice:
    case Opcode::kPad:
    case Opcode::kConcatenate:
    case Opcode::kReduce:
      return true;
    default:
      return ir::IsElementwise(opcode);
  }
}

// op(constants...) => constant, when the result has at most kMaxFoldElements.
// The value comes from the reference evaluator running `op` alone, so it is
// bit for bit what the unfolded graph computes (f32 mode, 16-bit rounding).
Match FoldConstants(Instruction& inst, ir::Builder& b) {
  if (!IsFoldable(inst.opcode()) || inst.operand_count() == 0) return kNoMatch;
  if (inst.shape().is_tuple() || inst.shape().num_elements() > Simplify::kMaxFoldElements) {
    return kNoMatch;
  }
  for (const Instruction* op : inst.operands()) {
    if (op->opcode() != Opcode::kConstant) return kNoMatch;
  }
  ir::Module scratch("fold");
  ir::Computation* c = scratch.AddComputation("fold");
  scratch.set_entry(c);
  ir::Builder sb(c);
  std::vector<Instruction*> params;
  std::vector<eval::Literal> args;
  for (int64_t i = 0; i < inst.operand_count(); ++i) {
    const Instruction* op = inst.operand(i);
    ASSIGN_OR_RETURN(Instruction * p, sb.Parameter(i, op->shape()));
    params.push_back(p);
    args.push_back(eval::Literal{op->shape(), op->attrs().literal, {}});
  }
  ASSIGN_OR_RETURN(Instruction * op, sb.Build(inst.opcode(), params, inst.attrs(), inst.shape()));
  c->set_root(op);
  StatusOr<eval::Literal> value = eval::EvaluateComputation(*c, args);
  if (!value.ok()) return value.status().WithPrefix("%" + inst.name());
  // A value the dtype cannot hold (e.g. an out-of-range convert) stays unfolded.
  if (!ir::CheckLiteralValues(inst.shape().dtype(), value->values).ok()) return kNoMatch;
  ir::Attrs attrs;
  attrs.literal = std::move(value->values);
  return Make(inst, b, Opcode::kConstant, {}, std::move(attrs), inst.shape());
}

// ---------------------------------------------------------------------------
// The rules, grouped by the opcode they rewrite. The first that matches wins.

const Rule kRules[] = {
    // x + 0 => x;  0 + x => x  (see Note [float identities] in simplify.h)
    {Opcode::kAdd,
     [](Instruction& i, ir::Builder&) -> Match {
       if (IsSplat(i.operand(1), 0)) return i.operand(0);
       if (IsSplat(i.operand(0), 0)) return i.operand(1);
       return kNoMatch;
     }},
    // x + scatter-add(0, i, u) => scatter-add(x, i, u), either side (Note
    // [scatter into the addend] in simplify.h)
    {Opcode::kAdd,
     [](Instruction& i, ir::Builder& b) -> Match {
       for (int64_t side = 0; side < 2; ++side) {
         Instruction* scatter = i.operand(side);
         Instruction* x = i.operand(1 - side);
         if (scatter->opcode() != Opcode::kScatterAdd || scatter == x ||
             scatter->users().size() != 1 || !IsSplat(scatter->operand(0), 0) ||
             x->shape() != scatter->shape()) {
           continue;
         }
         return Make(i, b, Opcode::kScatterAdd, {x, scatter->operand(1), scatter->operand(2)},
                     scatter->attrs(), i.shape());
       }
       return kNoMatch;
     }},
    // x - 0 => x
    {Opcode::kSub,
     [](Instruction& i, ir::Builder&) -> Match {
       return IsSplat(i.operand(1), 0) ? i.operand(0) : kNoMatch;
     }},
    // x * 1 => x;  1 * x => x
    {Opcode::kMul,
     [](Instruction& i, ir::Builder&) -> Match {
       if (IsSplat(i.operand(1), 1)) return i.operand(0);
       if (IsSplat(i.operand(0), 1)) return i.operand(1);
       return kNoMatch;
     }},
    // x * 0 => 0;  0 * x => 0  (integers only: for floats inf * 0 is nan)
    {Opcode::kMul,
     [](Instruction& i, ir::Builder&) -> Match {
       if (ir::IsFloat(i.shape().dtype())) return kNoMatch;
       if (IsSplat(i.operand(1), 0)) return i.operand(1);
       if (IsSplat(i.operand(0), 0)) return i.operand(0);
       return kNoMatch;
     }},
    // x / 1 => x
    {Opcode::kDiv,
     [](Instruction& i, ir::Builder&) -> Match {
       return IsSplat(i.operand(1), 1) ? i.operand(0) : kNoMatch;
     }},
    // x ^ 1 => x
    {Opcode::kPow,
     [](Instruction& i, ir::Builder&) -> Match {
       return IsSplat(i.operand(1), 1) ? i.operand(0) : kNoMatch;
     }},
    // -(-x) => x
    {Opcode::kNeg,
     [](Instruction& i, ir::Builder&) -> Match {
       Instruction* x = i.operand(0);
       return x->opcode() == Opcode::kNeg ? x->operand(0) : kNoMatch;
     }},
    // convert<T>(x: T) => x
    {Opcode::kConvert,
     [](Instruction& i, ir::Builder&) -> Match {
       return i.operand(0)->shape() == i.shape() ? i.operand(0) : kNoMatch;
     }},
    // convert<T>(convert<f32>(x: T)) => x  (T bf16 or f16: f32 holds every
    // value of T, so the round trip is exact; autodiff's convert rule makes
    // it where a bf16 value's f32 gradient feeds a bf16 dot)
    {Opcode::kConvert,
     [](Instruction& i, ir::Builder&) -> Match {
       Instruction* wide = i.operand(0);
       if (wide->opcode() != Opcode::kConvert || wide->shape().dtype() != DType::kF32) {
         return kNoMatch;
       }
       Instruction* x = wide->operand(0);
       const DType t = x->shape().dtype();
       return (t == DType::kBF16 || t == DType::kF16) && x->shape() == i.shape() ? x : kNoMatch;
     }},
    // reshape<S>(x: S) => x
    {Opcode::kReshape,
     [](Instruction& i, ir::Builder&) -> Match {
       return i.operand(0)->shape() == i.shape() ? i.operand(0) : kNoMatch;
     }},
    // reshape<S>(reshape(x)) => reshape<S>(x)  (x when x has shape S)
    {Opcode::kReshape,
     [](Instruction& i, ir::Builder& b) -> Match {
       Instruction* inner = i.operand(0);
       if (inner->opcode() != Opcode::kReshape) return kNoMatch;
       Instruction* x = inner->operand(0);
       if (x->shape() == i.shape()) return x;
       return Make(i, b, Opcode::kReshape, {x}, {}, i.shape());
     }},
    // transpose(x, {0,1,..,n-1}) => x
    {Opcode::kTranspose,
     [](Instruction& i, ir::Builder&) -> Match {
       return IsIdentityPermutation(i.attrs().dimensions) ? i.operand(0) : kNoMatch;
     }},
    // transpose(transpose(x, p), q) => transpose(x, p[q])  (x when p[q] is the identity)
    {Opcode::kTranspose,
     [](Instruction& i, ir::Builder& b) -> Match {
       Instruction* inner = i.operand(0);
       if (inner->opcode() != Opcode::kTranspose) return kNoMatch;
       const std::vector<int64_t>& p = inner->attrs().dimensions;
       ir::Attrs attrs;
       for (int64_t q : i.attrs().dimensions) attrs.dimensions.push_back(p[q]);
       if (IsIdentityPermutation(attrs.dimensions)) return inner->operand(0);
       return Make(i, b, Opcode::kTranspose, {inner->operand(0)}, std::move(attrs), i.shape());
     }},
    // broadcast(x: S) to S, dimensions={0,1,..,n-1} => x
    {Opcode::kBroadcast,
     [](Instruction& i, ir::Builder&) -> Match {
       bool identity =
           i.operand(0)->shape() == i.shape() && IsIdentityPermutation(i.attrs().dimensions);
       return identity ? i.operand(0) : kNoMatch;
     }},
    // broadcast(broadcast(x, d1), d2) => broadcast(x, d2[d1])
    {Opcode::kBroadcast,
     [](Instruction& i, ir::Builder& b) -> Match {
       Instruction* inner = i.operand(0);
       if (inner->opcode() != Opcode::kBroadcast) return kNoMatch;
       const std::vector<int64_t>& d2 = i.attrs().dimensions;
       ir::Attrs attrs;
       for (int64_t d : inner->attrs().dimensions) attrs.dimensions.push_back(d2[d]);
       return Make(i, b, Opcode::kBroadcast, {inner->operand(0)}, std::move(attrs), i.shape());
     }},
    // slice(x, [0:n] in every dim) => x
    {Opcode::kSlice,
     [](Instruction& i, ir::Builder&) -> Match {
       // Same shape and all starts at 0: a stride > 1 would have shrunk a dim
       // of size > 1, so the slice takes every element in order.
       const std::vector<int64_t>& starts = i.attrs().slice.starts;
       bool full = i.operand(0)->shape() == i.shape() &&
                   std::all_of(starts.begin(), starts.end(), [](int64_t s) { return s == 0; });
       return full ? i.operand(0) : kNoMatch;
     }},
    // reduce(x, dimensions={}) => x;  => convert<f32>(x) when it accumulates a 16-bit x in f32
    {Opcode::kReduce,
     [](Instruction& i, ir::Builder& b) -> Match {
       if (!i.attrs().dimensions.empty()) return kNoMatch;
       Instruction* x = i.operand(0);
       if (x->shape() == i.shape()) return x;
       return Make(i, b, Opcode::kConvert, {x}, {}, i.shape());
     }},
    // concatenate(x) => x
    {Opcode::kConcatenate,
     [](Instruction& i, ir::Builder&) -> Match {
       return i.operand_count() == 1 ? i.operand(0) : kNoMatch;
     }},
    // select(p, x, x) => x
    {Opcode::kSelect,
     [](Instruction& i, ir::Builder&) -> Match {
       return i.operand(1) == i.operand(2) ? i.operand(1) : kNoMatch;
     }},
    // select(true, a, b) => a;  select(false, a, b) => b
    {Opcode::kSelect,
     [](Instruction& i, ir::Builder&) -> Match {
       if (IsSplat(i.operand(0), 1)) return i.operand(1);
       if (IsSplat(i.operand(0), 0)) return i.operand(2);
       return kNoMatch;
     }},
    // op(c1, c2, ...) => c  (small results of constants)
    {std::nullopt, FoldConstants},
};

// Tries the rules on `inst`; returns its replacement or nullptr.
Match Rewrite(Instruction& inst) {
  ir::Builder b(inst.parent());
  b.set_insertion_point(&inst);
  b.set_origin(inst);
  for (const Rule& rule : kRules) {
    if (rule.opcode.has_value() && *rule.opcode != inst.opcode()) continue;
    ASSIGN_OR_RETURN(Instruction * replacement, rule.rewrite(inst, b));
    if (replacement != nullptr && replacement != &inst) return replacement;
  }
  return kNoMatch;
}

// One sweep over `computation` in order, so operands are simplified before
// their users. Replaced instructions are left dead for Dce.
StatusOr<bool> Sweep(ir::Computation& computation) {
  std::vector<Instruction*> order;
  for (const auto& inst : computation.instructions()) order.push_back(inst.get());
  bool changed = false;
  for (Instruction* inst : order) {
    if (inst->opcode() == Opcode::kParameter) continue;
    if (inst->users().empty() && computation.root() != inst) continue;  // dead
    ASSIGN_OR_RETURN(Instruction * replacement, Rewrite(*inst));
    if (replacement == nullptr) continue;
    inst->ReplaceAllUsesWith(replacement);
    changed = true;
  }
  return changed;
}

}  // namespace

StatusOr<bool> Simplify::Run(ir::Module& module) {
  bool changed = false;
  Dce dce;
  for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
    bool swept = false;
    for (const auto& computation : module.computations()) {
      ASSIGN_OR_RETURN(bool c, Sweep(*computation));
      swept |= c;
    }
    ASSIGN_OR_RETURN(bool removed, dce.Run(module));
    changed |= swept || removed;
    if (!swept) break;
  }
  return changed;
}

}  // namespace gptc::passes
