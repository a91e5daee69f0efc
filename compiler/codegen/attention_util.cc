#include "compiler/codegen/attention_util.h"

#include <algorithm>
#include <limits>

#include "compiler/codegen/emitter_util.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
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
