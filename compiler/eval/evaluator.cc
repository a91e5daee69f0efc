#include "compiler/eval/evaluator.h"

#include <unordered_map>

#include "compiler/eval/chunked_fusion.h"
#include "compiler/eval/value.h"

namespace gptc::eval {

namespace internal {
namespace {

using ir::Opcode;

StatusOr<ValuePtr> RunComputation(const Context& ctx, const ir::Computation& computation,
                                  std::span<const ValuePtr> args);

// Checks `shapes` (one per argument) against the parameters of `computation`.
template <typename ShapeOf>
Status CheckArguments(const ir::Computation& computation, size_t count, ShapeOf shape_of) {
  std::vector<ir::Instruction*> params = computation.parameters();
  if (count != params.size()) {
    return Error("%{} takes {} argument{}, got {}", computation.name(), params.size(),
                 params.size() == 1 ? "" : "s", count);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i] == nullptr) return Error("%{} has no parameter {}", computation.name(), i);
    const ir::Shape& got = shape_of(i);
    if (got != params[i]->shape()) {
      return Error("parameter {} (%{}): expected {}, got {}", i, params[i]->name(),
                   params[i]->shape().ToString(), got.ToString());
    }
  }
  return Status::Ok();
}

// 2^32 elements (16 GiB as f32, 32 GiB as f64): above this the host runs out
// of memory long before the evaluator would finish.
constexpr int64_t kMaxElements = int64_t{1} << 32;

// A value an evaluation rule that can fail produced, as a ValuePtr.
StatusOr<ValuePtr> Shared(StatusOr<std::shared_ptr<Value>> value) {
  if (!value.ok()) return value.status();
  return ValuePtr(std::move(value).value());
}

// A fusion or a composite: by its decomposition (or body), a chunk of rows
// at a time where EvalFusionByRows can.
StatusOr<ValuePtr> EvalCalled(const Context& ctx, const ir::Instruction& inst,
                              std::span<const ValuePtr> ops) {
  const ir::Computation* called = inst.called_computation();
  if (called == nullptr) {
    return Error("{} has no called computation", ir::OpcodeName(inst.opcode()));
  }
  std::optional<StatusOr<ValuePtr>> by_rows = EvalFusionByRows(
      ctx, inst, ops, [&ctx](const ir::Computation& c, std::span<const ValuePtr> args) {
        return RunComputation(ctx, c, args);
      });
  if (by_rows) return std::move(*by_rows);
  return RunComputation(ctx, *called, ops);
}

// Evaluates one non-parameter instruction on its operand values.
StatusOr<ValuePtr> EvalInstruction(const Context& ctx, const ir::Instruction& inst,
                                   std::span<const ValuePtr> ops) {
  auto x = [&](int i) -> const Value& { return *ops[i]; };
  if (ir::IsUnaryMath(inst.opcode())) return ValuePtr(EvalUnary(ctx, inst, x(0)));
  if (ir::IsBinaryElementwise(inst.opcode())) return ValuePtr(EvalBinary(ctx, inst, x(0), x(1)));
  switch (inst.opcode()) {
    case Opcode::kParameter:
      return Error("parameter outside its computation's argument list");
    case Opcode::kConstant:
      return ValuePtr(EvalConstant(ctx, inst));
    case Opcode::kIota:
      return ValuePtr(EvalIota(ctx, inst));
    case Opcode::kConvert:
      if (x(0).shape.dtype() == inst.shape().dtype())
        return ValuePtr(ShareArray(inst.shape(), x(0)));
      return ValuePtr(EvalConvert(ctx, inst, x(0)));
    case Opcode::kCopy:
    case Opcode::kReshape:
      // Same row-major data; see Note [value sharing].
      return ValuePtr(ShareArray(inst.shape(), x(0)));
    case Opcode::kBroadcast:
      return ValuePtr(EvalBroadcast(ctx, inst, x(0)));
    case Opcode::kTranspose:
      return ValuePtr(EvalTranspose(ctx, inst, x(0)));
    case Opcode::kSlice:
      return ValuePtr(EvalSlice(ctx, inst, x(0)));
    case Opcode::kPad:
      return ValuePtr(EvalPad(ctx, inst, x(0), x(1)));
    case Opcode::kConcatenate: {
      std::vector<const Value*> xs;
      for (const ValuePtr& op : ops) xs.push_back(op.get());
      return ValuePtr(EvalConcatenate(ctx, inst, xs));
    }
    case Opcode::kSelect:
      return ValuePtr(EvalSelect(ctx, inst, x(0), x(1), x(2)));
    case Opcode::kCompare:
      return ValuePtr(EvalCompare(ctx, inst, x(0), x(1)));
    case Opcode::kReduce:
      return ValuePtr(EvalReduce(ctx, inst, x(0)));
    case Opcode::kDot:
      return Shared(EvalDot(ctx, inst, x(0), x(1)));
    case Opcode::kGather:
      return Shared(EvalGather(ctx, inst, x(0), x(1)));
    case Opcode::kScatterAdd:
      return Shared(EvalScatterAdd(ctx, inst, x(0), x(1), x(2)));
    case Opcode::kAllReduce:
      return Shared(EvalAllReduce(ctx, inst, x(0)));
    case Opcode::kReduceScatter:
      return Shared(EvalReduceScatter(ctx, inst, x(0)));
    case Opcode::kAllGather:
      return Shared(EvalAllGather(ctx, inst, x(0)));
    case Opcode::kFusion:
    case Opcode::kAttention:
    case Opcode::kAttentionLse:
    case Opcode::kAttentionGrad:
    case Opcode::kSoftmaxCrossEntropy:
      // Composites are defined by their decomposition, fusions by their body.
      return EvalCalled(ctx, inst, ops);
    case Opcode::kTuple: {
      auto out = std::make_shared<Value>();
      out->shape = inst.shape();
      out->elements.assign(ops.begin(), ops.end());
      return ValuePtr(std::move(out));
    }
    case Opcode::kGetTupleElement:
      return x(0).elements[inst.attrs().index];
    default:  // the unary and binary math above
      break;
  }
  return Error("no evaluation rule for {}", ir::OpcodeName(inst.opcode()));
}

// Runs `computation` in order. Instructions that do not reach the root are
// skipped, and each value is dropped after its last use, so peak memory is
// the live set rather than the whole module.
StatusOr<ValuePtr> RunComputation(const Context& ctx, const ir::Computation& computation,
                                  std::span<const ValuePtr> args) {
  const ir::Instruction* root = computation.root();
  if (root == nullptr) return Error("%{} has no root", computation.name());
  RETURN_IF_ERROR(CheckArguments(computation, args.size(),
                                 [&](size_t i) -> const ir::Shape& { return args[i]->shape; }));

  const auto& insts = computation.instructions();
  const int64_t n = static_cast<int64_t>(insts.size());
  std::unordered_map<const ir::Instruction*, int64_t> slot;
  slot.reserve(n);
  for (int64_t i = 0; i < n; ++i) slot[insts[i].get()] = i;
  // operand_slots[i][j]: slot of operand j of instruction i.
  std::vector<std::vector<int64_t>> operand_slots(n);
  std::vector<int64_t> uses(n, 0);
  std::vector<bool> live(n, false);
  auto root_it = slot.find(root);
  if (root_it == slot.end())
    return Error("%{}: root is not in the computation", computation.name());
  live[root_it->second] = true;
  uses[root_it->second] = 1;  // the caller's use; never dropped
  for (int64_t i = n - 1; i >= 0; --i) {
    if (!live[i]) continue;
    for (const ir::Instruction* op : insts[i]->operands()) {
      auto it = slot.find(op);
      if (it == slot.end() || it->second >= i) {
        return Error("%{}: operand %{} is not defined before it", insts[i]->name(), op->name());
      }
      operand_slots[i].push_back(it->second);
      live[it->second] = true;
      ++uses[it->second];
    }
  }

  std::vector<ValuePtr> values(n);
  std::vector<ValuePtr> operands;
  for (int64_t i = 0; i < n; ++i) {
    if (!live[i]) continue;
    const ir::Instruction& inst = *insts[i];
    if (inst.opcode() == Opcode::kParameter) {
      values[i] = args[inst.attrs().index];
      continue;
    }
    // Refuse values no host could hold, with a message, instead of dying in malloc.
    if (!inst.shape().is_tuple() && inst.shape().num_elements() > kMaxElements) {
      return Error("%{}: {} has more than {} elements, too large for the reference evaluator",
                   inst.name(), inst.shape().ToString(), kMaxElements);
    }
    // An operand at its last use is moved, not copied: a kernel that finds
    // itself the only holder may write its result there (Note [chunked
    // fusions]).
    operands.clear();
    for (int64_t s : operand_slots[i]) {
      operands.push_back(uses[s] == 1 ? std::move(values[s]) : values[s]);
    }
    StatusOr<ValuePtr> result = EvalInstruction(ctx, inst, operands);
    if (!result.ok()) return result.status().WithPrefix("%" + inst.name());
    values[i] = std::move(result).value();
    operands.clear();
    for (int64_t s : operand_slots[i]) {
      if (--uses[s] == 0) values[s].reset();
    }
  }
  return values[root_it->second];
}

}  // namespace
}  // namespace internal

namespace {

// Converts `args`, handing each one `recycle` marks to the workspace once
// converted, and runs `computation`.
StatusOr<Literal> Run(const ir::Computation& computation, std::span<const Literal> args,
                      std::span<Literal> recyclable, const std::vector<bool>& recycle,
                      const EvalOptions& options) {
  using internal::ValuePtr;
  internal::Context ctx{options};
  RETURN_IF_ERROR(internal::CheckArguments(
      computation, args.size(), [&](size_t i) -> const ir::Shape& { return args[i].shape; }));
  std::vector<ValuePtr> values;
  values.reserve(args.size());
  std::vector<ir::Instruction*> params = computation.parameters();
  for (size_t i = 0; i < args.size(); ++i) {
    StatusOr<ValuePtr> value = internal::FromLiteral(ctx, args[i]);
    if (!value.ok()) {
      return value.status().WithPrefix(fmt::format("parameter {} (%{})", i, params[i]->name()));
    }
    values.push_back(std::move(value).value());
    if (i < recycle.size() && recycle[i]) options.workspace->Recycle(std::move(recyclable[i]));
  }
  ASSIGN_OR_RETURN(ValuePtr result, internal::RunComputation(ctx, computation, values));
  return internal::ToLiteral(*result, options.workspace);
}

}  // namespace

StatusOr<Literal> EvaluateComputation(const ir::Computation& computation,
                                      std::span<const Literal> args, const EvalOptions& options) {
  return Run(computation, args, {}, {}, options);
}

StatusOr<Literal> EvaluateRecycling(const ir::Module& module, std::span<Literal> args,
                                    const std::vector<bool>& recycle, const EvalOptions& options) {
  if (module.entry() == nullptr) return Error("module {} has no entry computation", module.name());
  if (options.workspace == nullptr) return Error("EvaluateRecycling needs a workspace");
  std::span<const Literal> in(args.data(), args.size());
  StatusOr<Literal> result = Run(*module.entry(), in, args, recycle, options);
  for (size_t i = 0; i < args.size() && i < recycle.size(); ++i) {
    if (recycle[i]) args[i] = Literal{};  // given up, also when a step failed before reaching it
  }
  return result;
}

StatusOr<Literal> Evaluate(const ir::Module& module, std::span<const Literal> args,
                           const EvalOptions& options) {
  if (module.entry() == nullptr) return Error("module {} has no entry computation", module.name());
  return EvaluateComputation(*module.entry(), args, options);
}

}  // namespace gptc::eval
