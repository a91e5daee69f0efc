#include "compiler/codegen/attention_mma.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "compiler/codegen/affine_layout.h"
#include "compiler/codegen/attention_wgmma.h"
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
                       const std::string& name, int64_t rows, int64_t cols, int64_t stages,
                       TileLayout layout)
    : rows_(rows), cols_(cols), stages_(stages), layout_(layout) {
  const mlir::Location loc = b.getUnknownLoc();
  LLVM::GlobalOp global;
  {
    mlir::OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(gpu_module.getBody());
    auto type = LLVM::LLVMArrayType::get(b.getI16Type(), bytes() / 2);
    // Note [swizzled tiles]: the swizzle reads address bits 7-9, so a
    // swizzled tile starts at a multiple of 1024 bytes.
    global = b.create<LLVM::GlobalOp>(
        loc, type, /*isConstant=*/false, LLVM::Linkage::Internal, name, mlir::Attribute(),
        /*alignment=*/layout == TileLayout::kSwizzled ? 1024 : 16, /*addrSpace=*/3);
  }
  base_ = b.create<LLVM::AddressOfOp>(loc, global);
}

int64_t SharedTile::swizzle_bytes() const { return SwizzleBytes(cols_); }

int64_t SharedTile::stride() const {
  return layout_ == TileLayout::kPadded ? cols_ + 8 : swizzle_bytes() / 2;
}

int64_t SharedTile::bytes() const {
  return stages_ * rows_ * (layout_ == TileLayout::kPadded ? stride() : cols_) * 2;
}

SharedTile SharedTile::Stage(mlir::OpBuilder& b, mlir::Location loc, Value stage) const {
  Value elements =
      b.create<arith::ConstantOp>(loc, b.getIntegerAttr(stage.getType(), bytes() / stages_ / 2));
  return Offset(b, loc, b.create<arith::MulIOp>(loc, stage, elements));
}

SharedTile SharedTile::Offset(mlir::OpBuilder& b, mlir::Location loc, Value elements) const {
  SharedTile view = *this;
  view.base_ = b.create<LLVM::GEPOp>(loc, base_.getType(), b.getI16Type(), base_,
                                     mlir::ValueRange{elements});
  return view;
}

Value SharedTile::AddressAt(mlir::OpBuilder& b, mlir::Location loc, int64_t row,
                            int64_t col) const {
  const int32_t at = static_cast<int32_t>(row * stride() + col);
  if (at == 0) return base_;
  return b.create<LLVM::GEPOp>(loc, base_.getType(), b.getI16Type(), base_,
                               llvm::ArrayRef<LLVM::GEPArg>{at});
}

Value SharedTile::Index(mlir::OpBuilder& b, mlir::Location loc, Value row, Value col) const {
  auto c = [&](int64_t v) {
    return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(row.getType(), v)).getResult();
  };
  if (layout_ == TileLayout::kPadded) {
    return b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, row, c(stride())), col);
  }
  // Note [swizzled tiles]: atom column col / (W / 2), row, the 16-byte
  // chunk XORed with the row's 128-byte line in its atom.
  const int64_t w = swizzle_bytes(), per_row = w / 2;
  Value atom = b.create<arith::DivUIOp>(loc, col, c(per_row));
  Value in_row = b.create<arith::RemUIOp>(loc, col, c(per_row));
  Value chunk = b.create<arith::DivUIOp>(loc, in_row, c(8));
  Value line = b.create<arith::RemUIOp>(
      loc, b.create<arith::DivUIOp>(loc, b.create<arith::MulIOp>(loc, row, c(w)), c(128)),
      c(w / 16));
  Value swizzled = b.create<arith::MulIOp>(loc, b.create<arith::XOrIOp>(loc, chunk, line), c(8));
  Value at = b.create<arith::AddIOp>(
      loc, b.create<arith::MulIOp>(loc, atom, c(rows_ * per_row)),
      b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, row, c(per_row)), swizzled));
  return b.create<arith::AddIOp>(loc, at, b.create<arith::RemUIOp>(loc, in_row, c(8)));
}

Value SharedTile::Address(mlir::OpBuilder& b, mlir::Location loc, Value row, Value col) const {
  return b.create<LLVM::GEPOp>(loc, base_.getType(), b.getI16Type(), base_,
                               mlir::ValueRange{Index(b, loc, row, col)});
}

void SharedTile::Store(mlir::OpBuilder& b, mlir::Location loc, Value row, Value col,
                       Value value) const {
  Value bits = b.create<arith::BitcastOp>(
      loc, b.getI16Type(), ConvertValue(b, loc, value, ir::DType::kF32, ir::DType::kBF16));
  b.create<LLVM::StoreOp>(loc, bits, Address(b, loc, row, col));
}

Value PackBf16(mlir::OpBuilder& b, mlir::Location loc, Value lo, Value hi) {
  // cvt.rn.bf16x2.f32 puts its first operand in the upper half: one
  // instruction where two rounded halves cost two converts and a move.
  Value pair = b.create<LLVM::CallIntrinsicOp>(loc, mlir::VectorType::get({2}, b.getBF16Type()),
                                               "llvm.nvvm.ff2bf16x2.rn", mlir::ValueRange{hi, lo})
                   .getResult(0);
  return b.create<LLVM::BitcastOp>(loc, b.getI32Type(), pair);
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
Value TileMath::Sub(Value x, Value y) const {
  return kernel_.b().create<arith::SubIOp>(kernel_.loc(), x, y);
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
Value TileMath::Min(Value x, int64_t y) const { return Min(x, C(y)); }
Value TileMath::Min(Value x, Value y) const {
  return kernel_.b().create<arith::MinUIOp>(kernel_.loc(), x, y);
}
Value TileMath::Less(Value x, Value y) const {
  return kernel_.b().create<arith::CmpIOp>(kernel_.loc(), arith::CmpIPredicate::ult, x, y);
}
Value TileMath::And(Value x, Value y) const {
  return kernel_.b().create<arith::AndIOp>(kernel_.loc(), x, y);
}
Value TileMath::Or(Value x, Value y) const {
  return kernel_.b().create<arith::OrIOp>(kernel_.loc(), x, y);
}
Value TileMath::Select(Value c, Value x, Value y) const {
  return kernel_.b().create<arith::SelectOp>(kernel_.loc(), c, x, y);
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
Value TileMath::FEq(Value x, Value y) const {
  return kernel_.b().create<arith::CmpFOp>(kernel_.loc(), arith::CmpFPredicate::OEQ, x, y);
}
Value TileMath::Fma(Value x, Value y, Value z) const {
  return kernel_.b().create<LLVM::FMAOp>(kernel_.loc(), x, y, z);
}
Value TileMath::Exp2(Value x) const {
  return kernel_.b()
      .create<LLVM::CallIntrinsicOp>(kernel_.loc(), kernel_.b().getF32Type(),
                                     "llvm.nvvm.ex2.approx.ftz.f", mlir::ValueRange{x})
      .getResult(0);
}
Value TileMath::Log2(Value x) const {
  return kernel_.b()
      .create<LLVM::CallIntrinsicOp>(kernel_.loc(), kernel_.b().getF32Type(),
                                     "llvm.nvvm.lg2.approx.ftz.f", mlir::ValueRange{x})
      .getResult(0);
}
namespace {

// `values` combined pairwise, level by level: a balanced tree.
template <typename Combine>
Value Tree(std::vector<Value> values, Combine combine) {
  while (values.size() > 1) {
    std::vector<Value> next;
    for (size_t i = 0; i + 1 < values.size(); i += 2)
      next.push_back(combine(values[i], values[i + 1]));
    if (values.size() % 2 == 1) next.push_back(values.back());
    values = std::move(next);
  }
  return values.front();
}

}  // namespace

Value TileMath::Sum(std::vector<Value> values) const {
  return Tree(std::move(values), [&](Value x, Value y) { return FAdd(x, y); });
}
Value TileMath::Max(std::vector<Value> values) const {
  return Tree(std::move(values), [&](Value x, Value y) { return FMax(x, y); });
}

namespace {

Value XorShuffle(WarpRowKernel& kernel, Value v, int32_t offset) {
  return kernel.b()
      .create<mlir::gpu::ShuffleOp>(kernel.loc(), v, offset, 32, mlir::gpu::ShuffleMode::XOR)
      .getShuffleResult();
}

}  // namespace

Value TileMath::RowMax(Value v) const {
  for (int32_t offset : {1, 2}) v = FMax(v, XorShuffle(kernel_, v, offset));
  return v;
}
Value TileMath::RowSum(Value v) const {
  for (int32_t offset : {1, 2}) v = FAdd(v, XorShuffle(kernel_, v, offset));
  return v;
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

std::optional<VectorSource> VectorSourceOf(const ir::Instruction& op, int64_t len, int64_t dim) {
  const ir::Shape& shape = op.shape();
  if (shape.rank() != 4 || shape.dim(2) != len || shape.dim(3) != dim) return std::nullopt;
  // Through converts only when the operand is the rounded bf16 value itself
  // (Note [rounded attention operands] in passes/fusion_planner.h): the
  // tile rounds it to itself.
  const std::optional<AffineLayout> layout = LayoutOfOperand(op);
  if (!layout || layout->buffer->shape().dtype() != ir::DType::kBF16 ||
      (shape.dtype() != ir::DType::kBF16 && shape.dtype() != ir::DType::kF32)) {
    return std::nullopt;
  }
  // Rows of whole 16-byte pieces: d contiguous, every row start a multiple
  // of 8 elements.
  const std::vector<int64_t>& st = layout->strides;
  if (st[3] != 1 || dim % 8 != 0 || layout->offset % 8 != 0) return std::nullopt;
  for (int i = 0; i < 3; ++i) {
    if (st[i] % 8 != 0 && shape.dim(i) != 1) return std::nullopt;
  }
  return VectorSource{layout->buffer, st[0], st[1], st[2], layout->offset};
}

namespace {

// The barrier after the block's stores into `tiles`; when wgmma reads them,
// after each thread made its stores visible to the async proxy (Note
// [swizzled tiles] in attention_wgmma.h).
void PublishTiles(mlir::OpBuilder& b, mlir::Location loc,
                  const std::vector<std::pair<const ir::Instruction*, SharedTile*>>& tiles) {
  if (std::any_of(tiles.begin(), tiles.end(),
                  [](const auto& t) { return t.second->layout() == TileLayout::kSwizzled; })) {
    FenceProxyAsync(b, loc);
  }
  b.create<mlir::gpu::BarrierOp>(loc);
}

// The element offset of (bi, h, row) in `source`'s parameter.
Value RowOffset(const TileMath& m, const VectorSource& source, Value bi, Value h, Value row) {
  return m.Add(m.Add(m.Add(m.Mul(bi, source.batch_pitch), m.Mul(h, source.head_pitch)),
                     m.Mul(row, source.row_pitch)),
               m.C(source.offset));
}

Value ElementAddress(WarpRowKernel& kernel, const VectorSource& source, Value at) {
  mlir::OpBuilder& b = kernel.b();
  const Value global = kernel.entry()->getArgument(source.param->attrs().index);
  return b.create<LLVM::GEPOp>(kernel.loc(), global.getType(), b.getI16Type(), global,
                               mlir::ValueRange{at}, /*inbounds=*/true);
}

// This thread's 16-byte pieces of a tile of rows block * 64 .. + 63 of `op`
// (Note [vector tile fill]): the tile row and column, whether the row is
// below len (else the piece is zeros; `from` reads the last row), and the
// global address.
struct VectorRow {
  Value r, col, in, from;
};
std::vector<VectorRow> VectorRows(WarpRowKernel& kernel, const WarpLanes& lanes, Value bi, Value h,
                                  Value block, int64_t len, int64_t dim,
                                  const VectorSource& source) {
  const TileMath m(kernel);
  constexpr int64_t kThreads = WarpRowKernel::kBlock;
  std::vector<VectorRow> rows;
  for (int64_t u = 0; u < kTileRows * dim / 8 / kThreads; ++u) {
    const Value v = m.Add(lanes.tid, m.C(kThreads * u));
    const Value r = m.Div(v, dim / 8);
    const Value col = m.Mul(m.Rem(v, dim / 8), 8);
    const Value row = m.Add(m.Mul(block, kTileRows), r);
    const Value in = m.Less(row, m.C(len));
    const Value at = m.Add(RowOffset(m, source, bi, h, m.Min(row, len - 1)), col);
    rows.push_back({r, col, in, ElementAddress(kernel, source, at)});
  }
  return rows;
}

}  // namespace

StatusOr<std::vector<Fragment>> LoadRowFragments(WarpRowKernel& kernel, const ir::Instruction& op,
                                                 Value bi, Value h, Value row_lo, Value row_hi,
                                                 int64_t dim, const WarpLanes& lanes) {
  mlir::OpBuilder& b = kernel.b();
  const mlir::Location loc = kernel.loc();
  const TileMath m(kernel);
  std::vector<Fragment> frags(dim / 16);
  const ir::Shape& shape = op.shape();
  if (std::optional<VectorSource> source = VectorSourceOf(op, shape.dim(2), dim)) {
    // Each register is two neighbouring elements of a row: one 4-byte load.
    const Value lo = m.Add(RowOffset(m, *source, bi, h, row_lo), lanes.q2);
    const Value hi = m.Add(RowOffset(m, *source, bi, h, row_hi), lanes.q2);
    const Value at[2] = {ElementAddress(kernel, *source, lo), ElementAddress(kernel, *source, hi)};
    for (int64_t kk = 0; kk < dim / 16; ++kk) {
      for (int64_t reg = 0; reg < 4; ++reg) {
        const int32_t col = static_cast<int32_t>(16 * kk + 8 * (reg / 2));
        Value address = at[reg % 2];
        if (col != 0) {
          address = b.create<LLVM::GEPOp>(loc, address.getType(), b.getI16Type(), address,
                                          llvm::ArrayRef<LLVM::GEPArg>{col}, /*inbounds=*/true);
        }
        frags[kk][reg] = b.create<LLVM::LoadOp>(loc, b.getI32Type(), address, /*alignment=*/4);
      }
    }
    return frags;
  }
  for (int64_t kk = 0; kk < dim / 16; ++kk) {
    for (int64_t reg = 0; reg < 4; ++reg) {
      const Value t = reg % 2 == 0 ? row_lo : row_hi;
      const Value d = m.Add(lanes.q2, m.C(16 * kk + 8 * (reg / 2)));
      ASSIGN_OR_RETURN(Value lo, kernel.LoadF32(op, {bi, h, t, d}));
      ASSIGN_OR_RETURN(Value hi, kernel.LoadF32(op, {bi, h, t, m.Add(d, m.C(1))}));
      frags[kk][reg] = PackBf16(b, loc, lo, hi);
    }
  }
  return frags;
}

bool CanPipelineTiles(const std::vector<const ir::Instruction*>& ops, int64_t len, int64_t dim) {
  constexpr int64_t kThreads = WarpRowKernel::kBlock;
  if (len % kTileRows != 0 || (kTileRows * dim / 8) % kThreads != 0 || dim % 8 != 0) return false;
  // Each thread's pieces are whole rows' worth of passes: dim / 8 pieces a
  // row divide the block's threads.
  if (kThreads % (dim / 8) != 0) return false;
  return std::all_of(ops.begin(), ops.end(), [&](const ir::Instruction* op) {
    return VectorSourceOf(*op, len, dim).has_value();
  });
}

TilePipeline::TilePipeline(WarpRowKernel& kernel, const WarpLanes& lanes, Value bi, Value h,
                           int64_t len, int64_t dim,
                           const std::vector<std::pair<const ir::Instruction*, SharedTile*>>& tiles)
    : kernel_(kernel) {
  const TileMath m(kernel);
  constexpr int64_t kThreads = WarpRowKernel::kBlock;
  // Piece u of this thread: tile row tid / (dim / 8) + u * rows_per_pass,
  // column 8 (tid % (dim / 8)); dim / 8 divides the block's 128 threads.
  const int64_t pieces_per_row = dim / 8, rows_per_pass = kThreads / pieces_per_row;
  const Value r0 = m.Div(lanes.tid, pieces_per_row);
  const Value col = m.Mul(m.Rem(lanes.tid, pieces_per_row), 8);
  for (size_t i = 0; i < tiles.size(); ++i) {
    const VectorSource source = *VectorSourceOf(*tiles[i].first, len, dim);
    tiles_.push_back(tiles[i].second);
    const Value first = m.Add(RowOffset(m, source, bi, h, r0), col);
    // A swizzled tile's rows r0 + u * rows_per_pass share r0's swizzle: the
    // passes' rows are multiples of its 8-row atoms apart.
    const Value shared = tiles[i].second->Index(kernel.b(), kernel.loc(), r0, col);
    for (int64_t u = 0; u < kTileRows / rows_per_pass; ++u) {
      pieces_.push_back(
          {i, m.Add(shared, m.C(u * rows_per_pass * tiles[i].second->stride())),
           ElementAddress(kernel, source, m.Add(first, m.C(u * rows_per_pass * source.row_pitch))),
           kTileRows * source.row_pitch});
    }
  }
}

void TilePipeline::Copy(size_t tile, Value block, Value when) {
  mlir::OpBuilder& b = kernel_.b();
  const mlir::Location loc = kernel_.loc();
  const TileMath m(kernel_);
  mlir::OpBuilder::InsertionGuard guard(b);
  if (when) {
    auto if_op = b.create<mlir::scf::IfOp>(loc, when, false);
    b.setInsertionPoint(if_op.thenBlock()->getTerminator());
  }
  const SharedTile to = StageOf(tile, block);
  for (const Piece& piece : pieces_) {
    if (piece.tile != tile) continue;
    const Value from =
        b.create<LLVM::GEPOp>(loc, piece.global.getType(), b.getI16Type(), piece.global,
                              mlir::ValueRange{m.Mul(block, piece.block_pitch)},
                              /*inbounds=*/true);
    // cp.async reads a global address: the kernel's pointers are generic.
    const Value global =
        b.create<LLVM::AddrSpaceCastOp>(loc, LLVM::LLVMPointerType::get(b.getContext(), 1), from);
    const SharedTile at = to.Offset(b, loc, piece.shared);
    b.create<LLVM::CallIntrinsicOp>(loc, mlir::TypeRange{},
                                    "llvm.nvvm.cp.async.cg.shared.global.16",
                                    mlir::ValueRange{at.AddressAt(b, loc, 0, 0), global});
  }
}

void TilePipeline::Commit() { kernel_.b().create<NVVM::CpAsyncCommitGroupOp>(kernel_.loc()); }

void TilePipeline::Wait() {
  mlir::OpBuilder& b = kernel_.b();
  b.create<NVVM::CpAsyncWaitGroupOp>(kernel_.loc(), 0);
  std::vector<std::pair<const ir::Instruction*, SharedTile*>> tiles;
  for (SharedTile* tile : tiles_) tiles.push_back({nullptr, tile});
  PublishTiles(b, kernel_.loc(), tiles);
}

SharedTile TilePipeline::StageOf(size_t tile, Value block) const {
  const TileMath m(kernel_);
  return tiles_[tile]->Stage(kernel_.b(), kernel_.loc(), m.Rem(block, 2));
}

void TilePipeline::Issue(Value block, Value when) {
  {
    mlir::OpBuilder& b = kernel_.b();
    mlir::OpBuilder::InsertionGuard guard(b);
    if (when) {
      auto if_op = b.create<mlir::scf::IfOp>(kernel_.loc(), when, false);
      b.setInsertionPoint(if_op.thenBlock()->getTerminator());
    }
    for (size_t tile = 0; tile < tiles_.size(); ++tile) Copy(tile, block);
  }
  Commit();
}

std::vector<SharedTile> TilePipeline::Await(Value block, Value end) {
  const TileMath m(kernel_);
  Wait();
  const Value next = m.Add(block, m.C(1));
  Issue(next, m.Less(next, end));
  std::vector<SharedTile> now;
  for (size_t tile = 0; tile < tiles_.size(); ++tile) now.push_back(StageOf(tile, block));
  return now;
}

Status FillTiles(WarpRowKernel& kernel, const WarpLanes& lanes, Value bi, Value h, Value block,
                 int64_t len, int64_t dim,
                 const std::vector<std::pair<const ir::Instruction*, SharedTile*>>& tiles) {
  mlir::OpBuilder& b = kernel.b();
  const mlir::Location loc = kernel.loc();
  FusedEmitter& emitter = kernel.emitter();
  const TileMath m(kernel);
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
  // Note [vector tile fill]: an operand with a VectorSource (Note [strided
  // operands]) needs no chain and no rounding: its rows go to shared memory
  // 16 bytes a load, straight from global memory, every load of the thread
  // issued before its stores.
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
    for (const VectorRow& v : VectorRows(kernel, lanes, bi, h, block, len, dim, *source)) {
      vectors.push_back({tile, v.r, v.col, v.in,
                         b.create<LLVM::LoadOp>(loc, vector_type, v.from, /*alignment=*/16)});
    }
  }
  for (const Vector& v : vectors) {
    const Value zero = b.create<LLVM::ZeroOp>(loc, v.value.getType());
    b.create<LLVM::StoreOp>(loc, m.Select(v.in, v.value, zero), v.tile->Address(b, loc, v.r, v.col),
                            /*alignment=*/16);
  }
  if (by_element.empty()) {
    PublishTiles(b, loc, tiles);
    return Status::Ok();
  }
  mlir::OpBuilder::InsertPoint after_fill = b.saveInsertionPoint();
  FusedEmitter::Cache saved = emitter.SaveCache();
  auto fill =
      mlir::cast<mlir::scf::ForOp>(CreateFor(b, loc, m.C(0), m.C(per_thread / batch), m.C(1), {}));
  const Value first = m.Add(lanes.tid, m.Mul(fill.getInductionVar(), kThreads * batch));
  struct Staged {
    SharedTile* tile;
    Value r, col, value;
  };
  std::vector<Staged> staged;
  for (int64_t u = 0; u < batch; ++u) {
    const Value i = m.Add(first, m.C(kThreads * u));
    const Value r = m.Div(i, dim);
    const Value col = m.Rem(i, dim);
    const Value row = m.Add(m.Mul(block, kTileRows), r);
    const Value in = m.Less(row, m.C(len));
    const Value clamped = m.Min(row, len - 1);
    for (const auto& [op, tile] : by_element) {
      ASSIGN_OR_RETURN(Value x, kernel.LoadF32(*op, {bi, h, clamped, col}));
      staged.push_back({tile, r, col, m.Select(in, x, kernel.F32(0))});
    }
  }
  for (const Staged& st : staged) st.tile->Store(b, loc, st.r, st.col, st.value);
  emitter.RestoreCache(std::move(saved));
  b.restoreInsertionPoint(after_fill);
  b.setInsertionPointAfter(fill);
  PublishTiles(b, loc, tiles);
  return Status::Ok();
}

std::vector<Fragment> TimesTileTransposed(WarpRowKernel& kernel, const std::vector<Fragment>& a,
                                          const SharedTile& tile, const WarpLanes& lanes) {
  mlir::OpBuilder& b = kernel.b();
  const mlir::Location loc = kernel.loc();
  const TileMath m(kernel);
  const SharedTile lane_view =
      tile.Offset(b, loc, m.Add(m.Mul(lanes.xt_row, tile.stride()), lanes.xt_col));
  const Value zero = kernel.F32(0);
  std::vector<Fragment> out(kColumnTiles, Fragment{zero, zero, zero, zero});
  for (int64_t nt = 0; nt < kColumnTiles; nt += 2) {
    for (size_t kk = 0; kk < a.size(); ++kk) {
      Fragment bx = LdMatrixX4(
          b, loc, lane_view.AddressAt(b, loc, 8 * nt, 16 * static_cast<int64_t>(kk)), false);
      out[nt] = Mma(b, loc, a[kk], bx[0], bx[1], out[nt]);
      out[nt + 1] = Mma(b, loc, a[kk], bx[2], bx[3], out[nt + 1]);
    }
  }
  return out;
}

std::vector<Fragment> PackA(mlir::OpBuilder& b, mlir::Location loc,
                            const std::vector<Fragment>& x) {
  std::vector<Fragment> a;
  for (size_t kk = 0; 2 * kk < x.size(); ++kk) {
    const Fragment& lo = x[2 * kk];
    const Fragment& hi = x[2 * kk + 1];
    a.push_back({PackBf16(b, loc, lo[0], lo[1]), PackBf16(b, loc, lo[2], lo[3]),
                 PackBf16(b, loc, hi[0], hi[1]), PackBf16(b, loc, hi[2], hi[3])});
  }
  return a;
}

void AccumulateTimesTile(WarpRowKernel& kernel, const std::vector<Fragment>& a,
                         const SharedTile& tile, const WarpLanes& lanes,
                         std::vector<Fragment>& acc) {
  mlir::OpBuilder& b = kernel.b();
  const mlir::Location loc = kernel.loc();
  const TileMath m(kernel);
  const SharedTile lane_view =
      tile.Offset(b, loc, m.Add(m.Mul(lanes.x_row, tile.stride()), lanes.x_col));
  for (size_t kk = 0; kk < a.size(); ++kk) {
    for (size_t dt = 0; dt < acc.size(); dt += 2) {
      Fragment bx = LdMatrixX4(
          b, loc,
          lane_view.AddressAt(b, loc, 16 * static_cast<int64_t>(kk), 8 * static_cast<int64_t>(dt)),
          true);
      acc[dt] = Mma(b, loc, a[kk], bx[0], bx[1], acc[dt]);
      acc[dt + 1] = Mma(b, loc, a[kk], bx[2], bx[3], acc[dt + 1]);
    }
  }
}

Value BlockNeedsMask(const TileMath& m, Value q0, Value k0, bool causal, int64_t tq, int64_t tk) {
  Value needs;
  auto either = [&](Value c) { needs = needs ? m.Or(needs, c) : c; };
  if (causal) either(m.Less(q0, m.Add(k0, m.C(kTileRows - 1))));  // the last key passes q0
  if (tk % kTileRows != 0) either(m.Less(m.C(tk), m.Add(k0, m.C(kTileRows))));
  if (tq % kTileRows != 0) either(m.Less(m.C(tq), m.Add(q0, m.C(kTileRows))));
  return needs;
}

std::vector<Fragment> MaskInBranch(WarpRowKernel& kernel, Value needs_mask, std::vector<Fragment> x,
                                   const std::function<Value(int64_t nt, int64_t e)>& visible,
                                   Value fill) {
  mlir::OpBuilder& b = kernel.b();
  const mlir::Location loc = kernel.loc();
  auto branch = b.create<mlir::scf::IfOp>(
      loc, std::vector<mlir::Type>(4 * kColumnTiles, b.getF32Type()), needs_mask, true);
  {
    mlir::OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    std::vector<Value> masked;
    for (int64_t nt = 0; nt < kColumnTiles; ++nt) {
      for (int64_t e = 0; e < 4; ++e) {
        const Value shown = visible(nt, e);
        masked.push_back(shown ? b.create<arith::SelectOp>(loc, shown, x[nt][e], fill).getResult()
                               : x[nt][e]);
      }
    }
    b.create<mlir::scf::YieldOp>(loc, masked);
    b.setInsertionPointToStart(branch.elseBlock());
    std::vector<Value> same;
    for (const Fragment& f : x) same.insert(same.end(), f.begin(), f.end());
    b.create<mlir::scf::YieldOp>(loc, same);
  }
  for (int64_t i = 0; i < 4 * kColumnTiles; ++i) x[i / 4][i % 4] = branch.getResult(i);
  return x;
}

Value KeyVisible(const TileMath& m, Value query, Value key, bool causal, int64_t tq, int64_t tk) {
  Value visible;
  auto both = [&](Value c) { visible = visible ? m.And(visible, c) : c; };
  if (tk % kTileRows != 0) both(m.Less(key, m.C(tk)));
  if (causal) both(m.Less(key, m.Add(query, m.C(1))));
  if (tq % kTileRows != 0) both(m.Less(query, m.C(tq)));
  return visible;
}

}  // namespace gptc::codegen
