// The scatter-add kernel (NAME, after NAME_init copied operand 0 into the
// result: Note [gather kernels] in gather_emitter.cc).
//
// Note [deterministic scatter-add]: result[p, idx[i], q] += updates[p, i, q]
// with the sum of every row in the order of i, so that a train step gives
// the same bits run after run (the embedding gradient's was the one float
// atomic of the gpt2 step: its adds of a repeated token landed in whatever
// order the blocks ran). A block owns kRows rows of the table and up to
// kColumns of their columns, so no other block touches what it adds to:
//   1. it scans the indices in rounds of kThreads * kPerThread, each thread a
//      contiguous run of kPerThread (one vector load when the indices are
//      whole runs: the warp's loads are then consecutive, each sector read
//      once; as scalar loads a lane's sector was read kPerThread times, and
//      the index scan moved 8x its bytes); the matches (indices into its rows)
//      get their places in index order from a block-wide prefix sum of the
//      threads' counts (shuffles within a warp, the warp totals in shared
//      memory), and go to a list in shared memory;
//   2. for each match in list order each thread adds its columns of the
//      update row to the rows' accumulators in shared memory;
//   3. at the end it adds the accumulators of the rows that had a match to
//      the result (which only it writes).
// Every block reads every index: kRows = 32 keeps that to N * V / 32 index
// reads (gpt2-124m b16: 103 MB from L2); the accumulators take 96 KiB of
// dynamic shared memory at 768 columns.
#include <algorithm>

#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"
#include "compiler/codegen/kernel_emitter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace gptc::codegen {
namespace {

using mlir::Value;
namespace arith = mlir::arith;
namespace LLVM = mlir::LLVM;

constexpr int64_t kThreads = 256;
constexpr int64_t kWarps = kThreads / 32;
constexpr int64_t kRows = 32;
constexpr int64_t kColumns = 768;
constexpr int64_t kPerThread = 4;
constexpr int64_t kRound = kThreads * kPerThread;

// The geometry: the table as [P, V, Q] around the scattered axis, N indices.
struct ScatterGeometry {
  int64_t p = 1, v = 1, q = 1, n = 1;
  int64_t columns = 1;  // per block: min(Q, kColumns)
  int64_t row_blocks = 1, column_blocks = 1;
  // Dynamic shared memory: the accumulators, the list, the warp totals and
  // the rows' flags, in that order (bytes from the start).
  int64_t list_at = 0, totals_at = 0, touched_at = 0, bytes = 0;
};

// The bytes of a thread's run of indices, loaded as one vector.
int64_t IndexRunBytes(ir::DType dtype) { return kPerThread * StorageBytes(dtype); }

ScatterGeometry GeometryOf(const ir::Instruction& inst) {
  const ir::Shape& table = inst.operand(0)->shape();
  const int64_t axis = inst.attrs().index;
  ScatterGeometry g;
  for (int64_t d = 0; d < table.rank(); ++d) {
    if (d < axis) g.p *= table.dim(d);
    if (d > axis) g.q *= table.dim(d);
  }
  g.v = table.dim(axis);
  g.n = inst.operand(1)->shape().num_elements();
  g.columns = std::min(g.q, kColumns);
  g.row_blocks = (g.v + kRows - 1) / kRows;
  g.column_blocks = (g.q + g.columns - 1) / g.columns;
  g.list_at = kRows * g.columns * 4;
  g.totals_at = g.list_at + kRound * 4;
  g.touched_at = g.totals_at + kWarps * 4;
  g.bytes = g.touched_at + kRows * 4;
  return g;
}

// Builds Note [deterministic scatter-add] in a kernel of 4 arguments
// (operand, indices, updates, result).
class ScatterAddBuilder {
 public:
  ScatterAddBuilder(const ir::Instruction& inst, const std::string& name,
                    mlir::gpu::GPUModuleOp gpu_module)
      : inst_(inst),
        g_(GeometryOf(inst)),
        b_(gpu_module.getContext()),
        loc_(b_.getUnknownLoc()),
        index_dtype_(inst.operand(1)->shape().dtype()) {
    func_ = CreateKernel(b_, gpu_module, name, 4, kThreads, 0);
    entry_ = &func_.getBody().front();
    const int64_t largest =
        std::max(inst.operand(0)->shape().num_elements(), inst.operand(2)->shape().num_elements());
    index_type_ = largest >= (int64_t{1} << 31) - kRound ? b_.getI64Type() : b_.getI32Type();
    shared_ = DynamicSharedBase(b_, gpu_module, name + "_shared");
  }

  KernelSpec Emit(const std::string& name) {
    Value tid = ToIndex(b_.create<mlir::gpu::ThreadIdOp>(loc_, mlir::gpu::Dimension::x));
    Value bid = ToIndex(b_.create<mlir::gpu::BlockIdOp>(loc_, mlir::gpu::Dimension::x));
    tid_ = tid;
    lane_ = Rem(tid, 32);
    warp_ = Div(tid, 32);
    column0_ = Mul(Rem(bid, g_.column_blocks), g_.columns);
    row0_ = Mul(Rem(Div(bid, g_.column_blocks), g_.row_blocks), kRows);
    p_ = Div(bid, g_.column_blocks * g_.row_blocks);
    ClearAccumulators();
    auto rounds = Loop(C(0), C(g_.n), C(kRound));
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPoint(rounds.getBody()->getTerminator());
      Round(rounds.getInductionVar());
    }
    AddToResult();
    KernelSpec spec;
    spec.name = name;
    spec.fusion = inst_.name();
    spec.kind = ir::FusionKind::kLoop;
    spec.grid = {g_.p * g_.row_blocks * g_.column_blocks, 1, 1};
    spec.block = {kThreads, 1, 1};
    spec.dynamic_shared_bytes = g_.bytes;
    spec.params = KernelParams(inst_, 1);
    if (g_.n % kPerThread == 0) spec.params[1].min_alignment = IndexRunBytes(index_dtype_);
    return spec;
  }

 private:
  Value C(int64_t v) {
    return b_.create<arith::ConstantOp>(loc_, b_.getIntegerAttr(index_type_, v));
  }
  Value ToIndex(Value v) { return b_.create<arith::IndexCastOp>(loc_, index_type_, v); }
  Value Add(Value x, Value y) { return b_.create<arith::AddIOp>(loc_, x, y); }
  Value Sub(Value x, Value y) { return b_.create<arith::SubIOp>(loc_, x, y); }
  Value Mul(Value x, int64_t y) { return b_.create<arith::MulIOp>(loc_, x, C(y)); }
  Value Div(Value x, int64_t y) { return b_.create<arith::DivUIOp>(loc_, x, C(y)); }
  Value Rem(Value x, int64_t y) { return b_.create<arith::RemUIOp>(loc_, x, C(y)); }
  Value Less(Value x, Value y) {
    return b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::ult, x, y);
  }
  Value I32(Value x) {
    return index_type_.getWidth() == 32 ? x : b_.create<arith::TruncIOp>(loc_, b_.getI32Type(), x);
  }
  Value FromI32(Value x) {
    return index_type_.getWidth() == 32 ? x : b_.create<arith::ExtUIOp>(loc_, index_type_, x);
  }
  // A pointer to `type` element `at` of dynamic shared memory from byte `base`.
  Value Shared(int64_t base, mlir::Type type, Value at) {
    Value bytes = b_.create<LLVM::GEPOp>(loc_, shared_.getType(), b_.getI8Type(), shared_,
                                         mlir::ValueRange{C(base)});
    return b_.create<LLVM::GEPOp>(loc_, shared_.getType(), type, bytes, mlir::ValueRange{at});
  }
  // A loop at the insertion point, which stays after it.
  mlir::scf::ForOp Loop(Value begin, Value end, Value step) {
    mlir::OpBuilder::InsertionGuard guard(b_);
    return mlir::cast<mlir::scf::ForOp>(CreateFor(b_, loc_, begin, end, step, {}));
  }
  // The columns of this block: qc = min(columns, Q - column0).
  Value BlockColumns() {
    if (g_.q % g_.columns == 0) return C(g_.columns);
    return b_.create<arith::MinUIOp>(loc_, C(g_.columns), Sub(C(g_.q), column0_));
  }

  // The accumulators and the rows' flags to zero (before the first round's
  // barriers).
  void ClearAccumulators() {
    auto clear = Loop(tid_, C(kRows * g_.columns), C(kThreads));
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPoint(clear.getBody()->getTerminator());
      b_.create<LLVM::StoreOp>(loc_, ScalarConstant(b_, loc_, ir::DType::kF32, 0),
                               Shared(0, b_.getF32Type(), clear.getInductionVar()));
    }
    auto first = b_.create<mlir::scf::IfOp>(loc_, Less(tid_, C(kRows)), false);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPoint(first.thenBlock()->getTerminator());
    b_.create<LLVM::StoreOp>(loc_, b_.create<arith::ConstantOp>(loc_, b_.getI32IntegerAttr(0)),
                             Shared(g_.touched_at, b_.getI32Type(), tid_));
  }

  // One round of Note [deterministic scatter-add] over indices base ..
  // base + kRound - 1: the matches, their places, the list, the adds.
  void Round(Value base) {
    Value first = Add(base, Mul(tid_, kPerThread));
    std::vector<Value> index(kPerThread), row(kPerThread), match(kPerThread);
    Value count = b_.create<arith::ConstantOp>(loc_, b_.getI32IntegerAttr(0));
    const std::vector<Value> loaded = LoadIndices(first);
    for (int64_t k = 0; k < kPerThread; ++k) {
      index[k] = Add(first, C(k));
      Value in = Less(index[k], C(g_.n));
      Value idx = loaded[k];
      // The row, clamped into the table as the gather clamps it.
      if (index_dtype_ == ir::DType::kU16) {
        idx = b_.create<arith::ExtUIOp>(loc_, index_type_, idx);
      } else if (index_type_.getWidth() == 64) {
        idx = b_.create<arith::ExtSIOp>(loc_, index_type_, idx);
      }
      idx = b_.create<arith::MaxSIOp>(loc_, idx, C(0));
      idx = b_.create<arith::MinSIOp>(loc_, idx, C(g_.v - 1));
      row[k] = Sub(idx, row0_);
      match[k] = b_.create<arith::AndIOp>(loc_, in, Less(row[k], C(kRows)));  // unsigned: >= 0
      count = b_.create<arith::AddIOp>(loc_, count,
                                       b_.create<arith::ExtUIOp>(loc_, b_.getI32Type(), match[k]));
    }
    // The block-wide exclusive prefix of `count`: within the warp by
    // shuffles, then the totals of the warps before this one.
    Value inclusive = count;
    for (int32_t offset = 1; offset < 32; offset *= 2) {
      Value from =
          b_.create<mlir::gpu::ShuffleOp>(loc_, inclusive, offset, 32, mlir::gpu::ShuffleMode::UP)
              .getShuffleResult();
      Value has = Less(C(offset - 1), lane_);  // lane >= offset
      inclusive = b_.create<arith::AddIOp>(
          loc_, inclusive,
          b_.create<arith::SelectOp>(loc_, has, from,
                                     b_.create<arith::ConstantOp>(loc_, b_.getI32IntegerAttr(0))));
    }
    {
      auto last = b_.create<mlir::scf::IfOp>(
          loc_, b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::eq, lane_, C(31)), false);
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPoint(last.thenBlock()->getTerminator());
      b_.create<LLVM::StoreOp>(loc_, inclusive, Shared(g_.totals_at, b_.getI32Type(), warp_));
    }
    b_.create<mlir::gpu::BarrierOp>(loc_);
    Value before = b_.create<arith::ConstantOp>(loc_, b_.getI32IntegerAttr(0)), total = before;
    for (int64_t w = 0; w < kWarps; ++w) {
      Value t = b_.create<LLVM::LoadOp>(loc_, b_.getI32Type(),
                                        Shared(g_.totals_at, b_.getI32Type(), C(w)));
      total = b_.create<arith::AddIOp>(loc_, total, t);
      before = b_.create<arith::AddIOp>(
          loc_, before,
          b_.create<arith::SelectOp>(loc_, Less(C(w), warp_), t,
                                     b_.create<arith::ConstantOp>(loc_, b_.getI32IntegerAttr(0))));
    }
    Value place = FromI32(
        b_.create<arith::SubIOp>(loc_, b_.create<arith::AddIOp>(loc_, before, inclusive), count));
    for (int64_t k = 0; k < kPerThread; ++k) {
      auto put = b_.create<mlir::scf::IfOp>(loc_, match[k], false);
      {
        mlir::OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPoint(put.thenBlock()->getTerminator());
        // The match as (i - base) * kRows + row: below kRound * kRows.
        Value packed = Add(Mul(Sub(index[k], base), kRows), row[k]);
        b_.create<LLVM::StoreOp>(loc_, I32(packed), Shared(g_.list_at, b_.getI32Type(), place));
      }
      place = Add(place, FromI32(b_.create<arith::ExtUIOp>(loc_, b_.getI32Type(), match[k])));
    }
    b_.create<mlir::gpu::BarrierOp>(loc_);
    AddMatches(base, FromI32(total));
    b_.create<mlir::gpu::BarrierOp>(loc_);  // the list and totals are rewritten next round
  }

  // Indices first .. first + kPerThread - 1, clamped into the N: one vector
  // when N is whole runs (the last round's runs past N load the last run),
  // else an element at a time.
  std::vector<Value> LoadIndices(Value first) {
    std::vector<Value> loaded;
    const Value indices = entry_->getArgument(1);
    if (g_.n % kPerThread != 0) {
      for (int64_t k = 0; k < kPerThread; ++k) {
        loaded.push_back(LoadElement(b_, loc_, indices,
                                     b_.create<arith::MinUIOp>(loc_, Add(first, C(k)), C(g_.n - 1)),
                                     index_dtype_));
      }
      return loaded;
    }
    const mlir::Type storage = StorageType(b_.getContext(), index_dtype_);
    const Value at = b_.create<LLVM::GEPOp>(
        loc_, indices.getType(), storage, indices,
        mlir::ValueRange{b_.create<arith::MinUIOp>(loc_, first, C(g_.n - kPerThread))},
        /*inbounds=*/true);
    const Value vector = b_.create<LLVM::LoadOp>(loc_, mlir::VectorType::get({kPerThread}, storage),
                                                 at, IndexRunBytes(index_dtype_));
    for (int64_t k = 0; k < kPerThread; ++k) {
      loaded.push_back(b_.create<LLVM::ExtractElementOp>(
          loc_, vector, b_.create<arith::ConstantOp>(loc_, b_.getI32IntegerAttr(k))));
    }
    return loaded;
  }

  // For each match of the list in order, this thread's columns of its
  // update row to the row's accumulators.
  void AddMatches(Value base, Value total) {
    auto matches = Loop(C(0), total, C(1));
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPoint(matches.getBody()->getTerminator());
    Value packed = FromI32(b_.create<LLVM::LoadOp>(
        loc_, b_.getI32Type(), Shared(g_.list_at, b_.getI32Type(), matches.getInductionVar())));
    Value i = Add(base, Div(packed, kRows));
    Value row = Rem(packed, kRows);
    {
      auto flag = b_.create<mlir::scf::IfOp>(
          loc_, b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::eq, tid_, C(0)), false);
      mlir::OpBuilder::InsertionGuard flag_guard(b_);
      b_.setInsertionPoint(flag.thenBlock()->getTerminator());
      b_.create<LLVM::StoreOp>(loc_, b_.create<arith::ConstantOp>(loc_, b_.getI32IntegerAttr(1)),
                               Shared(g_.touched_at, b_.getI32Type(), row));
    }
    // updates[p, i, column0 + c] for c = tid, tid + kThreads, ... < qc.
    Value update_row = Add(Mul(Add(Mul(p_, g_.n), i), g_.q), column0_);
    Value acc_row = Mul(row, g_.columns);
    auto columns = Loop(tid_, BlockColumns(), C(kThreads));
    b_.setInsertionPoint(columns.getBody()->getTerminator());
    Value c = columns.getInductionVar();
    Value update =
        LoadElement(b_, loc_, entry_->getArgument(2), Add(update_row, c), ir::DType::kF32);
    Value at = Shared(0, b_.getF32Type(), Add(acc_row, c));
    Value sum =
        b_.create<arith::AddFOp>(loc_, b_.create<LLVM::LoadOp>(loc_, b_.getF32Type(), at), update);
    b_.create<LLVM::StoreOp>(loc_, sum, at);
  }

  // The accumulators of the rows that had a match, added to the result.
  void AddToResult() {
    auto rows = Loop(C(0), C(kRows), C(1));
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPoint(rows.getBody()->getTerminator());
    Value r = rows.getInductionVar();
    Value touched =
        b_.create<LLVM::LoadOp>(loc_, b_.getI32Type(), Shared(g_.touched_at, b_.getI32Type(), r));
    Value live = b_.create<arith::AndIOp>(
        loc_,
        b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::ne, touched,
                                 b_.create<arith::ConstantOp>(loc_, b_.getI32IntegerAttr(0))),
        Less(Add(row0_, r), C(g_.v)));
    auto if_live = b_.create<mlir::scf::IfOp>(loc_, live, false);
    b_.setInsertionPoint(if_live.thenBlock()->getTerminator());
    Value result_row = Add(Mul(Add(Mul(p_, g_.v), Add(row0_, r)), g_.q), column0_);
    Value acc_row = Mul(r, g_.columns);
    auto columns = Loop(tid_, BlockColumns(), C(kThreads));
    b_.setInsertionPoint(columns.getBody()->getTerminator());
    Value c = columns.getInductionVar();
    Value result = entry_->getArgument(3);
    Value out = b_.create<LLVM::GEPOp>(loc_, result.getType(), b_.getF32Type(), result,
                                       mlir::ValueRange{Add(result_row, c)}, /*inbounds=*/true);
    Value acc =
        b_.create<LLVM::LoadOp>(loc_, b_.getF32Type(), Shared(0, b_.getF32Type(), Add(acc_row, c)));
    b_.create<LLVM::StoreOp>(
        loc_,
        b_.create<arith::AddFOp>(loc_, b_.create<LLVM::LoadOp>(loc_, b_.getF32Type(), out), acc),
        out);
  }

  const ir::Instruction& inst_;
  const ScatterGeometry g_;
  mlir::OpBuilder b_;
  mlir::Location loc_;
  const ir::DType index_dtype_;
  mlir::gpu::GPUFuncOp func_;
  mlir::Block* entry_ = nullptr;
  mlir::IntegerType index_type_;
  Value shared_, tid_, lane_, warp_, row0_, column0_, p_;
};

class ScatterAddEmitter : public KernelEmitter {
 public:
  std::string_view Name() const override { return "scatter_add"; }

  StatusOr<KernelSpec> Emit(const ir::Instruction& inst, const std::string& name,
                            mlir::gpu::GPUModuleOp gpu_module) const override {
    if (inst.opcode() != ir::Opcode::kScatterAdd) {
      return Error("%{}: not a scatter-add", inst.name());
    }
    const ir::Shape& operand = inst.operand(0)->shape();
    if (operand.dtype() != ir::DType::kF32 || inst.operand(2)->shape().dtype() != ir::DType::kF32) {
      return Error("%{}: scatter-add of {} is not supported (f32 only)", inst.name(),
                   operand.ToString());
    }
    return ScatterAddBuilder(inst, name, gpu_module).Emit(name);
  }
};

}  // namespace

std::unique_ptr<KernelEmitter> MakeScatterAddEmitter() {
  return std::make_unique<ScatterAddEmitter>();
}

}  // namespace gptc::codegen
