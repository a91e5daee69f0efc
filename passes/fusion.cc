#include "passes/fusion.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "passes/attention_fusion.h"
#include "passes/attention_operands.h"
#include "passes/cross_entropy_fusion.h"
#include "passes/fusion_planner.h"
#include "passes/gemm_fusion.h"
#include "passes/horizontal_fusion.h"
#include "passes/loop_fusion.h"
#include "passes/reduction_fusion.h"

namespace gptc::passes {

namespace fusion_internal {

using ir::Instruction;
using ir::Opcode;

namespace {

// The position of `x` in `values`, or -1 (also for null).
int64_t IndexOf(const std::vector<const Instruction*>& values, const Instruction* x) {
  auto it = std::find(values.begin(), values.end(), x);
  return x == nullptr || it == values.end() ? -1 : it - values.begin();
}

// Note [gemm epilogue records] (compiler/analysis/gemm_epilogue.h): the
// record the gemm rule wrote, its values numbered as the fusion's operands
// (`inputs`) and outputs. An aux or bias gradient nothing reads is no output
// and leaves the record; every output must have its place in it.
StatusOr<ir::GemmEpilogue> NumberGemmEpilogue(const GemmEpilogueValues& v,
                                              const std::vector<const Instruction*>& inputs,
                                              const std::vector<const Instruction*>& outputs) {
  ir::GemmEpilogue e;
  e.d = IndexOf(outputs, v.d);
  if (e.d < 0) return Error("its result %{} is not an output", v.d->name());
  auto operand = [&](const Instruction* x, const char* what, int64_t& field) -> Status {
    field = IndexOf(inputs, x);
    if (x != nullptr && field < 0) return Error("its {} %{} is not an operand", what, x->name());
    return Status::Ok();
  };
  RETURN_IF_ERROR(operand(v.bias, "bias", e.bias));
  RETURN_IF_ERROR(operand(v.residual, "residual", e.residual));
  RETURN_IF_ERROR(operand(v.aux_in, "aux", e.aux_in));
  e.activation = v.activation;
  e.aux_out = IndexOf(outputs, v.aux_out);
  e.bias_grad_out = IndexOf(outputs, v.bias_grad_out);
  if (e.bias_grad_out >= 0) {
    RETURN_IF_ERROR(operand(v.bias_grad_of, "summed operand", e.bias_grad_of));
  }
  e.transposed = v.transposed;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const int64_t o = static_cast<int64_t>(i);
    if (o != e.d && o != e.aux_out && o != e.bias_grad_out) {
      return Error("output {} (%{}) has no place in its epilogue record", o, outputs[i]->name());
    }
  }
  return e;
}

// Builds the fusion instructions for the planner's live groups and rewrites
// the entry: members go away, users read the fusion (or its tuple elements).
class Materializer {
 public:
  Materializer(ir::Module& module, Planner& planner)
      : module_(module),
        p_(planner),
        entry_(planner.computation()),
        replacement_(planner.order().size(), nullptr),
        clone_(planner.order().size(), nullptr),
        released_(planner.order().size()),
        removed_(planner.order().size(), 0),
        inputs_(planner.groups().size()),
        read_outside_(planner.order().size(), 0) {
    for (const auto& c : module.computations()) taken_.insert(c->name());
  }

  // Whether every gemm fusion's record was numbered (NumberGemmEpilogue).
  const Status& status() const { return status_; }

  bool Run() {
    std::vector<int> live;
    for (int g = 0; g < static_cast<int>(p_.groups().size()); ++g) {
      if (p_.groups()[g].live && !p_.groups()[g].members.empty()) live.push_back(g);
    }
    if (live.empty()) return false;
    std::vector<std::pair<bool, int64_t>> units = TopologicalUnits();
    MarkRootSources();
    // Each live group's members and outputs in entry order, in one pass by
    // position that reads no instruction (no sort of each group's set), and
    // all of them in entry order for ReleaseMembers.
    members_.resize(p_.groups().size());
    outputs_.resize(p_.groups().size());
    std::vector<int32_t> leaving;
    for (size_t i = 0; i < p_.order().size(); ++i) {
      int g = p_.group_at(i);
      if (g < 0 || !p_.groups()[g].live) continue;
      members_[g].push_back(static_cast<int32_t>(i));
      if (read_outside_[i] != 0) outputs_[g].push_back(p_.order()[i]);
      leaving.push_back(static_cast<int32_t>(i));
    }
    // A group nothing reads (dead code a pipeline without dce left) still
    // needs a result: its last member.
    for (int g : live) {
      if (outputs_[g].empty()) outputs_[g].push_back(p_.order()[members_[g].back()]);
    }
    ReleaseMembers(leaving);
    // The new order, and each entry's planner position (-1: made here).
    std::vector<Instruction*> new_order;
    std::vector<int32_t> new_order_pos;
    for (auto [is_group, id] : units) {
      if (!is_group) {
        new_order.push_back(p_.order()[id]);
        new_order_pos.push_back(static_cast<int32_t>(id));
        continue;
      }
      for (Instruction* inst : BuildFusion(static_cast<int>(id))) {
        new_order.push_back(inst);
        new_order_pos.push_back(-1);
      }
    }
    // The fused computations, in the order built, ahead of the entry.
    module_.AddComputationsBefore(std::move(fused_), entry_);
    for (size_t i = 0; i < replacement_.size(); ++i) {
      if (replacement_[i] != nullptr) p_.order()[i]->ReplaceUsesIn(entry_, replacement_[i]);
    }
    // The free ops only the members read go too (the members now read
    // their own copies). By position, reading no instruction: a free op's
    // readers now are those it was planned with less the members that left
    // (new instructions read no free op), so it is unread when all of
    // those left.
    auto unread = [&](int32_t i) {
      return std::all_of(p_.readers_at(i).begin(), p_.readers_at(i).end(),
                         [&](int32_t r) { return removed_[r] != 0; });
    };
    std::vector<Instruction*> removing;  // users first
    for (int64_t i = static_cast<int64_t>(p_.order().size()) - 1; i >= 0; --i) {
      if (removed_[i] != 0 || !p_.free_at(i) || !unread(static_cast<int32_t>(i))) continue;
      Instruction* inst = p_.order()[i];
      if (entry_->root() == inst) continue;
      removing.push_back(inst);
      removed_[i] = 1;
    }
    size_t kept = 0;
    for (size_t k = 0; k < new_order.size(); ++k) {
      if (new_order_pos[k] < 0 || removed_[new_order_pos[k]] == 0) new_order[kept++] = new_order[k];
    }
    new_order.resize(kept);
    entry_->RemoveInstructions(removing);
    assert(new_order.size() == static_cast<size_t>(entry_->instruction_count()) &&
           "fusion groups must not form a cycle");
    entry_->ReorderInstructions(new_order);
    return true;
  }

 private:
  // Groups and ungrouped instructions in an order that respects data flow;
  // among ready units, the one whose last instruction came first goes first.
  // On the way, marks in read_outside_ the members read from outside their
  // group (the fusions' outputs) and collects each group's inputs (its
  // fusion's parameters): the same walk over operands finds all three, so
  // that large graphs, which outgrow the caches, are read once
  // (docs/PERFORMANCE.md, "Compile time").
  std::vector<std::pair<bool, int64_t>> TopologicalUnits() {
    const auto& order = p_.order();
    int64_t n_groups = static_cast<int64_t>(p_.groups().size());
    auto unit = [&](int32_t i) -> int64_t {
      int g = p_.group_at(i);
      return g >= 0 ? g : n_groups + i;
    };
    int64_t n_units = n_groups + static_cast<int64_t>(order.size());
    std::vector<int64_t> priority(n_units, -1), indegree(n_units, 0);
    std::vector<std::pair<int64_t, int64_t>> edges;  // (from, to)
    edges.reserve(order.size());
    std::vector<bool> present(n_units, false);
    // By position (Note [adjacency by position]): the walk reads no
    // instruction.
    for (size_t i = 0; i < order.size(); ++i) {
      int64_t u = unit(static_cast<int32_t>(i));
      present[u] = true;
      priority[u] = std::max(priority[u], static_cast<int64_t>(i));
      // A group copies the free ops it reads: it depends on their sources.
      for (int32_t op : u < n_groups ? p_.sources_at(i) : p_.operands_at(i)) {
        int64_t v = unit(op);
        if (v == u) continue;
        edges.emplace_back(v, u);
        ++indegree[u];
      }
      if (u < n_groups) {
        for (int32_t op : p_.operands_at(i)) CollectInputs(op, static_cast<int>(u));
      }
      // Free ops are looked through: what they read is read by their users.
      if (!p_.free_at(i)) {
        int reader = u < n_groups ? static_cast<int>(u) : -1;
        for (int32_t op : p_.operands_at(i)) MarkReadOutside(op, reader);
      }
    }
    // Successors in one array by source unit, not a vector per unit: one
    // allocation, read in order.
    std::vector<int64_t> first_succ(n_units + 1, 0), succ(edges.size());
    for (auto [from, to] : edges) ++first_succ[from + 1];
    for (int64_t u = 0; u < n_units; ++u) first_succ[u + 1] += first_succ[u];
    std::vector<int64_t> fill(first_succ.begin(), first_succ.end() - 1);
    for (auto [from, to] : edges) succ[fill[from]++] = to;
    using Item = std::pair<int64_t, int64_t>;  // (priority, unit)
    std::priority_queue<Item, std::vector<Item>, std::greater<>> ready;
    for (int64_t u = 0; u < n_units; ++u) {
      if (present[u] && indegree[u] == 0) ready.push({priority[u], u});
    }
    std::vector<std::pair<bool, int64_t>> out;
    while (!ready.empty()) {
      int64_t u = ready.top().second;
      ready.pop();
      out.push_back(u < n_groups ? std::make_pair(true, u) : std::make_pair(false, u - n_groups));
      for (int64_t i = first_succ[u]; i < first_succ[u + 1]; ++i) {
        if (--indegree[succ[i]] == 0) ready.push({priority[succ[i]], succ[i]});
      }
    }
    return out;
  }

  // The value at position `value` is read by a non-free op of group
  // `reader` (-1: of none): marks it in read_outside_ if it is a member of
  // another group, and so on through free ops to what they read.
  void MarkReadOutside(int32_t value, int reader) {
    int g = p_.group_at(value);
    if (g >= 0 && g != reader) read_outside_[value] = 1;
    if (p_.free_at(value)) {
      for (int32_t op : p_.operands_at(value)) MarkReadOutside(op, reader);
    }
  }

  // Adds to group `g`'s inputs the non-free values outside it that the
  // value at position `i` is (or, free, reads), in the order BuildFusion
  // numbers its parameters.
  void CollectInputs(int32_t i, int g) {
    if (p_.group_at(i) == g) return;
    if (p_.free_at(i)) {
      for (int32_t op : p_.operands_at(i)) CollectInputs(op, g);
      return;
    }
    // Groups read their inputs interleaved in entry order: a set of (group,
    // position) pairs, not a mark per position, tells a repeat.
    if (!input_seen_.insert(g * static_cast<int64_t>(p_.order().size()) + i).second) return;
    inputs_[g].push_back(p_.order()[i]);
  }

  // The entry's root is read from outside every group.
  void MarkRootSources() {
    if (entry_->root() != nullptr)
      MarkReadOutside(static_cast<int32_t>(p_.pos(entry_->root())), -1);
  }

  // Takes the live groups' members (at positions `leaving`, ascending) out
  // of the entry, for BuildFusion to move into the fused computations.
  void ReleaseMembers(const std::vector<int32_t>& leaving) {
    std::vector<Instruction*> insts;
    insts.reserve(leaving.size());
    for (int32_t i : leaving) insts.push_back(p_.order()[i]);
    std::vector<std::unique_ptr<Instruction>> released = entry_->ReleaseInstructions(insts);
    for (size_t k = 0; k < leaving.size(); ++k) {
      assert(released[k].get() == insts[k]);
      removed_[leaving[k]] = 1;
      released_[leaving[k]] = std::move(released[k]);
    }
  }

  std::string ComputationName(const Group& group) {
    std::string base = "fused." + (group.name.empty() ? group.hero->name() : group.name);
    std::string name = base;
    for (int i = 1; taken_.contains(name); ++i) name = fmt::format("{}.{}", base, i);
    taken_.insert(name);
    return name;
  }

  // The value a fusion operand should read: the new fusion output if the
  // original is now inside another fusion.
  Instruction* Current(const Instruction* inst) {
    int64_t i = p_.find_pos(inst);
    return i >= 0 && replacement_[i] != nullptr ? replacement_[i] : const_cast<Instruction*>(inst);
  }

  // Creates the fused computation and the fusion (plus get-tuple-elements)
  // for group `g`; returns the new entry instructions in order.
  std::vector<Instruction*> BuildFusion(int g) { return AddFusion(g, BuildFusedComputation(g)); }

  // Group `g`'s fused computation: its inputs as parameters, its members
  // moved in, the free ops they read copied, its outputs the root.
  ir::Computation* BuildFusedComputation(int g) {
    const Group& group = p_.groups()[g];
    const std::vector<int32_t>& members = members_[g];
    auto fused = std::make_unique<ir::Computation>(ComputationName(group));
    fused->Reserve(static_cast<int64_t>(members.size() + inputs_[g].size()) + 1);
    // clone_ by planner position, emptied again when this group is built.
    auto cloned = [&](const Instruction* x) { return clone_[p_.pos(x)]; };
    auto set_clone = [&](int32_t i, Instruction* c) {
      clone_[i] = c;
      cloned_.push_back(i);
    };
    // Parameters first: the non-free values members read from outside
    // (found by TopologicalUnits).
    const std::vector<const Instruction*>& inputs = inputs_[g];
    for (size_t number = 0; number < inputs.size(); ++number) {
      const Instruction* op = inputs[number];
      ir::Attrs attrs;
      attrs.index = static_cast<int64_t>(number);
      auto param = std::make_unique<Instruction>(fmt::format("p{}.{}", number, op->name()),
                                                 Opcode::kParameter, op->shape(),
                                                 std::vector<Instruction*>{}, attrs);
      set_clone(static_cast<int32_t>(p_.pos(op)), fused->AddInstruction(std::move(param)));
    }
    // Members move into the fused computation; the free ops they read are
    // copied (other groups may read them too). By position (the planner's
    // operand lists are the members' own: nothing has changed them since),
    // so that an operand moved along is never read, and AddReleased leaves
    // its use list alone.
    std::function<Instruction*(int32_t)> copy = [&](int32_t i) {
      if (Instruction* c = clone_[i]) return c;
      std::span<const int32_t> ops = p_.operands_at(i);
      std::vector<Instruction*> operands;
      operands.reserve(ops.size());
      for (int32_t op : ops) operands.push_back(copy(op));
      Instruction* raw;
      if (std::unique_ptr<Instruction>& member = released_[i]) {
        raw = fused->AddReleased(std::move(member));
        // Only an operand that is not itself moved here changes (the
        // group's inputs and the free ops it copies).
        for (size_t k = 0; k < ops.size(); ++k) {
          if (operands[k] != p_.order()[ops[k]]) raw->ReplaceOperandWith(k, operands[k]);
        }
      } else {
        const Instruction* inst = p_.order()[i];
        auto c = std::make_unique<Instruction>(inst->name(), inst->opcode(), inst->shape(),
                                               std::move(operands), inst->attrs());
        c->set_metadata(inst->metadata());
        c->set_role(inst->role());
        c->set_called_computation(inst->called_computation());
        raw = fused->AddInstruction(std::move(c));
      }
      set_clone(i, raw);
      return raw;
    };
    for (int32_t m : members) copy(m);
    const std::vector<const Instruction*>& outputs = outputs_[g];
    Instruction* root = cloned(outputs.front());
    std::vector<ir::Shape> shapes;
    if (outputs.size() > 1) {
      std::vector<Instruction*> elements;
      for (const Instruction* o : outputs) {
        elements.push_back(cloned(o));
        shapes.push_back(o->shape());
      }
      auto tuple = std::make_unique<Instruction>(fused->UniqueName("outputs"), Opcode::kTuple,
                                                 ir::Shape::Tuple(shapes), std::move(elements));
      root = fused->AddInstruction(std::move(tuple));
    }
    fused->set_root(root);
    for (int64_t i : cloned_) clone_[i] = nullptr;
    cloned_.clear();
    ir::Computation* called = fused.get();
    fused_.push_back(std::move(fused));
    return called;
  }

  // The entry's fusion of group `g` calling `called`, and a
  // get-tuple-element for each output when there are several; they replace
  // the group's outputs.
  std::vector<Instruction*> AddFusion(int g, ir::Computation* called) {
    const Group& group = p_.groups()[g];
    const std::vector<const Instruction*>& outputs = outputs_[g];
    std::vector<Instruction*> operands;
    for (const Instruction* in : inputs_[g]) operands.push_back(Current(in));
    ir::Attrs attrs;
    attrs.fusion_kind = group.kind;
    auto fusion = std::make_unique<Instruction>(
        entry_->UniqueName((group.name.empty() ? group.hero->name() : group.name) + ".fusion"),
        Opcode::kFusion, called->root()->shape(), std::move(operands), attrs);
    fusion->set_metadata(group.metadata.empty() ? group.hero->metadata() : group.metadata);
    fusion->set_role(group.role.value_or(group.hero->role()));
    fusion->set_called_computation(called);
    if (group.gemm_epilogue) {
      StatusOr<ir::GemmEpilogue> e = NumberGemmEpilogue(*group.gemm_epilogue, inputs_[g], outputs);
      if (e.ok()) {
        fusion->mutable_attrs().gemm_epilogue = *e;
      } else if (status_.ok()) {
        status_ = Error("%{}: {}", fusion->name(), e.status().message());
      }
    }
    Instruction* f = entry_->AddInstruction(std::move(fusion));
    std::vector<Instruction*> created = {f};
    if (outputs.size() == 1) {
      replacement_[p_.pos(outputs.front())] = f;
      return created;
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      ir::Attrs gte_attrs;
      gte_attrs.index = static_cast<int64_t>(i);
      auto gte = std::make_unique<Instruction>(entry_->UniqueName(outputs[i]->name() + ".out"),
                                               Opcode::kGetTupleElement, outputs[i]->shape(),
                                               std::vector<Instruction*>{f}, gte_attrs);
      gte->set_metadata(outputs[i]->metadata());
      gte->set_role(outputs[i]->role());
      Instruction* raw = entry_->AddInstruction(std::move(gte));
      replacement_[p_.pos(outputs[i])] = raw;
      created.push_back(raw);
    }
    return created;
  }

  ir::Module& module_;
  Planner& p_;
  // The first gemm record that could not be numbered.
  Status status_ = Status::Ok();
  ir::Computation* entry_;
  // By planner position: the fusion output now holding each member's value.
  std::vector<Instruction*> replacement_;
  // BuildFusion's copies of the group being built, by planner position (no
  // map per group), and the positions it set.
  std::vector<Instruction*> clone_;
  std::vector<int64_t> cloned_;
  // By planner position: the members taken out of the entry until
  // BuildFusion moves them, and what left the entry (members, free ops).
  std::vector<std::unique_ptr<Instruction>> released_;
  std::vector<char> removed_;
  // By group: the values it reads from outside (its fusion's operands, in
  // order); and each (group, position) taken (CollectInputs).
  std::vector<std::vector<const Instruction*>> inputs_;
  std::unordered_set<int64_t> input_seen_;
  // By planner position: the members read from outside their group (by
  // the entry's root, or by a user outside the group, looking through free
  // ops), which become their fusion's outputs.
  std::vector<char> read_outside_;
  // By group: its members' positions in entry order, and the members read
  // outside it.
  std::vector<std::vector<int32_t>> members_;
  std::vector<std::vector<const Instruction*>> outputs_;
  // Fused computations built, added to the module at the end of Run; and
  // the computation names in use (a linear FindComputation per fusion made
  // the pass quadratic in the number of fusions).
  std::vector<std::unique_ptr<ir::Computation>> fused_;
  std::unordered_set<std::string> taken_;
};

}  // namespace
}  // namespace fusion_internal

StatusOr<bool> RunFusionRules(ir::Module& module,
                              std::span<const fusion_internal::FusionRule> rules,
                              std::string_view pass) {
  using namespace fusion_internal;  // NOLINT(build/namespaces): the phases read as a list
  if (module.entry() == nullptr) return Error("{}: module {} has no entry", pass, module.name());
  Planner planner(module.entry());
  for (FusionRule rule : rules) rule(planner);
  Materializer materializer(module, planner);
  const bool fused = materializer.Run();
  if (!materializer.status().ok()) {
    return Error("{}: the gemm rule's epilogue record of {}", pass,
                 materializer.status().message());
  }
  return fused;
}

StatusOr<bool> Fusion::Run(ir::Module& module) {
  using namespace fusion_internal;  // NOLINT(build/namespaces): the rules read as a list
  ASSIGN_OR_RETURN(const bool changed, AttentionOperands().Run(module));
  static constexpr FusionRule kRules[] = {
      &FuseOptimizer,
      &FuseGradNorm,
      &FuseParameterConverts,  // horizontal_fusion.h
      &FuseCrossEntropy,       // cross_entropy_fusion.h
      &FuseAttention,
      &FuseAttentionGrads,  // attention_fusion.h
      &FuseGemms,           // gemm_fusion.h
      &FuseReductions,      // reduction_fusion.h
      &FuseConvertsIntoProducers,
      &FuseLoops,  // loop_fusion.h
  };
  ASSIGN_OR_RETURN(const bool fused, RunFusionRules(module, kRules, Name()));
  return fused || changed;
}

}  // namespace gptc::passes
