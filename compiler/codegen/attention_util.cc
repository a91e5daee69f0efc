#include "compiler/codegen/attention_util.h"

#include <algorithm>
#include <limits>

#include "compiler/codegen/attention_mma.h"  // PackBf16
#include "compiler/codegen/emitter_util.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace gptc::codegen {
namespace {

// Blocks of kWarpsPerBlock rows for `rows` rows.
int64_t GridOf(int64_t rows) {
  return (rows + WarpRowKernel::kWarpsPerBlock - 1) / WarpRowKernel::kWarpsPerBlock;
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
    : FusedKernelBuilder(gpu_module, name, num_params, kBlock, 0,
                         NeedsWideIndices(fused, GridOf(batch * heads * len) * kBlock),
                         std::move(what), nullptr, nullptr),
      heads_(heads),
      len_(len),
      rows_(batch * heads * len),
      grid_(GridOf(rows_)) {}

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

WarpRowKernel::TileRow WarpRowKernel::BeginTileRow(TileOrder order, int64_t group_heads) {
  namespace arith = mlir::arith;
  auto to_index = [&](mlir::Value v) {
    return b_.create<arith::IndexCastOp>(loc_, index_type_, v).getResult();
  };
  auto div = [&](mlir::Value x, int64_t y) { return b_.create<arith::DivUIOp>(loc_, x, C(y)); };
  auto rem = [&](mlir::Value x, int64_t y) { return b_.create<arith::RemUIOp>(loc_, x, C(y)); };
  mlir::Value tid = to_index(b_.create<mlir::gpu::ThreadIdOp>(loc_, mlir::gpu::Dimension::x));
  mlir::Value bid = to_index(b_.create<mlir::gpu::BlockIdOp>(loc_, mlir::gpu::Dimension::x));
  const int64_t tiles = len_ / kWarpsPerBlock;
  TileRow row;
  row.thread = b_.create<arith::AddIOp>(loc_, b_.create<arith::MulIOp>(loc_, bid, C(kBlock)), tid);
  row.lane = rem(tid, kWarp);
  row.warp = div(tid, kWarp);
  mlir::Value bh;
  if (order == TileOrder::kHeadMajor) {
    row.tile = rem(bid, tiles);
    bh = div(bid, tiles);
  } else {
    // bid = (group * tiles + level) * group_heads + head in the group.
    const mlir::Value level = rem(div(bid, group_heads), tiles);
    bh = b_.create<arith::AddIOp>(
        loc_, b_.create<arith::MulIOp>(loc_, div(bid, group_heads * tiles), C(group_heads)),
        rem(bid, group_heads));
    row.tile = order == TileOrder::kFirstTileFirst
                   ? level
                   : b_.create<arith::SubIOp>(loc_, C(tiles - 1), level).getResult();
  }
  row.h = rem(bh, heads_);
  row.b = div(bh, heads_);
  return row;
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
      case ir::Opcode::kPad: {  // the piece of a packed output: its box at the low edge
        std::vector<mlir::Value> in = emitter.Multi(index, *shape);
        for (size_t d = 0; d < in.size(); ++d) {
          if (x->attrs().pad_low[d] == 0) continue;
          in[d] = b.create<mlir::arith::AddIOp>(loc, in[d],
                                                emitter.IndexConstant(x->attrs().pad_low[d]));
        }
        index = ElementIndex{};
        index.multi = std::move(in);
        break;
      }
      default:  // copy
        break;
    }
    shape = &x->shape();
  }
  StoreElement(b, loc, value, ptr, emitter.Linear(index, *shape), out_dtype);
}

std::optional<PairStore> PairStoreOf(const ir::Instruction& root, const OutputChain& chain) {
  if (root.shape().dtype() != ir::DType::kF32) return std::nullopt;
  // Layout ops move values unchanged: the one rounding may come anywhere.
  int64_t converts = 0;
  for (const ir::Instruction* x : chain.chain) {
    if (x->opcode() != ir::Opcode::kConvert) continue;
    if (++converts > 1 || x->shape().dtype() != ir::DType::kBF16) return std::nullopt;
  }
  std::optional<AffineLayout> layout = LayoutOfResult(root, chain.chain);
  if (!layout || layout->strides.empty() || layout->strides.back() != 1 ||
      layout->offset % 2 != 0) {
    return std::nullopt;
  }
  for (int64_t stride : layout->strides) {
    if (stride % 2 != 0 && stride != 1) return std::nullopt;
  }
  if (root.shape().dims().back() % 2 != 0) return std::nullopt;
  return PairStore{*std::move(layout), converts == 1};
}

void StorePair(mlir::OpBuilder& b, mlir::Location loc, const PairStore& pair, mlir::Value lo,
               mlir::Value hi, const std::vector<mlir::Value>& multi, mlir::Value ptr) {
  namespace arith = mlir::arith;
  namespace LLVM = mlir::LLVM;
  mlir::Type index_type = multi.front().getType();
  auto c = [&](int64_t v) {
    return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(index_type, v)).getResult();
  };
  mlir::Value at = c(pair.layout.offset);
  for (size_t i = 0; i < multi.size(); ++i) {
    if (pair.layout.strides[i] == 0) continue;
    at = b.create<arith::AddIOp>(
        loc, at,
        pair.layout.strides[i] == 1
            ? multi[i]
            : b.create<arith::MulIOp>(loc, multi[i], c(pair.layout.strides[i])).getResult());
  }
  mlir::Value value;
  int64_t bytes = 0;
  if (pair.bf16) {
    value = PackBf16(b, loc, lo, hi);
    bytes = 4;
  } else {
    auto type = mlir::VectorType::get({2}, b.getF32Type());
    value = b.create<LLVM::UndefOp>(loc, type);
    for (int64_t i = 0; i < 2; ++i) {
      value = b.create<LLVM::InsertElementOp>(
          loc, value, i == 0 ? lo : hi, b.create<arith::ConstantOp>(loc, b.getI32IntegerAttr(i)));
    }
    bytes = 8;
  }
  const mlir::Type element = pair.bf16 ? mlir::Type(b.getI16Type()) : mlir::Type(b.getF32Type());
  mlir::Value address = b.create<LLVM::GEPOp>(loc, ptr.getType(), element, ptr,
                                              mlir::ValueRange{at}, /*inbounds=*/true);
  b.create<LLVM::StoreOp>(loc, value, address, bytes);
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
