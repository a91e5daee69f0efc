#include "passes/autodiff.h"

#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "passes/autodiff_rules.h"

namespace gptc::passes {

namespace {

using autodiff::GradBuilder;
using ir::Instruction;
using ir::Opcode;

// Values the gradient flows through: float arrays, and tuples of them.
bool CanCarryGradient(const ir::Shape& shape) {
  return shape.is_tuple() || ir::IsFloat(shape.dtype());
}

// One reverse sweep. `order` holds the instructions to differentiate in
// execution order; `sources` are the leaves whose adjoints are wanted (they
// may lie outside `order`). When `scope` is set, everything built is named
// after it instead of after each instruction (used for inlined computations).
class Backprop {
 public:
  Backprop(GradBuilder& g, const Instruction* scope) : g_(g), scope_(scope) {}

  StatusOr<std::unordered_map<Instruction*, Instruction*>> Run(
      const std::vector<Instruction*>& order, Instruction* root, Instruction* seed,
      const std::unordered_set<Instruction*>& sources) {
    // Forward: which values depend on a source.
    std::unordered_set<Instruction*> depends(sources.begin(), sources.end());
    for (Instruction* inst : order) {
      if (!CanCarryGradient(inst->shape())) continue;
      for (Instruction* op : inst->operands()) {
        if (depends.contains(op)) {
          depends.insert(inst);
          break;
        }
      }
    }
    // Backward: which of those the root depends on.
    std::unordered_set<Instruction*> live;
    if (depends.contains(root)) live.insert(root);
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      if (!live.contains(*it)) continue;
      for (Instruction* op : (*it)->operands()) {
        if (depends.contains(op)) live.insert(op);
      }
    }
    if (!live.contains(root)) return std::unordered_map<Instruction*, Instruction*>{};
    RETURN_IF_ERROR(Accumulate(root, seed));

    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Instruction* y = *it;
      if (!live.contains(y) || sources.contains(y)) continue;
      std::vector<bool> wants;
      for (Instruction* op : y->operands()) wants.push_back(live.contains(op));
      RETURN_IF_ERROR(Visit(y, wants));
    }
    std::unordered_map<Instruction*, Instruction*> result;
    for (Instruction* s : sources) {
      auto it = adjoint_.find(s);
      if (it != adjoint_.end()) result[s] = it->second;
    }
    return result;
  }

 private:
  void Scope(const Instruction& inst) { g_.SetScope(scope_ != nullptr ? *scope_ : inst); }

  // adjoint(x) += g
  Status Accumulate(Instruction* x, Instruction* g) {
    if (g == nullptr) return Status::Ok();
    if (g->shape() != x->shape()) {
      return Error("autodiff: gradient of %{} has shape {}, expected {}", x->name(),
                   g->shape().ToString(), x->shape().ToString());
    }
    auto [it, inserted] = adjoint_.try_emplace(x, g);
    if (!inserted) {
      Scope(*x);
      it->second = g_.Add(it->second, g);
    }
    return g_.status();
  }

  Status Visit(Instruction* y, const std::vector<bool>& wants) {
    if (y->opcode() == Opcode::kGetTupleElement) {
      auto it = adjoint_.find(y);
      if (it == adjoint_.end()) return Status::Ok();
      Instruction* t = y->operand(0);
      auto& elements = tuple_adjoint_[t];
      elements.resize(t->shape().tuple_elements().size(), nullptr);
      Instruction*& slot = elements[y->attrs().index];
      if (slot == nullptr) {
        slot = it->second;
      } else {
        Scope(*t);
        slot = g_.Add(slot, it->second);
      }
      return g_.status();
    }
    if (y->opcode() == Opcode::kTuple) {
      auto it = tuple_adjoint_.find(y);
      if (it == tuple_adjoint_.end()) return Status::Ok();
      for (int64_t i = 0; i < y->operand_count(); ++i) {
        if (!wants[i] || i >= static_cast<int64_t>(it->second.size())) continue;
        if (y->operand(i)->shape().is_tuple()) {
          return Error("autodiff: nested tuple %{} is not supported", y->name());
        }
        RETURN_IF_ERROR(Accumulate(y->operand(i), it->second[i]));
      }
      return Status::Ok();
    }
    if (y->shape().is_tuple()) {
      return Error("autodiff: %{} ({}) returns a tuple; only tuple and get-tuple-element may",
                   y->name(), ir::OpcodeName(y->opcode()));
    }
    auto it = adjoint_.find(y);
    if (it == adjoint_.end()) return Status::Ok();
    autodiff::VjpRule rule = autodiff::FindRule(y->opcode());
    if (rule == nullptr) {
      return Error("autodiff: no gradient rule for opcode {} (%{})", ir::OpcodeName(y->opcode()),
                   y->name());
    }
    Scope(*y);
    autodiff::RuleContext ctx{
        g_, [this](const Instruction& f, Instruction* dy, const std::vector<bool>& w) {
          return ThroughCalled(f, dy, w);
        }};
    StatusOr<std::vector<Instruction*>> grads = rule(ctx, *y, it->second, wants);
    if (!grads.ok()) return grads.status();
    RETURN_IF_ERROR(g_.status());
    if (static_cast<int64_t>(grads->size()) != y->operand_count()) {
      return Error("autodiff: rule for {} returned {} gradients for %{}",
                   ir::OpcodeName(y->opcode()), grads->size(), y->name());
    }
    for (int64_t i = 0; i < y->operand_count(); ++i) {
      if (!wants[i]) continue;
      Status s = Accumulate(y->operand(i), (*grads)[i]);
      if (!s.ok()) return s.WithPrefix(fmt::format("rule for {}", ir::OpcodeName(y->opcode())));
    }
    return Status::Ok();
  }

  // Inlines a recomputed copy of y's called computation on y's operands and
  // runs a nested sweep over it, seeded with dy.
  StatusOr<std::vector<Instruction*>> ThroughCalled(const Instruction& y, Instruction* dy,
                                                    const std::vector<bool>& wants) {
    ir::Computation* called = y.called_computation();
    if (called == nullptr || called->root() == nullptr) {
      return Error("autodiff: %{} ({}) has no called computation to differentiate", y.name(),
                   ir::OpcodeName(y.opcode()));
    }
    g_.SetScope(scope_ != nullptr ? *scope_ : y);
    std::unordered_map<const Instruction*, Instruction*> map;
    std::vector<Instruction*> cloned;
    for (const auto& inst : called->instructions()) {
      if (inst->opcode() == Opcode::kParameter) {
        map[inst.get()] = y.operand(inst->attrs().index);
        continue;
      }
      std::vector<Instruction*> ops;
      for (Instruction* op : inst->operands()) ops.push_back(map.at(op));
      Instruction* c = g_.Build(inst->opcode(), std::move(ops), inst->attrs(), inst->shape(),
                                inst->called_computation());
      RETURN_IF_ERROR(g_.status());
      map[inst.get()] = c;
      cloned.push_back(c);
    }
    std::unordered_set<Instruction*> sources;
    for (int64_t i = 0; i < y.operand_count(); ++i) {
      if (wants[i]) sources.insert(y.operand(i));
    }
    Backprop inner(g_, scope_ != nullptr ? scope_ : &y);
    ASSIGN_OR_RETURN(auto adjoints, inner.Run(cloned, map.at(called->root()), dy, sources));
    // An operand passed twice gets its summed adjoint once.
    std::vector<Instruction*> grads(y.operand_count(), nullptr);
    std::unordered_set<Instruction*> done;
    for (int64_t i = 0; i < y.operand_count(); ++i) {
      Instruction* op = y.operand(i);
      if (!wants[i] || !done.insert(op).second) continue;
      auto it = adjoints.find(op);
      if (it != adjoints.end()) grads[i] = it->second;
    }
    return grads;
  }

  GradBuilder& g_;
  const Instruction* scope_;
  std::unordered_map<Instruction*, Instruction*> adjoint_;
  std::unordered_map<Instruction*, std::vector<Instruction*>> tuple_adjoint_;
};

}  // namespace

StatusOr<bool> Autodiff::Run(ir::Module& module) {
  ir::Computation* entry = module.entry();
  if (entry == nullptr || entry->root() == nullptr) return Error("autodiff: module has no entry");
  Instruction* root = entry->root();
  if (!root->shape().is_scalar() || !ir::IsFloat(root->shape().dtype())) {
    return Error("autodiff: root %{} is {}, expected a scalar float loss", root->name(),
                 root->shape().ToString());
  }
  std::vector<Instruction*> params;
  std::unordered_set<Instruction*> sources;
  for (Instruction* p : entry->parameters()) {
    if (p == nullptr || p->shape().is_tuple() || !ir::IsFloat(p->shape().dtype())) continue;
    params.push_back(p);
    sources.insert(p);
  }
  std::vector<Instruction*> order;
  for (const auto& inst : entry->instructions()) order.push_back(inst.get());

  GradBuilder g(entry);
  g.SetScope(*root);
  Instruction* seed = g.Full(root->shape(), options_.loss_scale);  // d loss / d loss
  RETURN_IF_ERROR(g.status());
  Backprop backprop(g, nullptr);
  ASSIGN_OR_RETURN(auto adjoints, backprop.Run(order, root, seed, sources));

  std::vector<Instruction*> outputs = {root};
  for (Instruction* p : params) {
    auto it = adjoints.find(p);
    if (it != adjoints.end()) {
      outputs.push_back(it->second);
    } else {
      g.SetScope(*p);
      outputs.push_back(g.Zeros(p->shape()));
    }
  }
  g.SetScope(*root);
  Instruction* tuple = g.Build(Opcode::kTuple, outputs, {});
  RETURN_IF_ERROR(g.status());
  entry->set_root(tuple);
  return true;
}

}  // namespace gptc::passes
