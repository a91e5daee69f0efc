// The column-reduction emitter (kind=reduction whose reduces are over leading
// dims): bias and layer-norm gain/bias gradients (f32[B,T,C] -> f32[C]) and
// full reductions to a scalar (loss mean, the grad-norm sum of squares).
// PlanColumnReduction (column_reduction_plan.h, with the Notes: [column
// reduction], [column reduction batches], [column totals in shared memory],
// [split column reductions]) decides the kernel; this file builds it.
#include <limits>
#include <map>
#include <set>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/column_reduction_plan.h"
#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"
#include "compiler/codegen/kernel_emitter.h"
#include "compiler/codegen/member_partials.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace gptc::codegen {
namespace {

using mlir::Value;
namespace arith = mlir::arith;

constexpr int64_t kWarp = 32;

// Note [warp totals]: a batch of full reductions (one column: tx == 1)
// whose reduces all combine alike is totalled without a tree: warp w sums
// the block partials of reduces w, w + warps, ... in a loop over the batch
// (lane l takes partials l, l + 32, ..., then a butterfly of shuffles), and
// its lane 0 stores the total. The code is the same for any batch size:
// the per-reduce trees (10 levels of shared loads and stores for each of
// the 148 reduces of gpt2-124m's grad norm) were 80% of that kernel's PTX
// and most of its compile time. The order of the sums is fixed: the result
// is deterministic. Needs totals and partials numbered in batch order
// (PlanColumnReduction numbers them so).
bool WarpTotals(const ColumnReductionPlan& plan, const std::vector<const ir::Instruction*>& batch) {
  if (plan.tx != 1 || plan.ty % kWarp != 0) return false;
  for (const ir::Instruction* r : batch) {
    if (r->attrs().reduce_kind != batch[0]->attrs().reduce_kind) return false;
  }
  return true;
}

void EmitWarpTotals(mlir::OpBuilder& b, FusedEmitter& emitter, mlir::Block* entry,
                    const ColumnReductionPlan& plan, ColumnPart part,
                    const std::vector<const ir::Instruction*>& batch, Value tid, Value chunk,
                    Value shared, int64_t scratch_arg) {
  mlir::Location loc = b.getUnknownLoc();
  auto c = [&](int64_t v) { return emitter.IndexConstant(v); };
  auto shared_at = [&](Value v) {
    return b.create<arith::IndexCastOp>(loc, b.getIndexType(), v).getResult();
  };
  const ir::ReduceKind kind = batch[0]->attrs().reduce_kind;
  const int64_t block = plan.block();
  mlir::OpBuilder::InsertionGuard guard(b);
  Value warp = b.create<arith::DivUIOp>(loc, tid, c(kWarp));
  Value lane = b.create<arith::RemUIOp>(loc, tid, c(kWarp));
  auto over = mlir::cast<mlir::scf::ForOp>(
      CreateFor(b, loc, warp, c(static_cast<int64_t>(batch.size())), c(block / kWarp), {}));
  Value i = over.getInductionVar();
  // Lane l: partials l, l + 32, ... of reduce i (shared[i][y], y < TY).
  double identity = kind == ir::ReduceKind::kSum ? 0.0 : -std::numeric_limits<double>::infinity();
  Value row = b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, i, c(block)), lane);
  auto sum = mlir::cast<mlir::scf::ForOp>(
      CreateFor(b, loc, c(0), c(plan.ty / kWarp), c(1),
                mlir::ValueRange{ScalarConstant(b, loc, ir::DType::kF32, identity)}));
  Value at = b.create<arith::AddIOp>(loc, row,
                                     b.create<arith::MulIOp>(loc, sum.getInductionVar(), c(kWarp)));
  Value x = b.create<mlir::memref::LoadOp>(loc, shared, shared_at(at));
  b.create<mlir::scf::YieldOp>(loc, CombineReduce(b, loc, kind, sum.getRegionIterArgs()[0], x));
  b.setInsertionPointAfter(sum);
  Value acc = sum.getResult(0);
  for (int32_t offset = kWarp / 2; offset > 0; offset /= 2) {
    auto shuffle = b.create<mlir::gpu::ShuffleOp>(loc, acc, offset, static_cast<int32_t>(kWarp),
                                                  mlir::gpu::ShuffleMode::XOR);
    acc = CombineReduce(b, loc, kind, acc, shuffle.getShuffleResult());
  }
  Value first = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, lane, c(0));
  auto if_first = b.create<mlir::scf::IfOp>(loc, first, false);
  b.setInsertionPoint(if_first.thenBlock()->getTerminator());
  // Reduce i of the batch is partial_index(batch[0]) + i (batch order).
  Value r = b.create<arith::AddIOp>(loc, i, c(plan.partial_index.at(batch[0])));
  if (part == ColumnPart::kPartials) {
    // scratch[r * G + g] (one column).
    Value slot =
        b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, r, c(plan.chunks)), chunk);
    StoreElement(b, loc, acc, entry->getArgument(scratch_arg), slot, ir::DType::kF32);
  } else {
    Value slot = b.create<arith::AddIOp>(loc, i, c(plan.total_slot.at(batch[0])));
    b.create<mlir::memref::StoreOp>(loc, acc, shared, mlir::ValueRange{shared_at(slot)});
  }
}

using Batch = std::vector<const ir::Instruction*>;

// Builds kernel `part` of a column reduction from its plan into
// `gpu_module`: the thread's column and row lane, then for each batch its
// row loops, the tree over the block's rows and the totals, then the
// outputs.
class ColumnReductionBuilder : public FusedKernelBuilder {
 public:
  ColumnReductionBuilder(const ir::Instruction& fusion, const ir::Computation& fused,
                         const ColumnReductionPlan& plan, ColumnPart part, const std::string& name,
                         mlir::gpu::GPUModuleOp gpu_module)
      : FusedKernelBuilder(gpu_module, name,
                           ScratchArgument(fused) + (part != ColumnPart::kWhole ? 1 : 0),
                           plan.block(), plan.shared_floats, plan.wide, "reduction", nullptr,
                           [this](const ir::Instruction& r, const ElementIndex& index) {
                             return ReadTotal(r, index);
                           }),
        fusion_(fusion),
        plan_(plan),
        part_(part),
        scratch_arg_(ScratchArgument(fused)) {}

  Status Build() {
    EmitThreadPosition();
    if (!plan_.classes.empty()) {  // Note [member partials]: the final kernel
      EmitMemberTotals(b_, emitter_, entry_, plan_, tid_, shared_, scratch_arg_);
      b_.create<mlir::gpu::BarrierOp>(loc_);
      reduced_.insert(plan_.reduces.begin(), plan_.reduces.end());
    }
    for (const Batch& batch : plan_.batches) RETURN_IF_ERROR(EmitBatch(batch));
    if (part_ == ColumnPart::kPartials) return Status::Ok();
    return EmitOutputs();
  }

 private:
  // The kernel argument after the parameters and outputs.
  static int64_t ScratchArgument(const ir::Computation& fused) {
    return static_cast<int64_t>(fused.parameters().size() + FusionOutputs(fused).size());
  }
  Value C(int64_t v) { return emitter_.IndexConstant(v); }
  Value SharedIndex(Value v) {
    return b_.create<arith::IndexCastOp>(loc_, b_.getIndexType(), v).getResult();
  }

  // Reduce `r`'s total of the thread's column, from shared memory (Note
  // [column totals in shared memory]).
  StatusOr<Value> ReadTotal(const ir::Instruction& r, const ElementIndex& index) {
    if (!reduced_.count(&r)) {
      return Error("{}: used before its columns are reduced (not a column-local fusion)",
                   Describe(r));
    }
    bool own = r.shape().num_elements() == 1 || index.linear == column_ ||
               (index.multi == column_multi_ && !index.multi.empty());
    if (!own) {
      return Error(
          "{}: read at another column than the thread's own (a layout op between "
          "a reduce and its use is not supported in a column reduction)",
          Describe(r));
    }
    Value slot = b_.create<arith::AddIOp>(loc_, lane_x_, C(plan_.total_slot.at(&r)));
    Value total = b_.create<mlir::memref::LoadOp>(loc_, shared_, SharedIndex(slot));
    return ConvertValue(b_, loc_, total, ir::DType::kF32, r.shape().dtype());
  }

  // The thread's lanes (tx, ty), its block's tile (and chunk, in the
  // partials kernel) and its column, clamped in a partial last tile.
  void EmitThreadPosition() {
    const int64_t tx = plan_.tx;
    auto to_index = [&](Value v) {
      return b_.create<arith::IndexCastOp>(loc_, index_type_, v).getResult();
    };
    tid_ = to_index(b_.create<mlir::gpu::ThreadIdOp>(loc_, mlir::gpu::Dimension::x));
    Value bid = to_index(b_.create<mlir::gpu::BlockIdOp>(loc_, mlir::gpu::Dimension::x));
    lane_x_ = tx == 1 ? C(0) : b_.create<arith::RemUIOp>(loc_, tid_, C(tx)).getResult();
    lane_y_ = tx == 1 ? tid_ : b_.create<arith::DivUIOp>(loc_, tid_, C(tx)).getResult();
    // Block (tile, chunk): the partials kernel's blocks are tiles x chunks,
    // the tiles of a chunk next to each other (Note [split column reductions]).
    Value tile = bid;
    if (part_ == ColumnPart::kPartials) {
      tile = plan_.tiles == 1 ? C(0)
                              : b_.create<arith::RemUIOp>(loc_, bid, C(plan_.tiles)).getResult();
      chunk_ =
          plan_.tiles == 1 ? bid : b_.create<arith::DivUIOp>(loc_, bid, C(plan_.tiles)).getResult();
    }
    column_ = plan_.tiles == 1 ? lane_x_
                               : b_.create<arith::AddIOp>(
                                       loc_, b_.create<arith::MulIOp>(loc_, tile, C(tx)), lane_x_)
                                     .getResult();
    // Threads of a partial last tile clamp their column (reads stay in bounds,
    // their results are not stored); every thread reaches every barrier.
    if (plan_.columns % tx != 0) {
      live_ = b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::ult, column_, C(plan_.columns));
      column_ = b_.create<arith::MinUIOp>(loc_, column_, C(plan_.columns - 1));
    }
    ElementIndex ci;
    ci.linear = column_;
    column_multi_ = emitter_.Multi(ci, ir::Shape(ir::DType::kF32, plan_.kept_dims));
    shared_ = func_.getWorkgroupAttributions()[0];
  }

  // scratch[(r * G + g) * K + column]: partial g of reduce r's column.
  Value ScratchAt(const ir::Instruction* r, Value g) {
    Value rg = b_.create<arith::AddIOp>(loc_, C(plan_.partial_index.at(r) * plan_.chunks), g);
    if (plan_.columns == 1) return rg;
    return b_.create<arith::AddIOp>(loc_, b_.create<arith::MulIOp>(loc_, rg, C(plan_.columns)),
                                    column_);
  }

  // The slot of row lane `y`'s partial of batch reduce `i` in the trees:
  // shared[i][y][tx].
  Value TreeSlot(size_t i, Value y) {
    Value s =
        b_.create<arith::AddIOp>(loc_, b_.create<arith::MulIOp>(loc_, y, C(plan_.tx)), lane_x_);
    return SharedIndex(
        b_.create<arith::AddIOp>(loc_, s, C(static_cast<int64_t>(i) * plan_.block())));
  }

  // One batch: its row loops, then its column totals into shared memory (or
  // the partials kernel's scratch).
  Status EmitBatch(const Batch& batch) {
    // One loop per input shape of the batch (Note [column reduction batches]).
    std::vector<Value> accs(batch.size());
    for (size_t first = 0; first < batch.size();) {
      size_t last = first;
      while (last < batch.size() && plan_.LoopDims(batch[last]) == plan_.LoopDims(batch[first])) {
        ++last;
      }
      RETURN_IF_ERROR(AccumulateRows(batch, first, last, accs));
      first = last;
    }
    // shared[i][ty][tx] = acc_i; a fixed tree over ty; every thread reads shared[i][0][tx].
    for (size_t i = 0; i < batch.size(); ++i) {
      b_.create<mlir::memref::StoreOp>(loc_, accs[i], shared_,
                                       mlir::ValueRange{TreeSlot(i, lane_y_)});
    }
    b_.create<mlir::gpu::BarrierOp>(loc_);
    if (WarpTotals(plan_, batch)) {
      EmitWarpTotals(b_, emitter_, entry_, plan_, part_, batch, tid_, chunk_, shared_,
                     scratch_arg_);
      for (const ir::Instruction* r : batch) reduced_.insert(r);
      b_.create<mlir::gpu::BarrierOp>(loc_);
      return Status::Ok();
    }
    EmitTree(batch);
    StoreTotals(batch);
    for (const ir::Instruction* r : batch) reduced_.insert(r);
    // The totals are visible, and the next batch may reuse the trees.
    b_.create<mlir::gpu::BarrierOp>(loc_);
    return Status::Ok();
  }

  // Reduces batch[first, last) (over the same loop dims) in one loop:
  // for (row = ty; row < rows; row += TY) acc_k (+)= x_k[row, column].
  Status AccumulateRows(const Batch& batch, size_t first, size_t last, std::vector<Value>& accs) {
    const int64_t k = plan_.columns, ty = plan_.ty, chunks = plan_.chunks;
    const ir::Shape input = batch[first]->operand(0)->shape();
    const int64_t rows = part_ == ColumnPart::kFinal ? chunks : plan_.Rows(batch[first]);
    const ir::Shape row_shape(
        ir::DType::kF32,
        std::vector<int64_t>(input.dims().begin(), input.dims().end() - plan_.kept_dims.size()));
    std::vector<Value> inits;
    for (size_t i = first; i < last; ++i) {
      double identity = batch[i]->attrs().reduce_kind == ir::ReduceKind::kSum
                            ? 0.0
                            : -std::numeric_limits<double>::infinity();
      inits.push_back(ScalarConstant(b_, loc_, ir::DType::kF32, identity));
    }
    mlir::OpBuilder::InsertPoint after_loop = b_.saveInsertionPoint();
    // Partials: block (tile, g) takes rows g * TY + ty, stepping G * TY.
    Value start =
        part_ == ColumnPart::kPartials
            ? b_.create<arith::AddIOp>(loc_, b_.create<arith::MulIOp>(loc_, chunk_, C(ty)), lane_y_)
                  .getResult()
            : lane_y_;
    const int64_t step = part_ == ColumnPart::kPartials ? chunks * ty : ty;
    auto loop = mlir::cast<mlir::scf::ForOp>(CreateFor(b_, loc_, start, C(rows), C(step), inits));
    FusedEmitter::Cache saved = emitter_.SaveCache();
    Value row = loop.getInductionVar();
    ElementIndex index;
    index.linear =
        k == 1 ? row
               : b_.create<arith::AddIOp>(loc_, b_.create<arith::MulIOp>(loc_, row, C(k)), column_)
                     .getResult();
    ElementIndex ri;
    ri.linear = row;
    index.multi = emitter_.Multi(ri, row_shape);
    index.multi.insert(index.multi.end(), column_multi_.begin(), column_multi_.end());
    std::vector<Value> next;
    for (size_t i = first; i < last; ++i) {
      const ir::Instruction* r = batch[i];
      Value f;
      if (part_ == ColumnPart::kFinal) {  // partial `row` of reduce r
        f = LoadElement(b_, loc_, entry_->getArgument(scratch_arg_), ScratchAt(r, row),
                        ir::DType::kF32);
      } else {
        StatusOr<Value> x = emitter_.Emit(*r->operand(0), index);
        if (!x.ok()) return x.status().WithPrefix("%" + fusion_.name());
        f = ConvertValue(b_, loc_, *x, r->operand(0)->shape().dtype(), ir::DType::kF32);
      }
      next.push_back(
          CombineReduce(b_, loc_, r->attrs().reduce_kind, loop.getRegionIterArgs()[i - first], f));
    }
    b_.create<mlir::scf::YieldOp>(loc_, next);
    emitter_.RestoreCache(std::move(saved));
    b_.restoreInsertionPoint(after_loop);
    b_.setInsertionPointAfter(loop);
    for (size_t i = first; i < last; ++i) accs[i] = loop.getResult(i - first);
    return Status::Ok();
  }

  // The fixed binary tree over ty: at each level the lower half adds the
  // upper half's partials to its own.
  void EmitTree(const Batch& batch) {
    for (int64_t half = plan_.ty / 2; half >= 1; half /= 2) {
      Value active = b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::ult, lane_y_, C(half));
      auto if_active = b_.create<mlir::scf::IfOp>(loc_, active, false);
      {
        mlir::OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPoint(if_active.thenBlock()->getTerminator());
        Value other_y = b_.create<arith::AddIOp>(loc_, lane_y_, C(half));
        for (size_t i = 0; i < batch.size(); ++i) {
          Value mine = b_.create<mlir::memref::LoadOp>(loc_, shared_, TreeSlot(i, lane_y_));
          Value other = b_.create<mlir::memref::LoadOp>(loc_, shared_, TreeSlot(i, other_y));
          b_.create<mlir::memref::StoreOp>(
              loc_, CombineReduce(b_, loc_, batch[i]->attrs().reduce_kind, mine, other), shared_,
              mlir::ValueRange{TreeSlot(i, lane_y_)});
        }
      }
      b_.create<mlir::gpu::BarrierOp>(loc_);
    }
  }

  // The ty == 0 threads keep the totals (Note [column totals in shared
  // memory]); in the partials kernel the live ones store them to scratch.
  void StoreTotals(const Batch& batch) {
    Value top = b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::eq, lane_y_, C(0));
    if (part_ == ColumnPart::kPartials && live_) top = b_.create<arith::AndIOp>(loc_, top, live_);
    auto if_top = b_.create<mlir::scf::IfOp>(loc_, top, false);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPoint(if_top.thenBlock()->getTerminator());
    for (size_t i = 0; i < batch.size(); ++i) {
      Value total = b_.create<mlir::memref::LoadOp>(loc_, shared_, TreeSlot(i, lane_y_));
      if (part_ == ColumnPart::kPartials) {
        StoreElement(b_, loc_, total, entry_->getArgument(scratch_arg_),
                     ScratchAt(batch[i], chunk_), ir::DType::kF32);
        continue;
      }
      Value at = b_.create<arith::AddIOp>(loc_, lane_x_, C(plan_.total_slot.at(batch[i])));
      b_.create<mlir::memref::StoreOp>(loc_, total, shared_, mlir::ValueRange{SharedIndex(at)});
    }
  }

  // The live ty == 0 threads write the outputs of their column.
  Status EmitOutputs() {
    Value first = b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::eq, lane_y_, C(0));
    if (live_) first = b_.create<arith::AndIOp>(loc_, first, live_);
    auto if_first = b_.create<mlir::scf::IfOp>(loc_, first, false);
    b_.setInsertionPoint(if_first.thenBlock()->getTerminator());
    ElementIndex out_index;
    out_index.linear = column_;
    out_index.multi = column_multi_;
    return EmitAndStore(emitter_, b_, loc_, entry_, fusion_, plan_.written, plan_.slots, out_index,
                        column_);
  }

  const ir::Instruction& fusion_;
  const ColumnReductionPlan& plan_;
  const ColumnPart part_;
  const int64_t scratch_arg_;  // the split kernels' scratch argument
  Value tid_, lane_x_, lane_y_, chunk_;
  Value column_;                     // this thread's column
  std::vector<Value> column_multi_;  // ... as a multi-index of the kept dims
  Value live_;                       // whether the column is in bounds; null when all are
  Value shared_;
  std::set<const ir::Instruction*> reduced_;  // reduces whose totals are in shared memory
};

class ColumnReductionEmitter : public KernelEmitter {
 public:
  // `mixed`: emit only the column part (Note [mixed row and column reductions]).
  ColumnReductionEmitter(bool mixed, ColumnPart part) : mixed_(mixed), part_(part) {}
  std::string_view Name() const override {
    if (part_ == ColumnPart::kPartials) return "column_reduction_partials";
    if (part_ == ColumnPart::kFinal) return "column_reduction_final";
    return mixed_ ? "mixed_reduction_columns" : "column_reduction";
  }

  StatusOr<KernelSpec> Emit(const ir::Instruction& fusion, const std::string& name,
                            mlir::gpu::GPUModuleOp gpu_module) const override {
    ASSIGN_OR_RETURN(const ColumnReductionPlan plan, PlanColumnReduction(fusion, part_, mixed_));
    if (part_ == ColumnPart::kPartials && !plan.classes.empty()) {
      return EmitMemberPartials(fusion, plan, name, gpu_module);
    }
    ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
    ColumnReductionBuilder builder(fusion, *fused, plan, part_, name, gpu_module);
    RETURN_IF_ERROR(builder.Build());
    KernelSpec spec = MakeKernelSpec(fusion, name, ir::FusionKind::kReduction, plan.grid,
                                     plan.block(), plan.shared_floats);
    if (part_ != ColumnPart::kWhole) {
      spec.params.push_back(KernelParam{KernelParam::Role::kScratch, 0,
                                        ir::Shape(ir::DType::kF32, {plan.scratch_floats}), 4});
    }
    return spec;
  }

 private:
  bool mixed_;
  ColumnPart part_;
};

}  // namespace

std::unique_ptr<KernelEmitter> MakeColumnReductionEmitter() {
  return std::make_unique<ColumnReductionEmitter>(/*mixed=*/false, ColumnPart::kWhole);
}

std::unique_ptr<KernelEmitter> MakeMixedReductionColumnsEmitter() {
  return std::make_unique<ColumnReductionEmitter>(/*mixed=*/true, ColumnPart::kWhole);
}

std::unique_ptr<KernelEmitter> MakeColumnReductionPartialsEmitter() {
  return std::make_unique<ColumnReductionEmitter>(/*mixed=*/false, ColumnPart::kPartials);
}

std::unique_ptr<KernelEmitter> MakeColumnReductionFinalEmitter() {
  return std::make_unique<ColumnReductionEmitter>(/*mixed=*/false, ColumnPart::kFinal);
}

}  // namespace gptc::codegen
