// The column-reduction emitter (kind=reduction whose reduces are over leading
// dims): bias and layer-norm gain/bias gradients (f32[B,T,C] -> f32[C]) and
// full reductions to a scalar (loss mean, the grad-norm sum of squares).
// PlanColumnReduction (column_reduction_plan.h, with the Notes: [column
// reduction], [column reduction batches], [column totals in shared memory],
// [split column reductions]) decides the kernel; this file builds it.
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/column_reduction_plan.h"
#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"
#include "compiler/codegen/kernel_emitter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace gptc::codegen {
namespace {

using mlir::Value;
namespace arith = mlir::arith;

constexpr int64_t kWarp = 32;

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
    ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
    const bool split = part_ != ColumnPart::kWhole;
    const int64_t k = plan.columns, tx = plan.tx, ty = plan.ty, block = plan.block();
    const int64_t chunks = plan.chunks;
    const ir::Shape column_shape(ir::DType::kF32, plan.kept_dims);

    mlir::OpBuilder b(gpu_module.getContext());
    const int64_t num_outputs = static_cast<int64_t>(FusionOutputs(*fused).size());
    const int64_t scratch_arg = static_cast<int64_t>(fused->parameters().size()) + num_outputs;
    mlir::gpu::GPUFuncOp func =
        CreateKernel(b, gpu_module, name, scratch_arg + (split ? 1 : 0), block, plan.shared_floats);
    mlir::Block* entry = &func.getBody().front();
    mlir::Location loc = b.getUnknownLoc();
    mlir::IntegerType index_type = plan.wide ? b.getI64Type() : b.getI32Type();

    Value column;                                     // this thread's column
    Value lane_x;                                     // ... within the tile
    std::vector<Value> column_multi;                  // ... as a multi-index of the kept dims
    std::set<const ir::Instruction*> reduced;         // reduces whose totals are in shared memory
    Value shared;
    std::function<Value(Value)> shared_index;
    FusedEmitter* self = nullptr;
    FusedEmitter::Reader reader = [&](const ir::Instruction& p,
                                      const ElementIndex& index) -> StatusOr<Value> {
      return LoadElement(b, loc, entry->getArgument(p.attrs().index),
                         self->Linear(index, p.shape()), p.shape().dtype());
    };
    FusedEmitter::Reader read_reduce = [&](const ir::Instruction& r,
                                           const ElementIndex& index) -> StatusOr<Value> {
      if (!reduced.count(&r)) {
        return Error("{}: used before its columns are reduced (not a column-local fusion)",
                     Describe(r));
      }
      bool own = r.shape().num_elements() == 1 || index.linear == column ||
                 (index.multi == column_multi && !index.multi.empty());
      if (!own) {
        return Error("{}: read at another column than the thread's own (a layout op between "
                     "a reduce and its use is not supported in a column reduction)",
                     Describe(r));
      }
      Value slot =
          b.create<arith::AddIOp>(loc, lane_x, self->IndexConstant(plan.total_slot.at(&r)));
      Value total = b.create<mlir::memref::LoadOp>(loc, shared, shared_index(slot));
      return ConvertValue(b, loc, total, ir::DType::kF32, r.shape().dtype());
    };
    FusedEmitter emitter(b, entry, index_type, "reduction", reader, read_reduce);
    self = &emitter;
    auto c = [&](int64_t v) { return emitter.IndexConstant(v); };
    auto to_index = [&](Value v) {
      return b.create<arith::IndexCastOp>(loc, index_type, v).getResult();
    };
    shared_index = [&](Value v) {
      return b.create<arith::IndexCastOp>(loc, b.getIndexType(), v).getResult();
    };

    Value tid = to_index(b.create<mlir::gpu::ThreadIdOp>(loc, mlir::gpu::Dimension::x));
    Value bid = to_index(b.create<mlir::gpu::BlockIdOp>(loc, mlir::gpu::Dimension::x));
    lane_x = tx == 1 ? c(0) : b.create<arith::RemUIOp>(loc, tid, c(tx)).getResult();
    Value lane_y = tx == 1 ? tid : b.create<arith::DivUIOp>(loc, tid, c(tx)).getResult();
    // Block (tile, chunk): the partials kernel's blocks are tiles x chunks,
    // the tiles of a chunk next to each other (Note [split column reductions]).
    Value tile = bid, chunk;
    if (part_ == ColumnPart::kPartials) {
      tile = plan.tiles == 1 ? c(0) : b.create<arith::RemUIOp>(loc, bid, c(plan.tiles)).getResult();
      chunk = plan.tiles == 1 ? bid : b.create<arith::DivUIOp>(loc, bid, c(plan.tiles)).getResult();
    }
    column = plan.tiles == 1
                 ? lane_x
                 : b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, tile, c(tx)), lane_x)
                       .getResult();
    // Threads of a partial last tile clamp their column (reads stay in bounds,
    // their results are not stored); every thread reaches every barrier.
    Value live;
    if (k % tx != 0) {
      live = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, column, c(k));
      column = b.create<arith::MinUIOp>(loc, column, c(k - 1));
    }
    {
      ElementIndex ci;
      ci.linear = column;
      column_multi = emitter.Multi(ci, column_shape);
    }
    shared = func.getWorkgroupAttributions()[0];
    // scratch[(r * G + g) * K + column]: partial g of reduce r's column.
    auto scratch_at = [&](const ir::Instruction* r, Value g) -> Value {
      Value rg = b.create<arith::AddIOp>(loc, c(plan.partial_index.at(r) * chunks), g);
      if (k == 1) return rg;
      return b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, rg, c(k)), column);
    };

    for (const auto& batch : plan.batches) {
      // One loop per input shape of the batch (Note [column reduction batches]):
      // for (row = ty; row < rows; row += TY) acc_k (+)= x_k[row, column]
      std::vector<Value> accs(batch.size());
      for (size_t first = 0; first < batch.size();) {
        const ir::Shape input = batch[first]->operand(0)->shape();
        size_t last = first;
        while (last < batch.size() && plan.LoopDims(batch[last]) == plan.LoopDims(batch[first])) {
          ++last;
        }
        const int64_t rows = part_ == ColumnPart::kFinal ? chunks : plan.Rows(batch[first]);
        const ir::Shape row_shape(
            ir::DType::kF32,
            std::vector<int64_t>(input.dims().begin(), input.dims().end() - plan.kept_dims.size()));
        std::vector<Value> inits;
        for (size_t i = first; i < last; ++i) {
          double identity = batch[i]->attrs().reduce_kind == ir::ReduceKind::kSum
                                ? 0.0
                                : -std::numeric_limits<double>::infinity();
          inits.push_back(ScalarConstant(b, loc, ir::DType::kF32, identity));
        }
        mlir::OpBuilder::InsertPoint after_loop = b.saveInsertionPoint();
        // Partials: block (tile, g) takes rows g * TY + ty, stepping G * TY.
        Value start =
            part_ == ColumnPart::kPartials
                ? b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, chunk, c(ty)), lane_y)
                      .getResult()
                : lane_y;
        const int64_t step = part_ == ColumnPart::kPartials ? chunks * ty : ty;
        auto loop = mlir::cast<mlir::scf::ForOp>(CreateFor(b, loc, start, c(rows), c(step), inits));
        FusedEmitter::Cache saved = emitter.SaveCache();
        Value row = loop.getInductionVar();
        ElementIndex index;
        index.linear =
            k == 1 ? row
                   : b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, row, c(k)), column)
                         .getResult();
        ElementIndex ri;
        ri.linear = row;
        index.multi = emitter.Multi(ri, row_shape);
        index.multi.insert(index.multi.end(), column_multi.begin(), column_multi.end());
        std::vector<Value> next;
        for (size_t i = first; i < last; ++i) {
          const ir::Instruction* r = batch[i];
          Value f;
          if (part_ == ColumnPart::kFinal) {  // partial `row` of reduce r
            f = LoadElement(b, loc, entry->getArgument(scratch_arg), scratch_at(r, row),
                            ir::DType::kF32);
          } else {
            StatusOr<Value> x = emitter.Emit(*r->operand(0), index);
            if (!x.ok()) return x.status().WithPrefix("%" + fusion.name());
            f = ConvertValue(b, loc, *x, r->operand(0)->shape().dtype(), ir::DType::kF32);
          }
          next.push_back(
              CombineReduce(b, loc, r->attrs().reduce_kind, loop.getRegionIterArgs()[i - first], f));
        }
        b.create<mlir::scf::YieldOp>(loc, next);
        emitter.RestoreCache(std::move(saved));
        b.restoreInsertionPoint(after_loop);
        b.setInsertionPointAfter(loop);
        for (size_t i = first; i < last; ++i) accs[i] = loop.getResult(i - first);
        first = last;
      }

      // shared[i][ty][tx] = acc_i; a fixed tree over ty; every thread reads shared[i][0][tx].
      auto slot = [&](size_t i, Value y) {
        Value s = b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, y, c(tx)), lane_x);
        return shared_index(b.create<arith::AddIOp>(loc, s, c(static_cast<int64_t>(i) * block)));
      };
      for (size_t i = 0; i < batch.size(); ++i) {
        b.create<mlir::memref::StoreOp>(loc, accs[i], shared,
                                        mlir::ValueRange{slot(i, lane_y)});
      }
      b.create<mlir::gpu::BarrierOp>(loc);
      if (WarpTotals(plan, batch)) {
        EmitWarpTotals(b, emitter, entry, plan, part_, batch, tid, chunk, shared, scratch_arg);
        for (const ir::Instruction* r : batch) reduced.insert(r);
        b.create<mlir::gpu::BarrierOp>(loc);
        continue;
      }
      for (int64_t half = ty / 2; half >= 1; half /= 2) {
        Value active = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, lane_y, c(half));
        auto if_active = b.create<mlir::scf::IfOp>(loc, active, false);
        {
          mlir::OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(if_active.thenBlock()->getTerminator());
          Value other_y = b.create<arith::AddIOp>(loc, lane_y, c(half));
          for (size_t i = 0; i < batch.size(); ++i) {
            Value mine = b.create<mlir::memref::LoadOp>(loc, shared, slot(i, lane_y));
            Value other = b.create<mlir::memref::LoadOp>(loc, shared, slot(i, other_y));
            b.create<mlir::memref::StoreOp>(
                loc, CombineReduce(b, loc, batch[i]->attrs().reduce_kind, mine, other), shared,
                mlir::ValueRange{slot(i, lane_y)});
          }
        }
        b.create<mlir::gpu::BarrierOp>(loc);
      }
      // The ty == 0 threads keep the totals (Note [column totals in shared
      // memory]); in the partials kernel the live ones store them to scratch.
      {
        Value top = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, lane_y, c(0));
        if (part_ == ColumnPart::kPartials && live) top = b.create<arith::AndIOp>(loc, top, live);
        auto if_top = b.create<mlir::scf::IfOp>(loc, top, false);
        mlir::OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(if_top.thenBlock()->getTerminator());
        for (size_t i = 0; i < batch.size(); ++i) {
          Value total = b.create<mlir::memref::LoadOp>(loc, shared, slot(i, lane_y));
          if (part_ == ColumnPart::kPartials) {
            StoreElement(b, loc, total, entry->getArgument(scratch_arg),
                         scratch_at(batch[i], chunk), ir::DType::kF32);
            continue;
          }
          Value at = b.create<arith::AddIOp>(loc, lane_x, c(plan.total_slot.at(batch[i])));
          b.create<mlir::memref::StoreOp>(loc, total, shared, mlir::ValueRange{shared_index(at)});
        }
      }
      for (const ir::Instruction* r : batch) reduced.insert(r);
      // The totals are visible, and the next batch may reuse the trees.
      b.create<mlir::gpu::BarrierOp>(loc);
    }

    KernelSpec spec = MakeKernelSpec(fusion, name, ir::FusionKind::kReduction, plan.grid, block,
                                     plan.shared_floats);
    if (split) {
      spec.params.push_back(KernelParam{KernelParam::Role::kScratch, 0,
                                        ir::Shape(ir::DType::kF32, {plan.scratch_floats}), 4});
    }
    if (part_ == ColumnPart::kPartials) return spec;
    Value first = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, lane_y, c(0));
    if (live) first = b.create<arith::AndIOp>(loc, first, live);
    auto if_first = b.create<mlir::scf::IfOp>(loc, first, false);
    b.setInsertionPoint(if_first.thenBlock()->getTerminator());
    ElementIndex out_index;
    out_index.linear = column;
    out_index.multi = column_multi;
    RETURN_IF_ERROR(
        EmitAndStore(emitter, b, loc, entry, fusion, plan.written, plan.slots, out_index, column));
    return spec;
  }

 private:
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
  static bool WarpTotals(const ColumnReductionPlan& plan,
                         const std::vector<const ir::Instruction*>& batch) {
    if (plan.tx != 1 || plan.ty % kWarp != 0) return false;
    for (const ir::Instruction* r : batch) {
      if (r->attrs().reduce_kind != batch[0]->attrs().reduce_kind) return false;
    }
    return true;
  }

  static void EmitWarpTotals(mlir::OpBuilder& b, FusedEmitter& emitter, mlir::Block* entry,
                             const ColumnReductionPlan& plan, ColumnPart part,
                             const std::vector<const ir::Instruction*>& batch, Value tid,
                             Value chunk, Value shared, int64_t scratch_arg) {
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
    Value at = b.create<arith::AddIOp>(
        loc, row, b.create<arith::MulIOp>(loc, sum.getInductionVar(), c(kWarp)));
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
