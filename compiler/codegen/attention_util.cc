#include "compiler/codegen/attention_util.h"

#include <algorithm>
#include <map>

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace gptc::codegen {
namespace {

bool DependsOn(const ir::Instruction* inst, const ir::Instruction* target,
               std::map<const ir::Instruction*, bool>& memo) {
  if (inst == target) return true;
  if (auto it = memo.find(inst); it != memo.end()) return it->second;
  bool result = false;
  for (const ir::Instruction* op : inst->operands()) result = result || DependsOn(op, target, memo);
  memo[inst] = result;
  return result;
}

}  // namespace

StatusOr<std::vector<OutputChain>> FindOutputChains(
    const ir::Instruction& fusion, const std::vector<const ir::Instruction*>& outputs,
    const std::vector<const ir::Instruction*>& roots) {
  std::vector<OutputChain> chains;
  for (const ir::Instruction* out : outputs) {
    OutputChain c;
    for (size_t r = 0; r < roots.size() && c.root < 0; ++r) {
      std::map<const ir::Instruction*, bool> memo;
      if (DependsOn(out, roots[r], memo)) c.root = static_cast<int>(r);
    }
    if (c.root >= 0) {
      const ir::Instruction* root = roots[c.root];
      for (const ir::Instruction* x = out; x != root; x = x->operand(0)) {
        ir::Opcode o = x->opcode();
        if (o != ir::Opcode::kTranspose && o != ir::Opcode::kReshape && o != ir::Opcode::kConvert &&
            o != ir::Opcode::kCopy) {
          return Error(
              "%{}: output {} is computed from {} by {}: only transpose, reshape, "
              "convert and copy may follow it",
              fusion.name(), Describe(*out), Describe(*root), ir::OpcodeName(o));
        }
        c.chain.push_back(x);
      }
      std::reverse(c.chain.begin(), c.chain.end());
    }
    chains.push_back(std::move(c));
  }
  return chains;
}

void StoreThroughChain(FusedEmitter& emitter, mlir::OpBuilder& b, mlir::Location loc,
                       mlir::Value value, const ir::Instruction& root, const OutputChain& chain,
                       std::vector<mlir::Value> multi, mlir::Value ptr, ir::DType out_dtype) {
  value = ConvertValue(b, loc, value, ir::DType::kF32, root.shape().dtype());
  ElementIndex index;
  index.multi = std::move(multi);
  const ir::Shape* shape = &root.shape();
  for (const ir::Instruction* x : chain.chain) {
    switch (x->opcode()) {
      case ir::Opcode::kTranspose: {
        std::vector<mlir::Value> in = emitter.Multi(index, *shape), mapped;
        for (int64_t perm : x->attrs().dimensions) mapped.push_back(in[perm]);
        index = ElementIndex{};
        index.multi = std::move(mapped);
        break;
      }
      case ir::Opcode::kReshape: {
        mlir::Value linear = emitter.Linear(index, *shape);
        index = ElementIndex{};
        index.linear = linear;
        break;
      }
      case ir::Opcode::kConvert:
        value = ConvertValue(b, loc, value, x->operand(0)->shape().dtype(), x->shape().dtype());
        break;
      default:  // copy
        break;
    }
    shape = &x->shape();
  }
  StoreElement(b, loc, value, ptr, emitter.Linear(index, *shape), out_dtype);
}

mlir::Value WarpSum(mlir::OpBuilder& b, mlir::Location loc, mlir::Value v) {
  for (int32_t offset = 16; offset > 0; offset /= 2) {
    auto shuffle = b.create<mlir::gpu::ShuffleOp>(loc, v, offset, 32, mlir::gpu::ShuffleMode::XOR);
    v = b.create<mlir::arith::AddFOp>(loc, v, shuffle.getShuffleResult());
  }
  return v;
}

}  // namespace gptc::codegen
