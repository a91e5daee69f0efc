#include "compiler/analysis/gelu_epilogue.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <unordered_map>

#include "compiler/eval/evaluator.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/computation.h"
#include "compiler/ir/module.h"

namespace gptc::analysis {

using ir::Instruction;
using ir::Opcode;

namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi)
constexpr size_t kMaxGeluRegion = 16;                // the frontend's GELU is 10 ops

// Sample GELU inputs: -6 to 6 in steps of 1/8 (exact in bf16 and f16), where
// the tanh and erf forms differ by up to 5e-4 and the tails by much less.
std::vector<double> GeluInputs() {
  std::vector<double> xs;
  for (int i = -48; i <= 48; ++i) xs.push_back(i / 8.0);
  return xs;
}

bool IsConstantLike(const Instruction* x) {
  while (x->opcode() == Opcode::kBroadcast || x->opcode() == Opcode::kConvert) x = x->operand(0);
  return x->opcode() == Opcode::kConstant;
}

bool IsNarrowing(const Instruction* x) {
  return x->opcode() == Opcode::kConvert &&
         ir::DTypeBytes(x->shape().dtype()) < ir::DTypeBytes(x->operand(0)->shape().dtype());
}

// Copies the cone of `x` over `leaves` into a computation of [n]-shaped
// values; null when the cone holds anything but elementwise ops of x's dims,
// constants and broadcast scalars.
class ConeCopier {
 public:
  ConeCopier(ir::Builder& b, const std::vector<int64_t>& dims, int64_t n)
      : b_(b), dims_(dims), n_(n) {}

  StatusOr<Instruction*> Copy(const Instruction* x) {
    if (auto it = copies_.find(x); it != copies_.end()) return it->second;
    ASSIGN_OR_RETURN(Instruction * c, Make(x));
    copies_[x] = c;
    return c;
  }
  void AddLeaf(const Instruction* leaf, Instruction* parameter) { copies_[leaf] = parameter; }

 private:
  StatusOr<Instruction*> Make(const Instruction* x) {
    const ir::DType dtype = x->shape().dtype();
    const std::vector<double>& lit = x->attrs().literal;
    if (x->opcode() == Opcode::kConstant) {
      if (lit.empty() ||
          std::any_of(lit.begin(), lit.end(), [&](double v) { return v != lit[0]; })) {
        return Error("%{}: not a splat constant", x->name());
      }
      ASSIGN_OR_RETURN(Instruction * c, b_.ScalarConstant(dtype, lit[0]));
      return x->shape().rank() == 0 ? c : b_.Broadcast(c, {n_}, {});
    }
    if (x->opcode() == Opcode::kBroadcast) {
      ASSIGN_OR_RETURN(Instruction * op, Copy(x->operand(0)));
      if (op->shape().rank() != 0) return Error("%{}: broadcasts a non-scalar", x->name());
      return x->shape().rank() == 0 ? op : b_.Broadcast(op, {n_}, {});
    }
    if (!ir::IsElementwise(x->opcode()) || x->shape().dims() != dims_) {
      return Error("%{}: not elementwise over the leaves", x->name());
    }
    std::vector<Instruction*> operands;
    for (const Instruction* op : x->operands()) {
      ASSIGN_OR_RETURN(Instruction * c, Copy(op));
      operands.push_back(c);
    }
    return b_.Build(x->opcode(), std::move(operands), x->attrs(), ir::Shape(dtype, {n_}));
  }

  ir::Builder& b_;
  std::vector<int64_t> dims_;
  int64_t n_;
  std::unordered_map<const Instruction*, Instruction*> copies_;
};

// Instruction positions in their computation, for "the latest first".
std::unordered_map<const Instruction*, int64_t> Positions(const Instruction* x) {
  std::unordered_map<const Instruction*, int64_t> pos;
  for (const auto& inst : x->parent()->instructions()) {
    pos[inst.get()] = static_cast<int64_t>(pos.size());
  }
  return pos;
}

}  // namespace

double GeluTanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}

double GeluTanhGrad(double x) {
  const double t = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3 * 0.044715 * x * x);
}

bool ComputesOnSamples(const Instruction* value, const std::vector<const Instruction*>& leaves,
                       const std::vector<std::vector<double>>& points,
                       const std::function<double(std::span<const double>)>& f) {
  while (IsNarrowing(value) && std::find(leaves.begin(), leaves.end(), value) == leaves.end()) {
    value = value->operand(0);
  }
  const int64_t n = static_cast<int64_t>(points.size());
  ir::Module scratch("probe");
  ir::Computation* c = scratch.AddComputation("probe");
  scratch.set_entry(c);
  ir::Builder b(c);
  ConeCopier copier(b, value->shape().dims(), n);
  std::vector<eval::Literal> args;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const ir::Shape shape(leaves[i]->shape().dtype(), {n});
    StatusOr<Instruction*> p = b.Parameter(static_cast<int64_t>(i), shape);
    if (!p.ok()) return false;
    copier.AddLeaf(leaves[i], *p);
    eval::Literal arg{shape, {}, {}};
    for (const std::vector<double>& point : points) arg.values.push_back(point[i]);
    args.push_back(std::move(arg));
  }
  StatusOr<Instruction*> root = copier.Copy(value);
  if (!root.ok() || !ir::IsFloat((*root)->shape().dtype())) return false;
  c->set_root(*root);
  StatusOr<eval::Literal> got = eval::EvaluateComputation(*c, args);
  if (!got.ok()) return false;
  for (int64_t i = 0; i < n; ++i) {
    const double want = f(points[i]);
    if (!(std::abs(got->values[i] - want) <= 1e-5 * (1.0 + std::abs(want)))) return false;
  }
  return true;
}

bool ComputesGelu(const Instruction* value, const Instruction* x) {
  std::vector<std::vector<double>> points;
  for (double v : GeluInputs()) points.push_back({v});
  return ComputesOnSamples(value, {x}, points,
                           [](std::span<const double> p) { return GeluTanh(p[0]); });
}

bool ComputesGeluGrad(const Instruction* value, const Instruction* dy, const Instruction* x) {
  std::vector<std::vector<double>> points;
  for (double g : {1.0, -0.375, 2.5}) {
    for (double v : GeluInputs()) points.push_back({g, v});
  }
  return ComputesOnSamples(value, {dy, x}, points,
                           [](std::span<const double> p) { return p[0] * GeluTanhGrad(p[1]); });
}

std::vector<const Instruction*> MatchGeluRegion(const GeluGraph& graph, const Instruction* x) {
  std::unordered_set<const Instruction*> members;
  std::vector<const Instruction*> order;
  bool has_tanh = false;
  for (bool changed = true; changed && order.size() <= kMaxGeluRegion;) {
    changed = false;
    std::vector<const Instruction*> candidates;
    graph.Users(x, candidates);
    for (const Instruction* m : order) graph.Users(m, candidates);
    for (const Instruction* u : candidates) {
      if (members.contains(u) || !graph.Available(u) || !ir::IsElementwise(u->opcode()) ||
          u->shape().dims() != x->shape().dims()) {
        continue;
      }
      std::vector<const Instruction*> sources;
      for (const Instruction* op : u->operands()) graph.Sources(op, sources);
      bool closed = std::all_of(sources.begin(), sources.end(), [&](auto* s) {
        return s == x || members.contains(s) || s->opcode() == Opcode::kConstant;
      });
      if (!closed) continue;
      members.insert(u);
      order.push_back(u);
      has_tanh |= u->opcode() == Opcode::kTanh || u->opcode() == Opcode::kErf;
      changed = true;
    }
  }
  if (!has_tanh || order.size() < 5 || order.size() > kMaxGeluRegion) return {};
  int sinks = 0;
  for (const Instruction* m : order) sinks += graph.UsedOnlyBy(m, members) ? 0 : 1;
  if (sinks != 1) return {};
  graph.Sort(order);
  if (graph.UsedOnlyBy(order.back(), members) || !ComputesGelu(order.back(), x)) return {};
  return order;
}

namespace {

// Plain IR: every user, constants seen through broadcasts and converts.
class PlainGeluGraph : public GeluGraph {
 public:
  explicit PlainGeluGraph(const Instruction* x) : pos_(Positions(x)), root_(x->parent()->root()) {}

  void Users(const Instruction* x, std::vector<const Instruction*>& out) const override {
    out.insert(out.end(), x->users().begin(), x->users().end());
  }
  void Sources(const Instruction* op, std::vector<const Instruction*>& out) const override {
    if (!IsConstantLike(op)) out.push_back(op);
  }
  bool Available(const Instruction*) const override { return true; }
  bool UsedOnlyBy(const Instruction* x,
                  const std::unordered_set<const Instruction*>& s) const override {
    return x != root_ && !x->users().empty() &&
           std::all_of(x->users().begin(), x->users().end(),
                       [&](const Instruction* u) { return s.contains(u); });
  }
  void Sort(std::vector<const Instruction*>& v) const override {
    std::sort(v.begin(), v.end(), [&](auto* a, auto* b) { return pos_.at(a) < pos_.at(b); });
  }

 private:
  std::unordered_map<const Instruction*, int64_t> pos_;
  const Instruction* root_;
};

}  // namespace

std::optional<GeluRegion> MatchGelu(const Instruction* x) {
  std::vector<const Instruction*> ops = MatchGeluRegion(PlainGeluGraph(x), x);
  if (ops.empty()) return std::nullopt;
  const Instruction* sink = ops.back();
  return GeluRegion{std::move(ops), sink};
}

}  // namespace gptc::analysis
