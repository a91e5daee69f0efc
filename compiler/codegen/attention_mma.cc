#include "compiler/codegen/attention_mma.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace gptc::codegen {
namespace {

using mlir::Value;
namespace arith = mlir::arith;
namespace LLVM = mlir::LLVM;
namespace NVVM = mlir::NVVM;

constexpr int64_t kWarp = WarpRowKernel::kWarp;

}  // namespace

SharedTile::SharedTile(mlir::OpBuilder& b, mlir::gpu::GPUModuleOp gpu_module,
                       const std::string& name, int64_t rows, int64_t cols, int64_t stages)
    : rows_(rows), cols_(cols), stages_(stages) {
  const mlir::Location loc = b.getUnknownLoc();
  LLVM::GlobalOp global;
  {
    mlir::OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(gpu_module.getBody());
    auto type = LLVM::LLVMArrayType::get(b.getI16Type(), stages_ * rows_ * stride());
    global = b.create<LLVM::GlobalOp>(loc, type, /*isConstant=*/false, LLVM::Linkage::Internal,
                                      name, mlir::Attribute(), /*alignment=*/16,
                                      /*addrSpace=*/3);
  }
  base_ = b.create<LLVM::AddressOfOp>(loc, global);
}

SharedTile SharedTile::Stage(mlir::OpBuilder& b, mlir::Location loc, Value stage) const {
  SharedTile view = *this;
  Value elements =
      b.create<arith::ConstantOp>(loc, b.getIntegerAttr(stage.getType(), rows_ * stride()));
  view.base_ =
      b.create<LLVM::GEPOp>(loc, base_.getType(), b.getI16Type(), base_,
                            mlir::ValueRange{b.create<arith::MulIOp>(loc, stage, elements)});
  return view;
}

Value SharedTile::Address(mlir::OpBuilder& b, mlir::Location loc, Value row, Value col) {
  Value pitch = b.create<arith::ConstantOp>(loc, b.getIntegerAttr(row.getType(), stride()));
  Value at = b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, row, pitch), col);
  return b.create<LLVM::GEPOp>(loc, base_.getType(), b.getI16Type(), base_, mlir::ValueRange{at});
}

void SharedTile::Store(mlir::OpBuilder& b, mlir::Location loc, Value row, Value col, Value value) {
  Value bits = b.create<arith::BitcastOp>(
      loc, b.getI16Type(), ConvertValue(b, loc, value, ir::DType::kF32, ir::DType::kBF16));
  b.create<LLVM::StoreOp>(loc, bits, Address(b, loc, row, col));
}

Value PackBf16(mlir::OpBuilder& b, mlir::Location loc, Value lo, Value hi) {
  auto half = [&](Value x) {
    Value bits = b.create<arith::BitcastOp>(
        loc, b.getI16Type(), ConvertValue(b, loc, x, ir::DType::kF32, ir::DType::kBF16));
    return b.create<arith::ExtUIOp>(loc, b.getI32Type(), bits).getResult();
  };
  Value shift = b.create<arith::ConstantOp>(loc, b.getI32IntegerAttr(16));
  return b.create<arith::OrIOp>(loc, half(lo), b.create<arith::ShLIOp>(loc, half(hi), shift));
}

Fragment LdMatrixX4(mlir::OpBuilder& b, mlir::Location loc, Value row_address, bool trans) {
  mlir::Type i32 = b.getI32Type();
  auto type = LLVM::LLVMStructType::getLiteral(b.getContext(), {i32, i32, i32, i32});
  Value regs = b.create<NVVM::LdMatrixOp>(loc, type, row_address, 4,
                                          trans ? NVVM::MMALayout::col : NVVM::MMALayout::row);
  Fragment out;
  for (int64_t i = 0; i < 4; ++i) out[i] = b.create<LLVM::ExtractValueOp>(loc, regs, i);
  return out;
}

Fragment Mma(mlir::OpBuilder& b, mlir::Location loc, const Fragment& a, Value b0, Value b1,
             const Fragment& c) {
  mlir::Type f32 = b.getF32Type();
  auto type = LLVM::LLVMStructType::getLiteral(b.getContext(), {f32, f32, f32, f32});
  // MLIR 19's nvvm.mma.sync wants vector<2xf16> fragments for bf16 and then
  // calls the intrinsic with them ill-typed (tests/compiler/codegen/warp_matrix_test.cc):
  // the intrinsic is called directly, with its i32 fragments.
  std::vector<Value> args(a.begin(), a.end());
  args.push_back(b0);
  args.push_back(b1);
  args.insert(args.end(), c.begin(), c.end());
  Value d = b.create<LLVM::CallIntrinsicOp>(loc, type, "llvm.nvvm.mma.m16n8k16.row.col.bf16", args)
                .getResult(0);
  Fragment out;
  for (int64_t i = 0; i < 4; ++i) out[i] = b.create<LLVM::ExtractValueOp>(loc, d, i);
  return out;
}

Value TileMath::Add(Value x, Value y) const {
  return kernel_.b().create<arith::AddIOp>(kernel_.loc(), x, y);
}
Value TileMath::Mul(Value x, int64_t y) const {
  return kernel_.b().create<arith::MulIOp>(kernel_.loc(), x, C(y));
}
Value TileMath::Div(Value x, int64_t y) const {
  return kernel_.b().create<arith::DivUIOp>(kernel_.loc(), x, C(y));
}
Value TileMath::Rem(Value x, int64_t y) const {
  return kernel_.b().create<arith::RemUIOp>(kernel_.loc(), x, C(y));
}
Value TileMath::Min(Value x, int64_t y) const {
  return kernel_.b().create<arith::MinUIOp>(kernel_.loc(), x, C(y));
}
Value TileMath::Less(Value x, Value y) const {
  return kernel_.b().create<arith::CmpIOp>(kernel_.loc(), arith::CmpIPredicate::ult, x, y);
}
Value TileMath::FAdd(Value x, Value y) const {
  return kernel_.b().create<arith::AddFOp>(kernel_.loc(), x, y);
}
Value TileMath::FSub(Value x, Value y) const {
  return kernel_.b().create<arith::SubFOp>(kernel_.loc(), x, y);
}
Value TileMath::FMul(Value x, Value y) const {
  return kernel_.b().create<arith::MulFOp>(kernel_.loc(), x, y);
}
Value TileMath::FMax(Value x, Value y) const {
  return kernel_.b().create<arith::MaximumFOp>(kernel_.loc(), x, y);
}
Value TileMath::Exp(Value x) const {
  return kernel_.b().create<mlir::math::ExpOp>(kernel_.loc(), x);
}

WarpLanes LanesOf(WarpRowKernel& kernel, Value lane, Value warp) {
  const TileMath m(kernel);
  WarpLanes l;
  l.lane = lane;
  l.tid = m.Add(m.Mul(warp, kWarp), lane);
  l.group = m.Div(lane, 4);
  l.q2 = m.Mul(m.Rem(lane, 4), 2);
  l.xt_row = m.Add(m.Rem(lane, 8), m.Mul(m.Div(lane, 16), 8));
  l.xt_col = m.Mul(m.Rem(m.Div(lane, 8), 2), 8);
  l.x_row = m.Rem(lane, 16);
  l.x_col = m.Mul(m.Div(lane, 16), 8);
  return l;
}

StatusOr<std::vector<Fragment>> LoadRowFragments(WarpRowKernel& kernel, const ir::Instruction& op,
                                                 Value bi, Value h, Value row_lo, Value row_hi,
                                                 int64_t dim, const WarpLanes& lanes) {
  mlir::OpBuilder& b = kernel.b();
  const mlir::Location loc = kernel.loc();
  std::vector<Fragment> frags(dim / 16);
  for (int64_t kk = 0; kk < dim / 16; ++kk) {
    for (int64_t reg = 0; reg < 4; ++reg) {
      const Value t = reg % 2 == 0 ? row_lo : row_hi;
      const Value d = b.create<arith::AddIOp>(loc, lanes.q2, kernel.C(16 * kk + 8 * (reg / 2)));
      ASSIGN_OR_RETURN(Value lo, kernel.LoadF32(op, {bi, h, t, d}));
      ASSIGN_OR_RETURN(
          Value hi, kernel.LoadF32(op, {bi, h, t, b.create<arith::AddIOp>(loc, d, kernel.C(1))}));
      frags[kk][reg] = PackBf16(b, loc, lo, hi);
    }
  }
  return frags;
}

namespace {

// Note [vector tile fill]: the bf16 parameter whose rows an operand tile
// reads 16 bytes at a time: the operand itself ([B, H, len, dim]), or the
// [B, len, H, dim] (or [B, len, H*dim]) parameter it transposes, with the
// heads interleaved in its rows (do read straight out of the dx gemm).
struct VectorSource {
  const ir::Instruction* param = nullptr;
  bool heads_inner = false;
};
std::optional<VectorSource> VectorSourceOf(const ir::Instruction& op, int64_t len, int64_t dim) {
  // A widened bf16 value (the forward's q, k, v: Note [rounded attention
  // operands] in passes/fusion_planner.h): the tile rounds it to itself.
  if (op.opcode() == ir::Opcode::kConvert && op.operand(0)->shape().dtype() == ir::DType::kBF16) {
    return VectorSourceOf(*op.operand(0), len, dim);
  }
  const ir::Shape& shape = op.shape();
  if (shape.dtype() != ir::DType::kBF16 || shape.rank() != 4 || shape.dim(2) != len ||
      shape.dim(3) != dim) {
    return std::nullopt;
  }
  if (op.opcode() == ir::Opcode::kParameter) return VectorSource{&op, false};
  if (op.opcode() != ir::Opcode::kTranspose ||
      op.attrs().dimensions != std::vector<int64_t>{0, 2, 1, 3}) {
    return std::nullopt;
  }
  const ir::Instruction* x = op.operand(0);
  if (x->opcode() == ir::Opcode::kReshape) x = x->operand(0);
  const ir::Shape& xs = x->shape();
  if (x->opcode() != ir::Opcode::kParameter || xs.dtype() != ir::DType::kBF16 ||
      xs.num_elements() != shape.num_elements() || xs.dim(0) != shape.dim(0) || xs.dim(1) != len) {
    return std::nullopt;
  }
  return VectorSource{x, true};
}

// This thread's 16-byte pieces of a tile of rows block * 64 .. + 63 of `op`
// (Note [vector tile fill]): the tile row and column, whether the row is
// below len (else the piece is zeros; `from` reads the last row), and the
// global address.
struct VectorRow {
  Value r, col, in, from;
};
std::vector<VectorRow> VectorRows(WarpRowKernel& kernel, const WarpLanes& lanes, Value bi, Value h,
                                  Value block, int64_t len, int64_t dim, const ir::Instruction& op,
                                  const VectorSource& source) {
  mlir::OpBuilder& b = kernel.b();
  const mlir::Location loc = kernel.loc();
  auto c = [&](int64_t v) { return kernel.C(v); };
  constexpr int64_t kThreads = WarpRowKernel::kBlock;
  const Value global = kernel.entry()->getArgument(source.param->attrs().index);
  const int64_t heads = op.shape().dim(1);
  std::vector<VectorRow> rows;
  for (int64_t u = 0; u < kTileRows * dim / 8 / kThreads; ++u) {
    const Value v = b.create<arith::AddIOp>(loc, lanes.tid, c(kThreads * u));
    const Value r = b.create<arith::DivUIOp>(loc, v, c(dim / 8));
    const Value col =
        b.create<arith::MulIOp>(loc, b.create<arith::RemUIOp>(loc, v, c(dim / 8)), c(8));
    const Value row =
        b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, block, c(kTileRows)), r);
    const Value in = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, row, c(len));
    const Value clamped = b.create<arith::MinUIOp>(loc, row, c(len - 1));
    // The element's row: (b * H + h) * T + t, or (b * T + t) * H + h when
    // the heads are interleaved in the rows ([B, T, H*D]).
    auto mul_add = [&](Value x, int64_t n, Value y) -> Value {
      return b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, x, c(n)), y);
    };
    const Value r_index = source.heads_inner ? mul_add(mul_add(bi, len, clamped), heads, h)
                                             : mul_add(mul_add(bi, heads, h), len, clamped);
    const Value at = mul_add(r_index, dim, col);
    const Value from = b.create<LLVM::GEPOp>(loc, global.getType(), b.getI16Type(), global,
                                             mlir::ValueRange{at}, /*inbounds=*/true);
    rows.push_back({r, col, in, from});
  }
  return rows;
}

}  // namespace

bool CanPipelineTiles(const std::vector<const ir::Instruction*>& ops, int64_t len, int64_t dim) {
  constexpr int64_t kThreads = WarpRowKernel::kBlock;
  if (len % kTileRows != 0 || (kTileRows * dim / 8) % kThreads != 0 || dim % 8 != 0) return false;
  return std::all_of(ops.begin(), ops.end(), [&](const ir::Instruction* op) {
    return VectorSourceOf(*op, len, dim).has_value();
  });
}

void IssueTileCopies(WarpRowKernel& kernel, const WarpLanes& lanes, Value bi, Value h, Value block,
                     int64_t len, int64_t dim,
                     const std::vector<std::pair<const ir::Instruction*, SharedTile*>>& tiles,
                     Value when) {
  mlir::OpBuilder& b = kernel.b();
  const mlir::Location loc = kernel.loc();
  {
    mlir::OpBuilder::InsertionGuard guard(b);
    if (when) {
      auto if_op = b.create<mlir::scf::IfOp>(loc, when, false);
      b.setInsertionPoint(if_op.thenBlock()->getTerminator());
    }
    const Value stage = b.create<arith::RemUIOp>(loc, block, kernel.C(2));
    for (const auto& [op, tile] : tiles) {
      const VectorSource source = *VectorSourceOf(*op, len, dim);
      SharedTile to = tile->Stage(b, loc, stage);
      for (const VectorRow& v : VectorRows(kernel, lanes, bi, h, block, len, dim, *op, source)) {
        // cp.async reads a global address: the kernel's pointers are generic.
        const Value from = b.create<LLVM::AddrSpaceCastOp>(
            loc, LLVM::LLVMPointerType::get(b.getContext(), 1), v.from);
        b.create<LLVM::CallIntrinsicOp>(loc, mlir::TypeRange{},
                                        "llvm.nvvm.cp.async.cg.shared.global.16",
                                        mlir::ValueRange{to.Address(b, loc, v.r, v.col), from});
      }
    }
  }
  b.create<NVVM::CpAsyncCommitGroupOp>(loc);
}

std::vector<SharedTile> AwaitTileCopies(
    WarpRowKernel& kernel, const WarpLanes& lanes, Value bi, Value h, Value block, Value end,
    int64_t len, int64_t dim,
    const std::vector<std::pair<const ir::Instruction*, SharedTile*>>& tiles) {
  mlir::OpBuilder& b = kernel.b();
  const mlir::Location loc = kernel.loc();
  b.create<NVVM::CpAsyncWaitGroupOp>(loc, 0);
  b.create<mlir::gpu::BarrierOp>(loc);
  const Value next = b.create<arith::AddIOp>(loc, block, kernel.C(1));
  IssueTileCopies(kernel, lanes, bi, h, next, len, dim, tiles,
                  b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, next, end));
  const Value stage = b.create<arith::RemUIOp>(loc, block, kernel.C(2));
  std::vector<SharedTile> now;
  for (const auto& [op, tile] : tiles) now.push_back(tile->Stage(b, loc, stage));
  return now;
}

Status FillTiles(WarpRowKernel& kernel, const WarpLanes& lanes, Value bi, Value h, Value block,
                 int64_t len, int64_t dim,
                 const std::vector<std::pair<const ir::Instruction*, SharedTile*>>& tiles) {
  mlir::OpBuilder& b = kernel.b();
  const mlir::Location loc = kernel.loc();
  FusedEmitter& emitter = kernel.emitter();
  auto c = [&](int64_t v) { return kernel.C(v); };
  constexpr int64_t kThreads = WarpRowKernel::kBlock;
  if ((kTileRows * dim) % kThreads != 0) {
    return Error("attention tile of {} x {} does not split over {} threads", kTileRows, dim,
                 kThreads);
  }
  // Each thread's loads go out in batches, all of a batch before its stores:
  // a trip of one load and one store waits out a global-memory latency per
  // element, and the first GPU run had the attention kernels at a tenth of
  // their roofline with that loop.
  const int64_t per_thread = kTileRows * dim / kThreads;
  const int64_t batch = per_thread % 16 == 0 ? 16 : per_thread % 8 == 0 ? 8 : 1;
  b.create<mlir::gpu::BarrierOp>(loc);  // every warp is done with the tiles' last contents
  // Note [vector tile fill]: an operand that is the fusion's own bf16
  // [B, H, len, dim] parameter (the backward's q, k, v, do) needs no chain
  // and no rounding: its rows go to shared memory 16 bytes a load, straight
  // from global memory, every load of the thread issued before its stores.
  std::vector<std::pair<const ir::Instruction*, SharedTile*>> by_element;
  struct Vector {
    SharedTile* tile;
    Value r, col, in, value;
  };
  std::vector<Vector> vectors;
  for (const auto& [op, tile] : tiles) {
    const std::optional<VectorSource> source = VectorSourceOf(*op, len, dim);
    if (!source || (kTileRows * dim / 8) % kThreads != 0) {
      by_element.push_back({op, tile});
      continue;
    }
    auto vector_type = mlir::VectorType::get({8}, b.getI16Type());
    for (const VectorRow& v : VectorRows(kernel, lanes, bi, h, block, len, dim, *op, *source)) {
      vectors.push_back({tile, v.r, v.col, v.in,
                         b.create<LLVM::LoadOp>(loc, vector_type, v.from, /*alignment=*/16)});
    }
  }
  for (const Vector& v : vectors) {
    const Value zero = b.create<LLVM::ZeroOp>(loc, v.value.getType());
    b.create<LLVM::StoreOp>(loc, b.create<arith::SelectOp>(loc, v.in, v.value, zero),
                            v.tile->Address(b, loc, v.r, v.col), /*alignment=*/16);
  }
  if (by_element.empty()) {
    b.create<mlir::gpu::BarrierOp>(loc);
    return Status::Ok();
  }
  mlir::OpBuilder::InsertPoint after_fill = b.saveInsertionPoint();
  FusedEmitter::Cache saved = emitter.SaveCache();
  auto fill =
      mlir::cast<mlir::scf::ForOp>(CreateFor(b, loc, c(0), c(per_thread / batch), c(1), {}));
  const Value first = b.create<arith::AddIOp>(
      loc, lanes.tid, b.create<arith::MulIOp>(loc, fill.getInductionVar(), c(kThreads * batch)));
  struct Staged {
    SharedTile* tile;
    Value r, col, value;
  };
  std::vector<Staged> staged;
  for (int64_t u = 0; u < batch; ++u) {
    const Value i = b.create<arith::AddIOp>(loc, first, c(kThreads * u));
    const Value r = b.create<arith::DivUIOp>(loc, i, c(dim));
    const Value col = b.create<arith::RemUIOp>(loc, i, c(dim));
    const Value row =
        b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, block, c(kTileRows)), r);
    const Value in = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, row, c(len));
    const Value clamped = b.create<arith::MinUIOp>(loc, row, c(len - 1));
    for (const auto& [op, tile] : by_element) {
      ASSIGN_OR_RETURN(Value x, kernel.LoadF32(*op, {bi, h, clamped, col}));
      staged.push_back({tile, r, col, b.create<arith::SelectOp>(loc, in, x, kernel.F32(0))});
    }
  }
  for (const Staged& s : staged) s.tile->Store(b, loc, s.r, s.col, s.value);
  emitter.RestoreCache(std::move(saved));
  b.restoreInsertionPoint(after_fill);
  b.setInsertionPointAfter(fill);
  b.create<mlir::gpu::BarrierOp>(loc);
  return Status::Ok();
}

std::vector<Fragment> TimesTileTransposed(WarpRowKernel& kernel, const std::vector<Fragment>& a,
                                          SharedTile& tile, const WarpLanes& lanes) {
  mlir::OpBuilder& b = kernel.b();
  const mlir::Location loc = kernel.loc();
  auto at = [&](Value lane_part, int64_t offset) {
    return b.create<arith::AddIOp>(loc, lane_part, kernel.C(offset)).getResult();
  };
  const Value zero = kernel.F32(0);
  std::vector<Fragment> out(kTileRows / 8, Fragment{zero, zero, zero, zero});
  for (int64_t nt = 0; nt < kTileRows / 8; nt += 2) {
    for (size_t kk = 0; kk < a.size(); ++kk) {
      Fragment bx = LdMatrixX4(
          b, loc, tile.Address(b, loc, at(lanes.xt_row, 8 * nt), at(lanes.xt_col, 16 * kk)), false);
      out[nt] = Mma(b, loc, a[kk], bx[0], bx[1], out[nt]);
      out[nt + 1] = Mma(b, loc, a[kk], bx[2], bx[3], out[nt + 1]);
    }
  }
  return out;
}

void AccumulateTimesTile(WarpRowKernel& kernel, const std::vector<Fragment>& x, SharedTile& tile,
                         const WarpLanes& lanes, std::vector<Fragment>& acc) {
  mlir::OpBuilder& b = kernel.b();
  const mlir::Location loc = kernel.loc();
  auto at = [&](Value lane_part, int64_t offset) {
    return b.create<arith::AddIOp>(loc, lane_part, kernel.C(offset)).getResult();
  };
  // The f32 results of n-tiles 2 kk and 2 kk + 1 are the A fragment of
  // columns 16 kk .. + 15 (Note [mma fragments]).
  for (size_t kk = 0; 2 * kk < x.size(); ++kk) {
    const Fragment& lo = x[2 * kk];
    const Fragment& hi = x[2 * kk + 1];
    const Fragment a = {PackBf16(b, loc, lo[0], lo[1]), PackBf16(b, loc, lo[2], lo[3]),
                        PackBf16(b, loc, hi[0], hi[1]), PackBf16(b, loc, hi[2], hi[3])};
    for (size_t dt = 0; dt < acc.size(); dt += 2) {
      Fragment bx = LdMatrixX4(
          b, loc, tile.Address(b, loc, at(lanes.x_row, 16 * kk), at(lanes.x_col, 8 * dt)), true);
      acc[dt] = Mma(b, loc, a, bx[0], bx[1], acc[dt]);
      acc[dt + 1] = Mma(b, loc, a, bx[2], bx[3], acc[dt + 1]);
    }
  }
}

// Note [tensor-core attention forward]: FlashAttention-2's forward on
// mma.sync. A block of 4 warps owns 64 query rows of one (b, h), 16 a warp;
// the warp keeps its q rows as A fragments (Note [mma fragments]) for the
// whole kernel. For each 64-key block (causal: up to the diagonal one) the
// block stages k and v in shared memory, rounded to bf16 (16 bytes a load
// from the bf16 copies the backward keeps, Note [rounded attention operands]
// in passes/fusion_planner.h; else every element computed through the
// fusion's operand chains), and each warp computes
//   s = scale * q k^T            8 n-tiles of 16 x 8, f32 (masked: -inf)
//   m' = max(m, rowmax s), p = exp(s - m'), l = l e^(m - m') + rowsum p
//   o = o e^(m - m') + p~ v      (p~: p rounded to bf16, as the A fragment)
// with the row statistics reduced over the 4 lanes of a row by shuffles.
// At the end o / l goes out through the output chains and m + log l is the
// lse. Rows past T (the last block's) compute on clamped indices and are not
// stored; keys past S are zeros in shared memory and -inf in s.
namespace {

// Builds Note [tensor-core attention forward] in a WarpRowKernel: the
// warp's q fragments and the tiles, the loop over the key blocks, then the
// rows' results to the outputs.
class TensorCoreForwardBuilder {
 public:
  TensorCoreForwardBuilder(WarpRowKernel& kernel, const AttentionForward& a)
      : kernel_(kernel),
        a_(a),
        m_(kernel),
        b_(kernel.b()),
        loc_(kernel.loc()),
        d_tiles_(a.dim / 8) {}

  StatusOr<TensorCoreForward> Emit(mlir::gpu::GPUModuleOp gpu_module, const std::string& name) {
    FusedEmitter& emitter = kernel_.emitter();
    const int64_t dim = a_.dim;
    FusedEmitter::Cache saved = emitter.SaveCache();
    const WarpRowKernel::Row row = kernel_.BeginRow(kWarp);  // one row per warp, no partial block
    // Note [pipelined tile fill]: k and v of block kb + 1 travel while the
    // warps compute on block kb.
    std::vector<const ir::Instruction*> ops = {a_.k};
    if (a_.attn != nullptr) ops.push_back(a_.v);
    pipelined_ = CanPipelineTiles(ops, a_.tk, dim);
    k_tile_.emplace(b_, gpu_module, name + "_k", kTileRows, dim, pipelined_ ? 2 : 1);
    if (a_.attn != nullptr) {
      v_tile_.emplace(b_, gpu_module, name + "_v", kTileRows, dim, pipelined_ ? 2 : 1);
    }
    tiles_ = {{a_.k, &*k_tile_}};
    if (v_tile_) tiles_.push_back({a_.v, &*v_tile_});
    bi_ = row.b;
    h_ = row.h;
    const Value query_block = m_.Div(row.r, 4), warp = m_.Rem(row.r, 4);
    lanes_ = LanesOf(kernel_, row.lane, warp);
    row_lo_ = m_.Add(m_.Add(m_.Mul(query_block, kTileRows), m_.Mul(warp, 16)), lanes_.group);
    row_hi_ = m_.Add(row_lo_, m_.C(8));
    if (pipelined_) IssueTileCopies(kernel_, lanes_, bi_, h_, m_.C(0), a_.tk, dim, tiles_);
    ASSIGN_OR_RETURN(
        q_frags_,
        LoadRowFragments(kernel_, *a_.q, bi_, h_,
                         b_.create<arith::MinUIOp>(loc_, row_lo_, m_.C(a_.tq - 1)),
                         b_.create<arith::MinUIOp>(loc_, row_hi_, m_.C(a_.tq - 1)), dim, lanes_));

    // for (kb = 0; kb < (causal ? query_block + 1 : key_blocks); ++kb),
    // carrying m and l of rows lo and hi, then o (d_tiles fragments).
    const int64_t key_blocks = (a_.tk + kTileRows - 1) / kTileRows;
    std::vector<Value> inits = {m_.F32(-kInf), m_.F32(-kInf), m_.F32(0), m_.F32(0)};
    for (int64_t i = 0; i < 4 * d_tiles_; ++i) inits.push_back(m_.F32(0));
    blocks_ = a_.causal ? m_.Add(query_block, m_.C(1)) : m_.C(key_blocks);
    mlir::OpBuilder::InsertPoint after_loop = b_.saveInsertionPoint();
    auto loop = mlir::cast<mlir::scf::ForOp>(CreateFor(b_, loc_, m_.C(0), blocks_, m_.C(1), inits));
    {
      FusedEmitter::Cache outer = emitter.SaveCache();
      RETURN_IF_ERROR(EmitKeyBlock(loop));
      emitter.RestoreCache(std::move(outer));
    }
    b_.restoreInsertionPoint(after_loop);
    b_.setInsertionPointAfter(loop);
    StoreRows(loop);
    emitter.RestoreCache(std::move(saved));
    return TensorCoreForward{k_tile_->bytes() + (v_tile_ ? v_tile_->bytes() : 0), row.thread};
  }

 private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  Value XorShuffle(Value v, int32_t offset) {
    return b_.create<mlir::gpu::ShuffleOp>(loc_, v, offset, 32, mlir::gpu::ShuffleMode::XOR)
        .getShuffleResult();
  }

  // Key block kb: its tiles, s = q k^T scaled and masked, the online
  // softmax's m, l and o.
  Status EmitKeyBlock(mlir::scf::ForOp loop) {
    const Value kb = loop.getInductionVar();
    auto args = loop.getRegionIterArgs();
    std::optional<SharedTile> k_now = k_tile_, v_now = v_tile_;
    if (pipelined_) {
      std::vector<SharedTile> now =
          AwaitTileCopies(kernel_, lanes_, bi_, h_, kb, blocks_, a_.tk, a_.dim, tiles_);
      k_now = now[0];
      if (v_tile_) v_now = now[1];
    } else {
      RETURN_IF_ERROR(FillTiles(kernel_, lanes_, bi_, h_, kb, a_.tk, a_.dim, tiles_));
    }
    std::vector<Fragment> s = TimesTileTransposed(kernel_, q_frags_, *k_now, lanes_);  // q k^T
    Value m_new[2] = {args[0], args[1]};
    ScaleAndMask(kb, s, m_new);
    Value corr[2], base[2], l_new[2];
    for (int64_t half = 0; half < 2; ++half) {
      for (int32_t offset : {1, 2})
        m_new[half] = m_.FMax(m_new[half], XorShuffle(m_new[half], offset));
      // A row with no visible key so far keeps m = -inf; m.Exp(s - 0) of its
      // -inf scores is then 0, not NaN.
      Value none =
          b_.create<arith::CmpFOp>(loc_, arith::CmpFPredicate::OEQ, m_new[half], m_.F32(-kInf));
      base[half] = b_.create<arith::SelectOp>(loc_, none, m_.F32(0), m_new[half]);
      corr[half] = m_.Exp(b_.create<arith::SubFOp>(loc_, args[half], base[half]));
      l_new[half] = m_.FMul(args[2 + half], corr[half]);
    }
    for (int64_t nt = 0; nt < kTileRows / 8; ++nt) {
      for (int64_t e = 0; e < 4; ++e) {
        s[nt][e] = m_.Exp(b_.create<arith::SubFOp>(loc_, s[nt][e], base[e / 2]));
        l_new[e / 2] = m_.FAdd(l_new[e / 2], s[nt][e]);
      }
    }
    std::vector<Value> next = {m_new[0], m_new[1], l_new[0], l_new[1]};
    std::vector<Fragment> o(d_tiles_);
    for (int64_t dt = 0; dt < d_tiles_; ++dt) {
      for (int64_t e = 0; e < 4; ++e) o[dt][e] = m_.FMul(args[4 + 4 * dt + e], corr[e / 2]);
    }
    if (v_now) AccumulateTimesTile(kernel_, s, *v_now, lanes_, o);  // o += p~ v
    for (const Fragment& f : o) next.insert(next.end(), f.begin(), f.end());
    b_.create<mlir::scf::YieldOp>(loc_, next);
    return Status::Ok();
  }

  // Scales s and masks it (-inf past the keys and the causal limit); m_new
  // of rows lo and hi takes the maxima over this lane's part of the block.
  void ScaleAndMask(Value kb, std::vector<Fragment>& s, Value (&m_new)[2]) {
    for (int64_t nt = 0; nt < kTileRows / 8; ++nt) {
      for (int64_t e = 0; e < 4; ++e) {
        const Value key = m_.Add(m_.Add(m_.Mul(kb, kTileRows), lanes_.q2), m_.C(8 * nt + e % 2));
        Value visible = m_.Less(key, m_.C(a_.tk));
        if (a_.causal) {
          visible = b_.create<arith::AndIOp>(
              loc_, visible, m_.Less(key, m_.Add(e < 2 ? row_lo_ : row_hi_, m_.C(1))));
        }
        s[nt][e] = b_.create<arith::SelectOp>(loc_, visible, m_.FMul(s[nt][e], m_.F32(a_.scale)),
                                              m_.F32(-kInf));
        m_new[e / 2] = m_.FMax(m_new[e / 2], s[nt][e]);
      }
    }
  }

  // Each row's l over its 4 lanes; o / l and m + log l to the outputs.
  void StoreRows(mlir::scf::ForOp loop) {
    FusedEmitter& emitter = kernel_.emitter();
    const Value q2 = lanes_.q2;
    const Value first_of_row =
        b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::eq, q2, m_.C(0));
    for (int64_t half = 0; half < 2; ++half) {
      const Value t = half == 0 ? row_lo_ : row_hi_;
      Value l = loop.getResult(2 + half);
      for (int32_t offset : {1, 2}) l = m_.FAdd(l, XorShuffle(l, offset));
      mlir::OpBuilder::InsertPoint after_store = b_.saveInsertionPoint();
      FusedEmitter::Cache store_cache = emitter.SaveCache();
      auto in_rows = b_.create<mlir::scf::IfOp>(loc_, m_.Less(t, m_.C(a_.tq)), false);
      b_.setInsertionPoint(in_rows.thenBlock()->getTerminator());
      const Value inv = b_.create<arith::DivFOp>(loc_, m_.F32(1), l);
      for (size_t out = 0; out < a_.outputs.size(); ++out) {
        if (a_.chains[out].root < 0) continue;
        const ir::Instruction* root = a_.roots[a_.chains[out].root];
        const Value ptr = kernel_.entry()->getArgument(a_.first_output + out);
        const ir::DType dtype = a_.outputs[out]->shape().dtype();
        if (root == a_.attn) {
          for (int64_t dt = 0; dt < d_tiles_; ++dt) {
            for (int64_t e = 0; e < 2; ++e) {
              const Value value = m_.FMul(loop.getResult(4 + 4 * dt + 2 * half + e), inv);
              StoreThroughChain(emitter, b_, loc_, value, *a_.attn, a_.chains[out],
                                {bi_, h_, t, m_.Add(q2, m_.C(8 * dt + e))}, ptr, dtype);
            }
          }
          continue;
        }
        auto first = b_.create<mlir::scf::IfOp>(loc_, first_of_row, false);
        mlir::OpBuilder::InsertPoint after_lse = b_.saveInsertionPoint();
        b_.setInsertionPoint(first.thenBlock()->getTerminator());
        const Value lse = m_.FAdd(loop.getResult(half), b_.create<mlir::math::LogOp>(loc_, l));
        StoreThroughChain(emitter, b_, loc_, lse, *a_.lse, a_.chains[out], {bi_, h_, t}, ptr,
                          dtype);
        b_.restoreInsertionPoint(after_lse);
      }
      emitter.RestoreCache(std::move(store_cache));
      b_.restoreInsertionPoint(after_store);
    }
  }

  WarpRowKernel& kernel_;
  const AttentionForward& a_;
  const TileMath m_;
  mlir::OpBuilder& b_;
  const mlir::Location loc_;
  const int64_t d_tiles_;
  bool pipelined_ = false;
  std::optional<SharedTile> k_tile_, v_tile_;
  std::vector<std::pair<const ir::Instruction*, SharedTile*>> tiles_;
  Value bi_, h_, row_lo_, row_hi_, blocks_;
  WarpLanes lanes_;
  std::vector<Fragment> q_frags_;
};

}  // namespace

StatusOr<TensorCoreForward> EmitTensorCoreForward(WarpRowKernel& kernel,
                                                  mlir::gpu::GPUModuleOp gpu_module,
                                                  const std::string& name,
                                                  const AttentionForward& a) {
  return TensorCoreForwardBuilder(kernel, a).Emit(gpu_module, name);
}

}  // namespace gptc::codegen
