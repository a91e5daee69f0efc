#include "passes/zero_shard.h"

#include <string>

#include "compiler/program/program.h"
#include "passes/data_parallel.h"

namespace gptc::passes {

namespace {

std::string ZeroName(std::string_view name, std::string_view suffix) {
  return fmt::format("{}{}.{}", kZeroPrefix, name, suffix);
}

}  // namespace

StatusOr<ir::Instruction*> EmitGradientShard(ir::Computation& computation, ir::Instruction* grad,
                                             int64_t world, std::string_view name, ir::DType comm) {
  const int64_t n = grad->shape().num_elements();
  const int64_t shard = program::ShardElements(n, world);
  const ir::DType dtype = grad->shape().dtype();
  ir::Builder b(&computation);
  b.set_insertion_point(FirstInstructionAfter(computation, grad));
  b.set_metadata(std::string(kZeroPrefix) + std::string(name));
  // In the gradient phase and no layer, as data parallelism's all-reduces.
  b.set_role({ir::Phase::kGradient, -1});
  ir::Instruction* flat = grad;
  if (grad->shape().rank() != 1) {
    ASSIGN_OR_RETURN(flat, b.Build(ir::Opcode::kReshape, {grad}, {}, ir::Shape(dtype, {n}), nullptr,
                                   ZeroName(name, "flat")));
  }
  if (comm != dtype) {  // Note [bf16 gradient communication]
    ASSIGN_OR_RETURN(flat, b.Build(ir::Opcode::kConvert, {flat}, {}, ir::Shape(comm, {n}), nullptr,
                                   ZeroName(name, "narrow")));
  }
  if (shard * world != n) {
    ASSIGN_OR_RETURN(ir::Instruction * zero, b.ScalarConstant(comm, 0.0, ZeroName(name, "zero")));
    ir::Attrs pad;
    pad.pad_low = {0};
    pad.pad_high = {shard * world - n};
    ASSIGN_OR_RETURN(flat,
                     b.Build(ir::Opcode::kPad, {flat, zero}, pad, ir::Shape(comm, {shard * world}),
                             nullptr, ZeroName(name, "padded")));
  }
  ir::Attrs rs;
  rs.reduce_kind = ir::ReduceKind::kSum;
  rs.index = world;
  ASSIGN_OR_RETURN(ir::Instruction * sum,
                   b.Build(ir::Opcode::kReduceScatter, {flat}, rs, ir::Shape(comm, {shard}),
                           nullptr, ZeroName(name, "shard")));
  if (comm == dtype) return sum;
  return b.Build(ir::Opcode::kConvert, {sum}, {}, ir::Shape(dtype, {shard}), nullptr,
                 ZeroName(name, "widened"));
}

StatusOr<ir::Instruction*> EmitGatheredParameter(ir::Builder& b, ir::Instruction* shard,
                                                 const ir::Shape& shape, int64_t world,
                                                 std::string_view name) {
  const int64_t n = shape.num_elements();
  const int64_t padded = shard->shape().num_elements() * world;
  ir::Attrs gather;
  gather.index = world;
  ASSIGN_OR_RETURN(ir::Instruction * x, b.Build(ir::Opcode::kAllGather, {shard}, gather,
                                                ir::Shape(shard->shape().dtype(), {padded}),
                                                nullptr, ZeroName(name, "gathered")));
  if (padded != n) {
    ir::Attrs slice;
    slice.slice = {{0}, {n}, {1}};
    ASSIGN_OR_RETURN(
        x, b.Build(ir::Opcode::kSlice, {x}, slice, ir::Shape(shard->shape().dtype(), {n}), nullptr,
                   ZeroName(name, "unpadded")));
  }
  if (shape.rank() == 1) return x;
  return b.Build(ir::Opcode::kReshape, {x}, {}, shape, nullptr, ZeroName(name, "param"));
}

}  // namespace gptc::passes
