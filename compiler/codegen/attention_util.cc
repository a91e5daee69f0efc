#include "compiler/codegen/attention_util.h"

#include <algorithm>
#include <limits>
#include <map>

#include "compiler/codegen/emitter_util.h"
#include "compiler/ir/patterns.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

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

// Whether an index of the fusion (or of the grid) may pass 2^31 - 1.
bool NeedsWideIndices(const ir::Computation& fused, int64_t threads) {
  int64_t max_elements = 0;
  for (const auto& inst : fused.instructions()) {
    if (!inst->shape().is_tuple()) {
      max_elements = std::max(max_elements, inst->shape().num_elements());
    }
  }
  return max_elements + threads >= std::numeric_limits<int32_t>::max();
}

}  // namespace

WarpRowKernel::WarpRowKernel(const ir::Computation& fused, int64_t num_params, int64_t batch,
                             int64_t heads, int64_t len, const std::string& name,
                             mlir::gpu::GPUModuleOp gpu_module, std::string what)
    : heads_(heads),
      len_(len),
      rows_(batch * heads * len),
      grid_((rows_ + kWarpsPerBlock - 1) / kWarpsPerBlock),
      b_(gpu_module.getContext()),
      func_(CreateKernel(b_, gpu_module, name, num_params, kBlock, 0)),
      entry_(&func_.getBody().front()),
      loc_(b_.getUnknownLoc()),
      index_type_(NeedsWideIndices(fused, grid_ * kBlock) ? b_.getI64Type() : b_.getI32Type()),
      emitter_(
          b_, entry_, index_type_, std::move(what),
          [this](const ir::Instruction& p, const ElementIndex& index) -> StatusOr<mlir::Value> {
            return LoadElement(b_, loc_, entry_->getArgument(p.attrs().index),
                               emitter_.Linear(index, p.shape()), p.shape().dtype());
          },
          nullptr) {}

mlir::Value WarpRowKernel::F32(double v) { return ScalarConstant(b_, loc_, ir::DType::kF32, v); }

StatusOr<mlir::Value> WarpRowKernel::LoadF32(const ir::Instruction& op,
                                             std::vector<mlir::Value> multi) {
  ElementIndex index;
  index.multi = std::move(multi);
  ASSIGN_OR_RETURN(mlir::Value x, emitter_.Emit(op, index));
  return ConvertValue(b_, loc_, x, op.shape().dtype(), ir::DType::kF32);
}

WarpRowKernel::Row WarpRowKernel::BeginRow(int64_t dim, mlir::OpBuilder::InsertPoint* after_rows) {
  namespace arith = mlir::arith;
  auto to_index = [&](mlir::Value v) {
    return b_.create<arith::IndexCastOp>(loc_, index_type_, v).getResult();
  };
  mlir::Value tid = to_index(b_.create<mlir::gpu::ThreadIdOp>(loc_, mlir::gpu::Dimension::x));
  mlir::Value bid = to_index(b_.create<mlir::gpu::BlockIdOp>(loc_, mlir::gpu::Dimension::x));
  Row row;
  row.thread = b_.create<arith::AddIOp>(loc_, b_.create<arith::MulIOp>(loc_, bid, C(kBlock)), tid);
  row.lane = b_.create<arith::RemUIOp>(loc_, tid, C(kWarp));
  mlir::Value index =
      b_.create<arith::AddIOp>(loc_, b_.create<arith::MulIOp>(loc_, bid, C(kWarpsPerBlock)),
                               b_.create<arith::DivUIOp>(loc_, tid, C(kWarp)));
  if (after_rows != nullptr) *after_rows = b_.saveInsertionPoint();
  if (rows_ % kWarpsPerBlock != 0) {
    mlir::Value live = b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::ult, index, C(rows_));
    auto if_live = b_.create<mlir::scf::IfOp>(loc_, live, false);
    b_.setInsertionPoint(if_live.thenBlock()->getTerminator());
  }
  row.r = b_.create<arith::RemUIOp>(loc_, index, C(len_));
  mlir::Value bh = b_.create<arith::DivUIOp>(loc_, index, C(len_));
  row.h = b_.create<arith::RemUIOp>(loc_, bh, C(heads_));
  row.b = b_.create<arith::DivUIOp>(loc_, bh, C(heads_));
  const int64_t per_lane = (dim + kWarp - 1) / kWarp;
  row.d.resize(per_lane);
  row.in_dim.resize(per_lane);
  for (int64_t i = 0; i < per_lane; ++i) {
    row.d[i] = b_.create<arith::AddIOp>(loc_, row.lane, C(i * kWarp));
    if ((i + 1) * kWarp > dim) {
      row.in_dim[i] = b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::ult, row.d[i], C(dim));
      row.d[i] = b_.create<arith::MinUIOp>(loc_, row.d[i], C(dim - 1));
    }
  }
  return row;
}

namespace {

// The pads summed by the add tree `x` (Note [concat epilogue]), or an error.
Status CollectPads(const ir::Instruction* x, std::vector<const ir::Instruction*>& pads) {
  if (x->opcode() == ir::Opcode::kAdd) {
    RETURN_IF_ERROR(CollectPads(x->operand(0), pads));
    return CollectPads(x->operand(1), pads);
  }
  if (!ir::IsLastDimZeroPad(*x)) return Error("{} is no zero pad of the last dim", Describe(*x));
  pads.push_back(x);
  return Status::Ok();
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
      std::vector<const ir::Instruction*> pads;
      bool in_sum = false;
      for (const ir::Instruction* x = out; x != root;) {
        ir::Opcode o = x->opcode();
        auto fail = [&](std::string_view why) {
          return Error("%{}: output {} is computed from {} by {}: {}", fusion.name(),
                       Describe(*out), Describe(*root), ir::OpcodeName(o), why);
        };
        if (c.pad == nullptr && o == ir::Opcode::kAdd) {
          std::map<const ir::Instruction*, bool> memo;
          const int on_path = DependsOn(x->operand(0), root, memo) ? 0 : 1;
          if (Status s = CollectPads(x->operand(1 - on_path), pads); !s.ok()) {
            return fail(s.message());
          }
          in_sum = true;
          x = x->operand(on_path);
          continue;
        }
        if (c.pad == nullptr && in_sum && ir::IsLastDimZeroPad(*x)) {
          c.pad = x;
          x = x->operand(0);
          continue;
        }
        if (o != ir::Opcode::kTranspose && o != ir::Opcode::kReshape && o != ir::Opcode::kConvert &&
            o != ir::Opcode::kCopy) {
          return fail("only transpose, reshape, convert, copy and a concatenation may follow it");
        }
        if (c.pad == nullptr && !in_sum) {
          c.after.push_back(x);
        } else if (c.pad == nullptr) {
          return fail("a concatenation must sum pads of the root's layout");
        } else {
          c.chain.push_back(x);
        }
        x = x->operand(0);
      }
      if (in_sum) {
        if (c.pad == nullptr)
          return Error("%{}: output {} sums no pad of {}", fusion.name(), Describe(*out),
                       Describe(*root));
        pads.push_back(c.pad);
        if (!ir::PadsTileLastDim(pads)) {
          return Error("%{}: output {} is no concatenation of same-shaped pads", fusion.name(),
                       Describe(*out));
        }
        pads.pop_back();
        c.siblings = std::move(pads);
        std::reverse(c.after.begin(), c.after.end());
      } else {
        // No concatenation: what was taken for `after` is the whole chain.
        c.chain.insert(c.chain.end(), c.after.begin(), c.after.end());
        c.after.clear();
      }
      std::reverse(c.chain.begin(), c.chain.end());
    }
    chains.push_back(std::move(c));
  }
  return chains;
}

Status StoreThroughChain(FusedEmitter& emitter, mlir::OpBuilder& b, mlir::Location loc,
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
  if (chain.pad == nullptr) {
    StoreElement(b, loc, value, ptr, emitter.Linear(index, *shape), out_dtype);
    return Status::Ok();
  }
  // Note [concat epilogue]: this element at the root's place, and the
  // siblings' elements of the same index at theirs.
  const std::vector<mlir::Value> at = emitter.Multi(index, *shape);
  const ir::Shape& packed = chain.pad->shape();
  auto store = [&](mlir::Value v, ir::DType dtype, const ir::Instruction& pad) {
    for (const ir::Instruction* x : chain.after) {
      if (x->opcode() == ir::Opcode::kConvert) {
        v = ConvertValue(b, loc, v, dtype, x->shape().dtype());
        dtype = x->shape().dtype();
      }
    }
    ElementIndex place;
    place.multi = at;
    place.multi.back() = b.create<mlir::arith::AddIOp>(
        loc, at.back(), emitter.IndexConstant(pad.attrs().pad_low.back()));
    StoreElement(b, loc, v, ptr, emitter.Linear(place, packed), out_dtype);
  };
  store(value, chain.pad->shape().dtype(), *chain.pad);
  for (const ir::Instruction* sibling : chain.siblings) {
    ElementIndex same;
    same.multi = at;
    ASSIGN_OR_RETURN(mlir::Value v, emitter.Emit(*sibling->operand(0), same));
    store(v, sibling->shape().dtype(), *sibling);
  }
  return Status::Ok();
}

mlir::Value RoundThrough(mlir::OpBuilder& b, mlir::Location loc, mlir::Value x, ir::DType dtype) {
  if (dtype == ir::DType::kF32) return x;
  return ConvertValue(b, loc, ConvertValue(b, loc, x, ir::DType::kF32, dtype), dtype,
                      ir::DType::kF32);
}

mlir::Value WarpSum(mlir::OpBuilder& b, mlir::Location loc, mlir::Value v) {
  for (int32_t offset = 16; offset > 0; offset /= 2) {
    auto shuffle = b.create<mlir::gpu::ShuffleOp>(loc, v, offset, 32, mlir::gpu::ShuffleMode::XOR);
    v = b.create<mlir::arith::AddFOp>(loc, v, shuffle.getShuffleResult());
  }
  return v;
}

}  // namespace gptc::codegen
