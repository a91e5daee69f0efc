#include "passes/data_parallel.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/ir/builder.h"
#include "compiler/ir/module.h"

namespace gptc::passes {

namespace {

using ir::DType;
using ir::Instruction;
using ir::Opcode;
using ir::Shape;

std::string_view ModeName(OptimizerMode mode) {
  switch (mode) {
    case OptimizerMode::kStep:
      return "step";
    case OptimizerMode::kAccumulate:
      return "accumulate";
    case OptimizerMode::kApply:
      return "apply";
  }
  return "?";
}

// One value to average over ranks and what to call it.
struct Reduced {
  Instruction* value;
  std::string name;        // parameter name, or "loss"
  bool prescaled = false;  // already divided by the world size (autodiff's loss scale)
};

// Builds, right before `at` (nullptr: at the end):
//   %dp.NAME.scaled = mul(x, broadcast(1/world))    (unless x is prescaled)
//   %dp.NAME.mean = all-reduce(%dp.NAME.scaled), kind=sum
// with metadata `data_parallel.NAME`, and returns the mean (Note [scale first]).
StatusOr<Instruction*> EmitMean(ir::Computation& c, const Reduced& x, int64_t world_size,
                                Instruction* at) {
  ir::Builder b(&c);
  b.set_insertion_point(at);
  b.set_metadata("data_parallel." + x.name);
  // The mean of a gradient is in the gradient phase (of the loss, the
  // forward's), counted in no layer: the reports' kernels per layer are the
  // model's own.
  b.set_role({x.value->role().phase, -1});
  const std::string prefix = kDataParallelPrefix + x.name;
  const Shape& shape = x.value->shape();
  ir::Attrs sum;
  sum.reduce_kind = ir::ReduceKind::kSum;
  if (x.prescaled) {
    return b.Build(Opcode::kAllReduce, {x.value}, sum, shape, nullptr, prefix + ".mean");
  }
  // 1/N rounded to f32 (the IR keeps constants exact in their dtype): for N
  // not a power of two the mean is within an ulp of the exact one.
  double inv_world = 1.0 / static_cast<double>(world_size);
  if (shape.dtype() == DType::kF32) inv_world = static_cast<float>(inv_world);
  ASSIGN_OR_RETURN(Instruction * inv,
                   b.ScalarConstant(shape.dtype(), inv_world, prefix + ".inv_world"));
  if (!shape.is_scalar()) {
    ir::Attrs attrs;
    ASSIGN_OR_RETURN(inv, b.Build(Opcode::kBroadcast, {inv}, attrs, shape, nullptr,
                                  prefix + ".inv_world.bcast"));
  }
  ASSIGN_OR_RETURN(Instruction * scaled,
                   b.Build(Opcode::kMul, {x.value, inv}, {}, shape, nullptr, prefix + ".scaled"));
  return b.Build(Opcode::kAllReduce, {scaled}, sum, shape, nullptr, prefix + ".mean");
}

// kStep / kAccumulate: the entry returns (loss, grad per float parameter).
StatusOr<bool> ReduceAutodiffOutput(ir::Computation& entry, const DataParallelOptions& o) {
  auto fail = [&](std::string why) {
    return Error(
        "data-parallel (mode {}): entry %{} is not an autodiff output (loss, "
        "gradients...): {}",
        ModeName(o.mode), entry.name(), why);
  };
  Instruction* root = entry.root();
  std::vector<Instruction*> params;
  for (Instruction* p : entry.parameters()) {
    if (p != nullptr && ir::IsFloat(p->shape().dtype())) params.push_back(p);
  }
  if (root == nullptr || root->opcode() != Opcode::kTuple) return fail("its root is not a tuple");
  if (root->operand_count() != static_cast<int64_t>(params.size()) + 1) {
    return fail(fmt::format("root %{} has {} elements, expected 1 + {} float parameters",
                            root->name(), root->operand_count(), params.size()));
  }
  if (root->operand(0)->shape() != Shape::Scalar(DType::kF32)) {
    return fail(fmt::format("loss %{} is {}, not f32[]", root->operand(0)->name(),
                            root->operand(0)->shape().ToString()));
  }
  std::vector<Reduced> todo = {{root->operand(0), "loss"}};
  if (o.mode == OptimizerMode::kStep && o.gradients) {
    for (size_t i = 0; i < params.size(); ++i) {
      Instruction* g = root->operand(static_cast<int64_t>(i) + 1);
      if (g->shape() != params[i]->shape()) {
        return fail(fmt::format("element {} (%{}, {}) does not match parameter %{} ({})", i + 1,
                                g->name(), g->shape().ToString(), params[i]->name(),
                                params[i]->shape().ToString()));
      }
      todo.push_back({g, params[i]->name(), o.gradients_prescaled});
    }
  }
  // In the order the values are computed: that is the order the all-reduces
  // are issued in (Note [all-reduce buckets] in passes/all_reduce_combiner.h).
  std::unordered_map<const Instruction*, int64_t> position;
  for (const auto& inst : entry.instructions()) {
    position[inst.get()] = static_cast<int64_t>(position.size());
  }
  std::vector<size_t> order(todo.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return position.at(todo[a].value) < position.at(todo[b].value);
  });
  // A value returned twice (one gradient feeding two slots) is reduced once.
  std::unordered_map<const Instruction*, Instruction*> mean_of;
  for (size_t i : order) {
    if (mean_of.contains(todo[i].value)) continue;
    ASSIGN_OR_RETURN(mean_of[todo[i].value], EmitMean(entry, todo[i], o.world_size,
                                                      FirstInstructionAfter(entry, todo[i].value)));
  }
  for (int64_t i = 0; i < root->operand_count(); ++i) {
    auto it = mean_of.find(root->operand(i));
    if (it != mean_of.end()) root->ReplaceOperandWith(i, it->second);
  }
  return true;
}

// kApply: the apply entry's accumulated gradients, its parameters of the
// gradient phase (`grad_acc.NAME`).
StatusOr<bool> ReduceAccumulators(ir::Computation& entry, const DataParallelOptions& o) {
  std::vector<Instruction*> accumulators;
  for (Instruction* p : entry.parameters()) {
    if (p != nullptr && p->role().phase == ir::Phase::kGradient) accumulators.push_back(p);
  }
  if (accumulators.empty()) {
    return Error(
        "data-parallel (mode apply): entry %{} has no gradient-phase parameters (the "
        "accumulated gradients; run it on the optimizer's apply entry)",
        entry.name());
  }
  // All inputs are ready at the start: the all-reduces go first, in parameter order.
  Instruction* at = FirstInstructionAfter(entry, accumulators.back());
  for (Instruction* acc : accumulators) {
    std::vector<Instruction*> users = acc->users();
    // Named after the parameter, for people: `grad_acc.NAME` -> `dp.NAME.mean`.
    std::string_view name = acc->name();
    if (name.starts_with("grad_acc.")) name.remove_prefix(sizeof("grad_acc.") - 1);
    ASSIGN_OR_RETURN(
        Instruction * mean,
        EmitMean(entry, {acc, std::string(name), o.gradients_prescaled}, o.world_size, at));
    for (Instruction* user : users) {
      for (int64_t i = 0; i < user->operand_count(); ++i) {
        if (user->operand(i) == acc) user->ReplaceOperandWith(i, mean);
      }
    }
  }
  return true;
}

}  // namespace

Instruction* FirstInstructionAfter(const ir::Computation& c, const Instruction* inst) {
  const auto& insts = c.instructions();
  size_t i = 0;
  while (i < insts.size() && insts[i].get() != inst) ++i;
  for (++i; i < insts.size(); ++i) {
    if (insts[i]->opcode() != Opcode::kParameter) return insts[i].get();
  }
  return nullptr;
}

StatusOr<DataParallelOptions> ParseDataParallelOptions(
    const std::map<std::string, std::string>& options) {
  DataParallelOptions o;
  for (const auto& [key, value] : options) {
    if (key == "world") {
      char* end = nullptr;
      const long long n = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0') {
        return Error("data-parallel: world must be an integer, got '{}'", value);
      }
      o.world_size = n;
    } else if (key == "mode") {
      if (value == "step") {
        o.mode = OptimizerMode::kStep;
      } else if (value == "accumulate") {
        o.mode = OptimizerMode::kAccumulate;
      } else if (value == "apply") {
        o.mode = OptimizerMode::kApply;
      } else {
        return Error("data-parallel: mode must be step, accumulate or apply, got '{}'", value);
      }
    } else if (key == "prescaled") {
      if (value != "true" && value != "false") {
        return Error("data-parallel: prescaled must be true or false, got '{}'", value);
      }
      o.gradients_prescaled = value == "true";
    } else if (key == "gradients") {
      if (value != "true" && value != "false") {
        return Error("data-parallel: gradients must be true or false, got '{}'", value);
      }
      o.gradients = value == "true";
    } else {
      return Error("data-parallel: unknown option '{}' (known: world, mode, prescaled, gradients)",
                   key);
    }
  }
  if (o.world_size < 1) return Error("data-parallel: world must be >= 1, got {}", o.world_size);
  return o;
}

StatusOr<bool> DataParallel::Run(ir::Module& module) {
  if (options_.world_size < 1) {
    return Error("data-parallel: world size must be >= 1, got {}", options_.world_size);
  }
  ir::Computation* entry = module.entry();
  if (entry == nullptr || entry->root() == nullptr) {
    return Error("data-parallel: module {} has no entry", module.name());
  }
  if (options_.world_size == 1) return false;
  for (const auto& inst : entry->instructions()) {
    if (inst->opcode() == Opcode::kAllReduce) {
      return Error("data-parallel: entry %{} already has all-reduce %{} (run the pass once)",
                   entry->name(), inst->name());
    }
  }
  if (options_.mode == OptimizerMode::kApply) return ReduceAccumulators(*entry, options_);
  return ReduceAutodiffOutput(*entry, options_);
}

}  // namespace gptc::passes
