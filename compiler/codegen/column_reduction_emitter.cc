// The column-reduction emitter (kind=reduction whose reduces are over leading
// dims): bias and layer-norm gain/bias gradients (f32[B,T,C] -> f32[C]) and
// full reductions to a scalar (loss mean, the grad-norm sum of squares).
//
// Note [column reduction]: every reduce collapses its input to [R, K] (R: the
// product of the reduced leading dims, K: of the kept trailing dims; K == 1
// for a full reduction); all reduces of a fusion share K (their R may
// differ: the grad-norm fusion reduces every gradient to a scalar). A block
// of TX x TY threads owns a tile of TX consecutive columns (TX = 32, or K
// when K < 32); thread (tx, ty) accumulates rows ty, ty + TY, ... of column
// tile * TX + tx in f32, so a warp reads 32 consecutive elements of a row
// (coalesced; with K == 1 consecutive threads read consecutive elements).
// The TY partials of a column meet in shared memory through a fixed binary
// tree (TY is a power of two): the result is bit-deterministic, without
// atomics. Reduces run in batches (Note [column reduction batches]); after a
// batch its column totals are in shared memory, so later batches and the
// outputs can use them.
// Outputs (shaped like the kept dims) are written by the ty == 0 threads.
// Note [column reduction batches]: a batch is up to 48 KiB / (4 * block)
// mutually independent reduces, whatever their input dims; those over the
// same dims share one loop, the others get a loop each, and the batch shares
// one shared-memory tree. The grad-norm fusion of gpt2-124m (148 reduces of
// 16 shapes, interleaved) once made a batch per reduce: 148 trees of 10
// levels, 1,600 barriers, and 12 s of LLVM time for one kernel.
// Note [column totals in shared memory]: a batch's totals are kept in shared
// memory (one float per reduce and column of the tile) and loaded where they
// are used, not held in registers: the grad-norm fusion has a total per
// gradient (148 at gpt2-124m), all live until its final sum, which spilled.
//
// Grid: ceil(K / TX) blocks. A full reduction is therefore one block of 1024
// threads looping over the whole input: fine for the loss and small models,
// not for the 124M-value grad norm of gpt2-124m (one SM of 132 reading 0.5 GB).
// Note [split full reductions]: a fusion of independent full reductions
// (K == 1) over many rows runs as two kernels of one ABI plus a scratch
// argument (Note [kernel ABI]: KernelParam::Role::kScratch, a slice the plan
// reserves past the arena's buffers): NAME_partials, G blocks each reducing
// a grid-strided share of every reduce's rows and storing its block totals
// to scratch[r * G + block]; then NAME, one block reducing each reduce's G
// partials in a fixed order and writing the outputs as the whole kernel
// would. No atomics: the result is deterministic (it differs from the
// one-block order only by summation order).
#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "compiler/codegen/codegen.h"
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

constexpr int64_t kTileColumns = 32;
constexpr int64_t kMaxBlock = 1024;
constexpr int64_t kMaxStaticSharedFloats = 48 * 1024 / 4;

bool DependsOn(const ir::Instruction* inst, const std::set<const ir::Instruction*>& batch,
               std::map<const ir::Instruction*, bool>& memo) {
  if (batch.count(inst)) return true;
  if (auto it = memo.find(inst); it != memo.end()) return it->second;
  bool result = false;
  for (const ir::Instruction* op : inst->operands()) {
    if (DependsOn(op, batch, memo)) {
      result = true;
      break;
    }
  }
  memo[inst] = result;
  return result;
}

Value Combine(mlir::OpBuilder& b, mlir::Location loc, ir::ReduceKind kind, Value x, Value y) {
  if (kind == ir::ReduceKind::kSum) return b.create<arith::AddFOp>(loc, x, y);
  return b.create<arith::MaximumFOp>(loc, x, y);
}

int64_t NextPowerOfTwo(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

constexpr int64_t kPartialsBlock = 256;
constexpr int64_t kMaxPartials = 1024;
constexpr int64_t kRowsPerPartialThread = 32;

enum class Part { kWhole, kPartials, kFinal };  // Note [split full reductions]

class ColumnReductionEmitter : public KernelEmitter {
 public:
  // `mixed`: emit only the column part (Note [mixed row and column reductions]).
  ColumnReductionEmitter(bool mixed, Part part) : mixed_(mixed), part_(part) {}
  std::string_view Name() const override {
    if (part_ == Part::kPartials) return "column_reduction_partials";
    if (part_ == Part::kFinal) return "column_reduction_final";
    return mixed_ ? "mixed_reduction_columns" : "column_reduction";
  }

  StatusOr<KernelSpec> Emit(const ir::Instruction& fusion, const std::string& name,
                            mlir::gpu::GPUModuleOp gpu_module) const override {
    ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
    std::vector<const ir::Instruction*> outputs = FusionOutputs(*fused);
    std::vector<ir::Instruction*> params = fused->parameters();
    // The outputs this kernel writes, with their kernel arguments (Note [kernel ABI]).
    std::vector<const ir::Instruction*> written;
    std::vector<int64_t> slots;
    std::optional<std::vector<bool>> column_part;
    if (mixed_) {
      StatusOr<std::vector<bool>> column = MixedReductionColumnPart(*fused);
      if (!column.ok()) return column.status().WithPrefix("%" + fusion.name());
      column_part = *column;
    }
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (column_part && !(*column_part)[o]) continue;
      written.push_back(outputs[o]);
      slots.push_back(static_cast<int64_t>(params.size() + o));
    }

    // The reduces, each over [R, K]; all share the kept dims.
    std::vector<const ir::Instruction*> reduces;
    std::optional<std::vector<int64_t>> kept_dims;
    for (const auto& inst : fused->instructions()) {
      if (inst->opcode() != ir::Opcode::kReduce) continue;
      if (mixed_ && IsRowReduce(*inst)) continue;  // the row kernel's
      const ir::Shape& in = inst->operand(0)->shape();
      const std::vector<int64_t>& dims = inst->attrs().dimensions;
      bool prefix = !dims.empty();
      for (size_t i = 0; i < dims.size(); ++i) prefix = prefix && dims[i] == static_cast<int64_t>(i);
      if (!prefix) {
        return Error("%{}: {} reduces dims {} of {}: a column reduction reduces leading dims",
                     fusion.name(), Describe(*inst), ir::DimsToString(dims), in.ToString());
      }
      if (!ir::IsFloat(in.dtype()) || !ir::IsFloat(inst->shape().dtype())) {
        return Error("%{}: {}: only floating-point reductions are supported", fusion.name(),
                     Describe(*inst));
      }
      std::vector<int64_t> kept(in.dims().begin() + dims.size(), in.dims().end());
      if (kept_dims && *kept_dims != kept) {
        return Error("%{}: {} keeps dims {} but an earlier reduce keeps {}", fusion.name(),
                     Describe(*inst), ir::DimsToString(kept), ir::DimsToString(*kept_dims));
      }
      kept_dims = kept;
      reduces.push_back(inst.get());
    }
    if (reduces.empty()) return Error("%{}: reduction fusion without a reduce", fusion.name());
    const ir::Shape column_shape(ir::DType::kF32, *kept_dims);
    const int64_t k = column_shape.num_elements();
    for (const ir::Instruction* out : written) {
      if (out->shape().is_tuple() || out->shape().dims() != *kept_dims) {
        return Error("%{}: output {} has shape {}; a column reduction writes {}", fusion.name(),
                     Describe(*out), out->shape().ToString(), ir::DimsToString(*kept_dims));
      }
    }
    auto rows_of = [&](const ir::Instruction* r) {
      return r->operand(0)->shape().num_elements() / std::max<int64_t>(k, 1);
    };

    // Geometry (Note [column reduction]).
    int64_t max_rows = 1, max_input = 0;
    for (const ir::Instruction* r : reduces) {
      max_rows = std::max(max_rows, rows_of(r));
      max_input = std::max(max_input, r->operand(0)->shape().num_elements());
    }
    const bool split = part_ != Part::kWhole;
    const int64_t partials = SplitFullReductionBlocks(fusion);
    if (split && partials <= 1) {
      return Error("%{}: not a fusion of independent full reductions over many rows",
                   fusion.name());
    }
    const int64_t tx = std::min(kTileColumns, k);
    int64_t ty = std::min(kMaxBlock / NextPowerOfTwo(tx), NextPowerOfTwo(max_rows));
    if (part_ == Part::kPartials) ty = std::min(kPartialsBlock, ty);
    if (part_ == Part::kFinal) ty = std::min(kMaxBlock, NextPowerOfTwo(partials));
    const int64_t block = tx * ty;
    const int64_t grid = part_ == Part::kPartials ? partials : (k + tx - 1) / tx;
    // reduce -> its row of the scratch partials
    std::map<const ir::Instruction*, int64_t> partial_row;
    for (const ir::Instruction* r : reduces) {
      partial_row[r] = static_cast<int64_t>(partial_row.size());
    }
    // Each reduce of a batch needs `block` floats of static shared memory (48 KiB at most).
    // After the totals (Note [column totals in shared memory]).
    const int64_t total_floats = static_cast<int64_t>(reduces.size()) * tx;
    const size_t max_batch_size = static_cast<size_t>(
        std::max<int64_t>(1, (kMaxStaticSharedFloats - total_floats) / block));

    // Batches of mutually independent reduces over the same input dims.
    std::vector<std::vector<const ir::Instruction*>> batches;
    std::set<const ir::Instruction*> current;
    for (const ir::Instruction* r : reduces) {
      std::map<const ir::Instruction*, bool> memo;
      if (!batches.empty() && batches.back().size() < max_batch_size &&
          !DependsOn(r->operand(0), current, memo)) {
        batches.back().push_back(r);
        current.insert(r);
      } else {
        batches.push_back({r});
        current = {r};
      }
    }
    // Reduces over the same input dims next to each other: they share a loop
    // (in the final kernel every reduce reads G partials: all share one).
    auto loop_dims = [&](const ir::Instruction* r) {
      return part_ == Part::kFinal ? std::vector<int64_t>{partials} : r->operand(0)->shape().dims();
    };
    for (auto& batch : batches) {
      std::stable_sort(batch.begin(), batch.end(),
                       [&](const auto* x, const auto* y) { return loop_dims(x) < loop_dims(y); });
    }
    size_t max_batch = 0;
    for (const auto& batch : batches) max_batch = std::max(max_batch, batch.size());
    const int64_t scratch_floats = static_cast<int64_t>(max_batch) * block;
    const int64_t shared_floats = scratch_floats + total_floats;
    std::map<const ir::Instruction*, int64_t> total_slot;  // reduce -> its totals' offset
    for (const ir::Instruction* r : reduces) {
      total_slot[r] = scratch_floats + static_cast<int64_t>(total_slot.size()) * tx;
    }
    const bool wide = max_input + block * k >= std::numeric_limits<int32_t>::max();

    mlir::OpBuilder b(gpu_module.getContext());
    const int64_t num_params =
        static_cast<int64_t>(params.size() + outputs.size()) + (split ? 1 : 0);
    const int64_t scratch_arg = static_cast<int64_t>(params.size() + outputs.size());
    mlir::gpu::GPUFuncOp func = CreateKernel(b, gpu_module, name, num_params, block, shared_floats);
    mlir::Block* entry = &func.getBody().front();
    mlir::Location loc = b.getUnknownLoc();
    mlir::IntegerType index_type = wide ? b.getI64Type() : b.getI32Type();

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
      Value slot = b.create<arith::AddIOp>(loc, lane_x, self->IndexConstant(total_slot.at(&r)));
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
    column = grid == 1 ? lane_x
                       : b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, bid, c(tx)),
                                                 lane_x)
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

    for (const auto& batch : batches) {
      // One loop per input shape of the batch (Note [column reduction batches]):
      // for (row = ty; row < rows; row += TY) acc_k (+)= x_k[row, column]
      std::vector<Value> accs(batch.size());
      for (size_t first = 0; first < batch.size();) {
        const ir::Shape input = batch[first]->operand(0)->shape();
        size_t last = first;
        while (last < batch.size() && loop_dims(batch[last]) == loop_dims(batch[first])) ++last;
        const int64_t rows = part_ == Part::kFinal ? partials : rows_of(batch[first]);
        const ir::Shape row_shape(
            ir::DType::kF32,
            std::vector<int64_t>(input.dims().begin(), input.dims().end() - kept_dims->size()));
        std::vector<Value> inits;
        for (size_t i = first; i < last; ++i) {
          double identity = batch[i]->attrs().reduce_kind == ir::ReduceKind::kSum
                                ? 0.0
                                : -std::numeric_limits<double>::infinity();
          inits.push_back(ScalarConstant(b, loc, ir::DType::kF32, identity));
        }
        mlir::OpBuilder::InsertPoint after_loop = b.saveInsertionPoint();
        // Partials: block b takes rows b * TY + ty, stepping G * TY.
        Value start =
            part_ == Part::kPartials
                ? b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, bid, c(ty)), lane_y)
                      .getResult()
                : lane_y;
        const int64_t step = part_ == Part::kPartials ? grid * ty : ty;
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
          if (part_ == Part::kFinal) {  // partial `row` of reduce r
            Value at = b.create<arith::AddIOp>(loc, c(partial_row.at(r) * partials), row);
            f = LoadElement(b, loc, entry->getArgument(scratch_arg), at, ir::DType::kF32);
          } else {
            StatusOr<Value> x = emitter.Emit(*r->operand(0), index);
            if (!x.ok()) return x.status().WithPrefix("%" + fusion.name());
            f = ConvertValue(b, loc, *x, r->operand(0)->shape().dtype(), ir::DType::kF32);
          }
          next.push_back(
              Combine(b, loc, r->attrs().reduce_kind, loop.getRegionIterArgs()[i - first], f));
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
                loc, Combine(b, loc, batch[i]->attrs().reduce_kind, mine, other), shared,
                mlir::ValueRange{slot(i, lane_y)});
          }
        }
        b.create<mlir::gpu::BarrierOp>(loc);
      }
      // The ty == 0 threads keep the totals (Note [column totals in shared memory]).
      {
        Value top = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, lane_y, c(0));
        auto if_top = b.create<mlir::scf::IfOp>(loc, top, false);
        mlir::OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(if_top.thenBlock()->getTerminator());
        for (size_t i = 0; i < batch.size(); ++i) {
          Value total = b.create<mlir::memref::LoadOp>(loc, shared, slot(i, lane_y));
          if (part_ == Part::kPartials) {  // this block's total, to scratch[r * G + block]
            Value at = b.create<arith::AddIOp>(loc, c(partial_row.at(batch[i]) * grid), bid);
            StoreElement(b, loc, total, entry->getArgument(scratch_arg), at, ir::DType::kF32);
            continue;
          }
          Value at = b.create<arith::AddIOp>(loc, lane_x, c(total_slot.at(batch[i])));
          b.create<mlir::memref::StoreOp>(loc, total, shared, mlir::ValueRange{shared_index(at)});
        }
      }
      for (const ir::Instruction* r : batch) reduced.insert(r);
      // The totals are visible, and the next batch may reuse the scratch.
      b.create<mlir::gpu::BarrierOp>(loc);
    }

    if (part_ == Part::kPartials) {
      KernelSpec spec =
          MakeKernelSpec(fusion, name, ir::FusionKind::kReduction, grid, block, shared_floats);
      spec.params.push_back(ScratchParam(reduces.size(), partials));
      return spec;
    }
    Value first = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, lane_y, c(0));
    if (live) first = b.create<arith::AndIOp>(loc, first, live);
    auto if_first = b.create<mlir::scf::IfOp>(loc, first, false);
    b.setInsertionPoint(if_first.thenBlock()->getTerminator());
    ElementIndex out_index;
    out_index.linear = column;
    out_index.multi = column_multi;
    RETURN_IF_ERROR(EmitAndStore(emitter, b, loc, entry, fusion, written, slots, out_index, column));
    KernelSpec spec =
        MakeKernelSpec(fusion, name, ir::FusionKind::kReduction, grid, block, shared_floats);
    if (split) spec.params.push_back(ScratchParam(reduces.size(), partials));
    return spec;
  }

 private:
  static KernelParam ScratchParam(size_t reduces, int64_t partials) {
    return KernelParam{KernelParam::Role::kScratch, 0,
                       ir::Shape(ir::DType::kF32, {static_cast<int64_t>(reduces) * partials}), 4};
  }

  bool mixed_;
  Part part_;
};

}  // namespace

int64_t SplitFullReductionBlocks(const ir::Instruction& fusion) {
  const ir::Computation* fused = fusion.called_computation();
  if (fusion.opcode() != ir::Opcode::kFusion || fused == nullptr ||
      fusion.attrs().fusion_kind != ir::FusionKind::kReduction) {
    return 1;
  }
  std::set<const ir::Instruction*> reduces;
  int64_t max_rows = 0;
  for (const auto& inst : fused->instructions()) {
    if (inst->opcode() != ir::Opcode::kReduce) continue;
    const ir::Shape& in = inst->operand(0)->shape();
    if (inst->shape().num_elements() != 1 || in.rank() == 0 ||
        static_cast<int64_t>(inst->attrs().dimensions.size()) != in.rank() ||
        !ir::IsFloat(in.dtype())) {
      return 1;  // not a full reduction of floats
    }
    reduces.insert(inst.get());
    max_rows = std::max(max_rows, in.num_elements());
  }
  if (reduces.empty()) return 1;
  std::map<const ir::Instruction*, bool> memo;
  for (const ir::Instruction* r : reduces) {
    if (DependsOn(r->operand(0), reduces, memo)) return 1;  // needs another's total first
  }
  const int64_t per_block = kPartialsBlock * kRowsPerPartialThread;
  return std::min(kMaxPartials, (max_rows + per_block - 1) / per_block);
}

std::unique_ptr<KernelEmitter> MakeColumnReductionEmitter() {
  return std::make_unique<ColumnReductionEmitter>(/*mixed=*/false, Part::kWhole);
}

std::unique_ptr<KernelEmitter> MakeMixedReductionColumnsEmitter() {
  return std::make_unique<ColumnReductionEmitter>(/*mixed=*/true, Part::kWhole);
}

std::unique_ptr<KernelEmitter> MakeColumnReductionPartialsEmitter() {
  return std::make_unique<ColumnReductionEmitter>(/*mixed=*/false, Part::kPartials);
}

std::unique_ptr<KernelEmitter> MakeColumnReductionFinalEmitter() {
  return std::make_unique<ColumnReductionEmitter>(/*mixed=*/false, Part::kFinal);
}

}  // namespace gptc::codegen
