// reduce-scatter and all-gather: this rank's shard of a reduction over the
// data-parallel group, and the concatenation of every rank's operand (Note
// [collectives] in evaluator.h). all-reduce lives with the elementwise ops.
#include <algorithm>
#include <span>

#include "compiler/eval/value.h"

namespace gptc::eval::internal {

namespace {

// The group `inst` runs over: its replicas=N must be the group's size. Null
// for a world of one with no collective, where both ops are the identity.
StatusOr<Collective*> GroupOf(const Context& ctx, const ir::Instruction& inst) {
  const int64_t replicas = inst.attrs().index;
  Collective* collective = ctx.options.collective;
  const int64_t world = collective != nullptr ? collective->world_size() : ctx.options.world_size;
  const std::string_view name = ir::OpcodeName(inst.opcode());
  if (replicas != world) {
    return Error("{} over replicas={} in a group of {} rank{}", name, replicas, world,
                 world == 1 ? "" : "s");
  }
  if (collective == nullptr && world > 1) {
    return Error(
        "{} over replicas={} needs a collective (the evaluator simulates identical "
        "replicas, which have no rank to shard for)",
        name, replicas);
  }
  return collective;
}

}  // namespace

StatusOr<std::shared_ptr<Value>> EvalReduceScatter(const Context& ctx, const ir::Instruction& inst,
                                                   const Value& x) {
  ASSIGN_OR_RETURN(Collective * collective, GroupOf(ctx, inst));
  if (collective == nullptr) return ShareArray(inst.shape(), x);
  const ir::ReduceKind kind = inst.attrs().reduce_kind;
  std::shared_ptr<Value> out = NewArray(ctx, inst.shape());
  Status status = WithStorage(out->float_storage, [&](auto tag) {
    using T = decltype(tag);
    return collective->ReduceScatter(kind, std::span<const T>(x.get<T>(), x.size),
                                     std::span<T>(out->mutable_get<T>(), out->size));
  });
  RETURN_IF_ERROR(status);
  RoundToDType(ctx, *out);
  return out;
}

StatusOr<std::shared_ptr<Value>> EvalAllGather(const Context& ctx, const ir::Instruction& inst,
                                               const Value& x) {
  ASSIGN_OR_RETURN(Collective * collective, GroupOf(ctx, inst));
  if (collective == nullptr) return ShareArray(inst.shape(), x);
  std::shared_ptr<Value> out = NewArray(ctx, inst.shape());
  Status status = WithStorage(out->float_storage, [&](auto tag) {
    using T = decltype(tag);
    return collective->AllGather(std::span<const T>(x.get<T>(), x.size),
                                 std::span<T>(out->mutable_get<T>(), out->size));
  });
  RETURN_IF_ERROR(status);
  return out;
}

}  // namespace gptc::eval::internal
