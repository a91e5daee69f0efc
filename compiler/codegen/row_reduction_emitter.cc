// The row-reduction emitter (kind=reduction or cross_entropy whose reduces
// are over the last dim): layer norm forward/backward, softmax, row sums, the
// softmax cross-entropy with its gradient (the composite is inlined; rows of
// 50304 logits take a block of 512 threads each). PlanRowReduction
// (row_reduction_plan.h, with the Notes: [row reduction], [unrolled warp
// rows], [row vectors], [duplicate reduces], [row cache], [column cache],
// [one-hot reduces], [bounded columns]) decides the kernel; this file
// builds it.
#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <vector>

#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"
#include "compiler/codegen/kernel_emitter.h"
#include "compiler/codegen/row_reduction_plan.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace gptc::codegen {
namespace {

using mlir::Value;
namespace arith = mlir::arith;
namespace LLVM = mlir::LLVM;

constexpr int64_t kWarp = 32;

using Batch = std::vector<const ir::Instruction*>;

// Note [column cache]: the elements of column parameter `p` a thread copies
// at once: a 16-byte vector where its row is whole vectors, else one.
int64_t ColumnCopyWidth(const RowReductionPlan& plan, const ir::Instruction& p) {
  const int64_t bytes = StorageBytes(p.shape().dtype());
  return (plan.n * bytes) % 16 == 0 ? 16 / bytes : 1;
}

// Builds the kernel of one RowReductionPlan into `gpu_module`: the thread's
// row, the row cache, a pass over the row for each batch of reduces, then
// the outputs.
class RowReductionBuilder : public FusedKernelBuilder {
 public:
  RowReductionBuilder(const ir::Instruction& fusion, const ir::Computation& fused,
                      const RowReductionPlan& plan, const std::string& name,
                      mlir::gpu::GPUModuleOp gpu_module)
      : FusedKernelBuilder(
            gpu_module, name,
            static_cast<int64_t>(fused.parameters().size() + FusionOutputs(fused).size()),
            plan.block, plan.shared_floats, plan.wide, "reduction",
            [this](const ir::Instruction& p, const ElementIndex& index) {
              return ReadParameter(p, index);
            },
            [this](const ir::Instruction& r, const ElementIndex&) { return ReadReduce(r); }),
        fusion_(fusion),
        plan_(plan),
        name_(name),
        gpu_module_(gpu_module) {
    emitter_.BindComposites(fused);
  }

  Status Build() {
    EmitRowPosition();
    if (!plan_.cached.empty()) EmitRowCache();
    // Note [unrolled warp rows]: the lane's chunks, shared by every pass,
    // when the row is emitted without a loop.
    for (int64_t u = 0; u < plan_.unrolled_columns / plan_.width; ++u) {
      BeginChunk(ChunkColumn(b_.create<arith::AddIOp>(loc_, lane_, C(kWarp * u))));
    }
    if (plan_.shared_floats > 0) shared_ = func_.getWorkgroupAttributions()[0];
    for (const Batch& batch : plan_.batches) RETURN_IF_ERROR(EmitBatch(batch));
    return EmitOutputs();
  }

 private:
  Value C(int64_t v) { return emitter_.IndexConstant(v); }

  // Note [row vectors]: `width` consecutive columns of the row from
  // `first`, with each element's index, and the vectors loaded for them.
  struct Chunk {
    Value column;  // the first
    std::vector<ElementIndex> elements;
    // Loaded parameters read at the chunk's elements, and those read at its
    // columns through a broadcast (a layer norm's gamma, the position
    // embedding), by the parameter and the index's other components.
    std::map<const ir::Instruction*, Value> vectors;
    std::map<std::vector<const void*>, Value> column_vectors;
  };

  // Parameter `p` at `index`: at an element of a current chunk, from its
  // vector (or with width 1, the row cache or the kernel argument); else
  // from the kernel argument.
  StatusOr<Value> ReadParameter(const ir::Instruction& p, const ElementIndex& index) {
    const Value linear = emitter_.Linear(index, p.shape());
    for (Chunk& chunk : chunks_) {
      for (size_t k = 0; k < chunk.elements.size(); ++k) {
        if (chunk.elements[k].linear == linear) return ReadChunk(chunk, k, p);
      }
    }
    const ir::Shape& shape = p.shape();
    if (plan_.width > 1 && shape.rank() > 0 && shape.dims().back() == plan_.n &&
        index.multi.size() == static_cast<size_t>(shape.rank())) {
      for (Chunk& chunk : chunks_) {
        for (size_t k = 0; k < chunk.elements.size(); ++k) {
          if (chunk.elements[k].multi.back() == index.multi.back()) {
            return ReadColumns(chunk, k, p, index);
          }
        }
      }
    }
    // A column parameter's linear index is its column (Note [column cache]).
    if (auto cached = column_ptr_.find(&p); cached != column_ptr_.end()) {
      return LoadElement(b_, loc_, cached->second, linear, p.shape().dtype());
    }
    return LoadElement(b_, loc_, entry_->getArgument(p.attrs().index), linear, p.shape().dtype());
  }

  StatusOr<Value> ReadChunk(Chunk& chunk, size_t k, const ir::Instruction& p) {
    const ir::DType dtype = p.shape().dtype();
    const auto cached = cache_ptr_.find(&p);
    const bool row_param = p.shape().num_elements() == plan_.rows * plan_.n;
    if (plan_.width == 1 || !row_param) {
      if (cached != cache_ptr_.end()) {
        return LoadElement(b_, loc_, cached->second, chunk.elements[k].multi.back(), dtype);
      }
      return LoadElement(b_, loc_, entry_->getArgument(p.attrs().index), chunk.elements[k].linear,
                         dtype);
    }
    Value& vector = chunk.vectors[&p];
    if (!vector) {
      // At the chunk's start, so that every element (and a later pass over
      // unrolled columns) sees it.
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointAfterValue(chunk.elements[0].linear);
      const bool from_cache = cached != cache_ptr_.end();
      vector = LoadVector(from_cache ? cached->second : entry_->getArgument(p.attrs().index),
                          from_cache ? chunk.column : chunk.elements[0].linear, p);
    }
    return Extract(vector, k, dtype);
  }

  // `p` at `index`, whose last component is column k of `chunk`: a vector
  // of the chunk's columns, loaded at its first use (the emitted code has
  // no branches, so later elements and passes see it).
  Value ReadColumns(Chunk& chunk, size_t k, const ir::Instruction& p, const ElementIndex& index) {
    std::vector<const void*> key{&p};
    for (size_t d = 0; d + 1 < index.multi.size(); ++d) {
      key.push_back(index.multi[d].getAsOpaquePointer());
    }
    Value& vector = chunk.column_vectors[key];
    if (vector) return Extract(vector, k, p.shape().dtype());
    if (auto cached = column_ptr_.find(&p); cached != column_ptr_.end()) {
      vector = LoadVector(cached->second, chunk.column, p);  // Note [column cache]
    } else {
      ElementIndex first;
      first.multi = index.multi;
      first.multi.back() = chunk.column;
      vector =
          LoadVector(entry_->getArgument(p.attrs().index), emitter_.Linear(first, p.shape()), p);
    }
    return Extract(vector, k, p.shape().dtype());
  }

  // `width` elements of `p` from `base` + `at`. Four 16-bit elements load
  // as two 32-bit words (Extract splits them): the NVPTX backend selects two
  // scalar b32 loads for an 8-byte vector of bf16 (a 16-byte one is one
  // ld.v4.b32), but one ld.v2.u32 for two words.
  Value LoadVector(Value base, Value at, const ir::Instruction& p) {
    const ir::DType dtype = p.shape().dtype();
    const int64_t bytes = StorageBytes(dtype);
    const mlir::Type storage = StorageType(b_.getContext(), dtype);
    const Value address = b_.create<LLVM::GEPOp>(loc_, base.getType(), storage, base,
                                                 mlir::ValueRange{at}, /*inbounds=*/true);
    const mlir::Type type = Paired(dtype)
                                ? mlir::VectorType::get({plan_.width / 2}, b_.getI32Type())
                                : mlir::VectorType::get({plan_.width}, storage);
    return b_.create<LLVM::LoadOp>(loc_, type, address, plan_.width * bytes);
  }

  bool Paired(ir::DType dtype) const { return StorageBytes(dtype) == 2 && plan_.width == 4; }

  Value Extract(Value vector, size_t k, ir::DType dtype) {
    if (!Paired(dtype)) {
      const Value lane = b_.create<arith::ConstantOp>(loc_, b_.getI32IntegerAttr(k));
      return FromStorage(b_, loc_, b_.create<LLVM::ExtractElementOp>(loc_, vector, lane), dtype);
    }
    const Value lane = b_.create<arith::ConstantOp>(loc_, b_.getI32IntegerAttr(k / 2));
    Value word = b_.create<LLVM::ExtractElementOp>(loc_, vector, lane);
    if (k % 2 == 1) {
      word = b_.create<arith::ShRUIOp>(
          loc_, word, b_.create<arith::ConstantOp>(loc_, b_.getI32IntegerAttr(16)));
    }
    const Value half = b_.create<arith::TruncIOp>(loc_, b_.getI16Type(), word);
    return b_.create<arith::BitcastOp>(loc_, StorageType(b_.getContext(), dtype), half);
  }

  // Reduce `r`'s result for the thread's row (a duplicate reads its twin's).
  StatusOr<Value> ReadReduce(const ir::Instruction& r) {
    auto twin = plan_.bindings.find(&r);
    auto it = results_.find(twin == plan_.bindings.end() ? &r : twin->second);
    if (it == results_.end()) {
      return Error("{}: used before its row is reduced (not a row-local fusion)", Describe(r));
    }
    return it->second;
  }

  // The thread's lane in its row, the row (whole warps past the last row
  // skip the kernel), its index and its first element.
  void EmitRowPosition() {
    auto to_index = [&](Value v) {
      return b_.create<arith::IndexCastOp>(loc_, index_type_, v).getResult();
    };
    Value tid = to_index(b_.create<mlir::gpu::ThreadIdOp>(loc_, mlir::gpu::Dimension::x));
    Value bid = to_index(b_.create<mlir::gpu::BlockIdOp>(loc_, mlir::gpu::Dimension::x));
    lane_ = plan_.threads_per_row == plan_.block
                ? tid
                : b_.create<arith::RemUIOp>(loc_, tid, C(plan_.threads_per_row)).getResult();
    if (!plan_.column_cached.empty()) EmitColumnCache(tid);
    Value group = bid;
    if (plan_.grid < plan_.row_groups) {  // Note [column cache]: the block's groups
      group = mlir::cast<mlir::scf::ForOp>(
                  CreateFor(b_, loc_, bid, C(plan_.row_groups), C(plan_.grid), {}))
                  .getInductionVar();
    }
    row_ = group;
    if (plan_.rows_per_block > 1) {
      Value in_block = b_.create<arith::DivUIOp>(loc_, tid, C(plan_.threads_per_row));
      row_ = b_.create<arith::AddIOp>(
          loc_, b_.create<arith::MulIOp>(loc_, group, C(plan_.rows_per_block)), in_block);
      if (plan_.rows % plan_.rows_per_block !=
          0) {  // whole warps drop out: no barrier in warp mode
        Value live = b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::ult, row_, C(plan_.rows));
        auto guard = b_.create<mlir::scf::IfOp>(loc_, live, /*withElseRegion=*/false);
        b_.setInsertionPoint(guard.thenBlock()->getTerminator());
      }
    }
    row_index_.linear = row_;
    row_index_.multi = emitter_.Multi(row_index_, ir::Shape(ir::DType::kF32, plan_.row_dims));
    row_start_ = b_.create<arith::MulIOp>(loc_, row_, C(plan_.n));
  }

  // The first column of the thread's chunk number `i` (Note [row vectors]).
  Value ChunkColumn(Value i) {
    if (plan_.width == 1) return i;
    return b_.create<arith::MulIOp>(loc_, i, C(plan_.width));
  }

  // Starts the chunk of columns from `first`; ReadParameter reads its
  // elements from it until it is dropped.
  Chunk& BeginChunk(Value first) {
    Chunk chunk{.column = first};
    const Value linear = b_.create<arith::AddIOp>(loc_, row_start_, first);
    for (int64_t k = 0; k < plan_.width; ++k) {
      ElementIndex index;
      index.linear = k == 0 ? linear : b_.create<arith::AddIOp>(loc_, linear, C(k)).getResult();
      index.multi = row_index_.multi;
      index.multi.push_back(k == 0 ? first : b_.create<arith::AddIOp>(loc_, first, C(k)));
      chunk.elements.push_back(std::move(index));
    }
    chunks_.push_back(std::move(chunk));
    return chunks_.back();
  }

  // The output stores of one chunk: each output's elements, then one
  // vector store (Note [row vectors]).
  Status StoreChunk(const Chunk& chunk) {
    for (size_t o = 0; o < plan_.elem_outputs.size(); ++o) {
      const ir::Instruction& output = *plan_.elem_outputs[o];
      std::vector<Value> lanes;
      for (const ElementIndex& index : chunk.elements) {
        StatusOr<Value> v = emitter_.Emit(output, index);
        if (!v.ok()) return v.status().WithPrefix("%" + fusion_.name());
        lanes.push_back(*v);
      }
      StoreElements(b_, loc_, lanes, entry_->getArgument(plan_.elem_slots[o]),
                    chunk.elements[0].linear, output.shape().dtype());
    }
    return Status::Ok();
  }

  // Note [row cache]: one extern [0 x i8] in shared memory (the launch's
  // dynamic bytes), a pointer into it for each cached parameter, and the
  // row copied there. A barrier follows the vector copies: a pass's thread
  // reads columns another thread copied. Element copies need none: each
  // thread copies the columns it later reads.
  void EmitRowCache() {
    for (const auto& [p, offset] : plan_.cached) cache_ptr_[p] = DynamicShared(offset);
    if (!plan_.cached_by_element.empty()) CopyRowByElements();
    for (const ir::Instruction* p : plan_.cached_by_vector) CopyRowByVectors(*p);
    if (!plan_.cached_by_vector.empty()) b_.create<mlir::gpu::BarrierOp>(loc_);
  }

  // A pointer `offset` bytes into the extern [0 x i8] in shared memory that
  // is the launch's dynamic bytes (Notes [row cache], [column cache]).
  Value DynamicShared(int64_t offset) {
    if (!dynamic_shared_) dynamic_shared_ = DynamicSharedBase(b_, gpu_module_, name_ + "_row");
    return b_.create<LLVM::GEPOp>(
        loc_, dynamic_shared_.getType(), b_.getI8Type(), dynamic_shared_,
        mlir::ValueRange{b_.create<arith::ConstantOp>(loc_, b_.getI32IntegerAttr(offset))},
        /*inbounds=*/true);
  }

  // Note [column cache]: the block's threads copy each column parameter
  // into shared memory, 16 bytes a thread where its row is whole vectors
  // (else an element), then wait for each other: a warp reads the columns
  // other warps copied.
  void EmitColumnCache(Value tid) {
    // In parameter order: the map's order is the pointers', which would make
    // the kernel's text differ from compile to compile.
    for (const ir::Instruction* p : fusion_.called_computation()->parameters()) {
      const auto cached = plan_.column_cached.find(p);
      if (cached == plan_.column_cached.end()) continue;
      const Value to = column_ptr_[p] = DynamicShared(cached->second);
      CopyToShared(*p, Value(), to, tid, plan_.block, ColumnCopyWidth(plan_, *p));
    }
    b_.create<mlir::gpu::BarrierOp>(loc_);
  }

  // One loop over the row's columns copying every element-wise cached
  // parameter.
  void CopyRowByElements() {
    mlir::OpBuilder::InsertPoint after_copy = b_.saveInsertionPoint();
    auto copy = mlir::cast<mlir::scf::ForOp>(
        CreateFor(b_, loc_, lane_, C(plan_.n), C(plan_.threads_per_row), {}));
    const Value j = copy.getInductionVar();
    const Value at = b_.create<arith::AddIOp>(loc_, row_start_, j);
    for (const ir::Instruction* p : plan_.cached_by_element) {
      const ir::DType dtype = p->shape().dtype();
      StoreElement(b_, loc_,
                   LoadElement(b_, loc_, entry_->getArgument(p->attrs().index), at, dtype),
                   cache_ptr_.at(p), j, dtype);
    }
    b_.restoreInsertionPoint(after_copy);
    b_.setInsertionPointAfter(copy);
  }

  // A loop copying `p`'s row a 16-byte vector (16 / its element size
  // elements) a thread.
  void CopyRowByVectors(const ir::Instruction& p) {
    CopyToShared(p, row_start_, cache_ptr_.at(&p), lane_, plan_.threads_per_row,
                 16 / StorageBytes(p.shape().dtype()));
  }

  // A loop copying `p`'s n elements from its argument (from element `start`
  // on, when given) to shared memory `to`, `width` elements (one load and
  // one store) a thread: threads `thread`, `thread + threads`, ...
  void CopyToShared(const ir::Instruction& p, Value start, Value to, Value thread, int64_t threads,
                    int64_t width) {
    const int64_t bytes = StorageBytes(p.shape().dtype());
    const mlir::Type lane_type = b_.getIntegerType(8 * bytes);
    const mlir::Type type =
        width == 1 ? lane_type : mlir::Type(mlir::VectorType::get({width}, lane_type));
    mlir::OpBuilder::InsertPoint after_copy = b_.saveInsertionPoint();
    auto copy = mlir::cast<mlir::scf::ForOp>(
        CreateFor(b_, loc_, thread, C(plan_.n / width), C(threads), {}));
    const Value first = b_.create<arith::MulIOp>(loc_, copy.getInductionVar(), C(width));
    const Value global = entry_->getArgument(p.attrs().index);
    const Value from = b_.create<LLVM::GEPOp>(
        loc_, global.getType(), lane_type, global,
        mlir::ValueRange{start ? b_.create<arith::AddIOp>(loc_, start, first).getResult() : first},
        true);
    const Value at =
        b_.create<LLVM::GEPOp>(loc_, to.getType(), lane_type, to, mlir::ValueRange{first}, true);
    b_.create<LLVM::StoreOp>(loc_, b_.create<LLVM::LoadOp>(loc_, type, from, width * bytes), at,
                             width * bytes);
    b_.restoreInsertionPoint(after_copy);
    b_.setInsertionPointAfter(copy);
  }

  // One pass over the row: every thread ends with the batch's row results.
  // Note [one-hot reduces] take no part in the pass: their partials are the
  // picked element in the thread that owns it and 0 elsewhere.
  Status EmitBatch(const Batch& batch) {
    Batch summed;
    for (const ir::Instruction* r : batch) {
      if (!plan_.one_hot.contains(r)) summed.push_back(r);
    }
    std::vector<Value> sums;
    if (!summed.empty()) {
      ASSIGN_OR_RETURN(sums, AccumulateRow(summed));
    }
    std::vector<Value> accs;
    size_t next_sum = 0;
    for (const ir::Instruction* r : batch) {
      if (auto pick = plan_.one_hot.find(r); pick != plan_.one_hot.end()) {
        ASSIGN_OR_RETURN(Value partial, OneHotPartial(pick->second));
        accs.push_back(partial);
      } else {
        accs.push_back(sums[next_sum++]);
      }
    }
    CombineLanes(batch, accs);
    if (plan_.warps_per_row > 1) CombineWarps(batch, accs);
    for (size_t k = 0; k < batch.size(); ++k) {
      results_[batch[k]] =
          ConvertValue(b_, loc_, accs[k], ir::DType::kF32, batch[k]->shape().dtype());
    }
    return Status::Ok();
  }

  // Note [one-hot reduces]: the thread's partial of a one-hot sum: the
  // picked element (in f32) when the thread owns its column (its chunk is
  // the thread's), else 0. Only the owner reads it, before it stores there:
  // an output may take the parameter's buffer (Note [in-place temporaries]).
  StatusOr<Value> OneHotPartial(const RowReductionPlan::OneHot& pick) {
    ElementIndex row;
    row.multi = row_index_.multi;
    StatusOr<Value> at = emitter_.Emit(*pick.column, row);
    if (!at.ok()) return at.status().WithPrefix("%" + fusion_.name());
    Value column = *at;
    if (index_type_.getWidth() == 64) column = b_.create<arith::ExtSIOp>(loc_, index_type_, column);
    const Value inside =
        b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::ult, column, C(plan_.n));
    const Value chunk = b_.create<arith::DivUIOp>(loc_, column, C(plan_.width));
    const Value owner = b_.create<arith::RemUIOp>(loc_, chunk, C(plan_.threads_per_row));
    const Value mine = b_.create<arith::AndIOp>(
        loc_, inside, b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::eq, owner, lane_));
    auto if_mine = b_.create<mlir::scf::IfOp>(loc_, mlir::TypeRange{b_.getF32Type()}, mine,
                                              /*withElseRegion=*/true);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(if_mine.thenBlock());
    FusedEmitter::Cache saved = emitter_.SaveCache();
    ElementIndex element;
    element.linear = b_.create<arith::AddIOp>(loc_, row_start_, column);
    element.multi = row_index_.multi;
    element.multi.push_back(column);
    StatusOr<Value> v = emitter_.Emit(*pick.value, element);
    if (!v.ok()) return v.status().WithPrefix("%" + fusion_.name());
    b_.create<mlir::scf::YieldOp>(
        loc_, ConvertValue(b_, loc_, *v, pick.value->shape().dtype(), ir::DType::kF32));
    emitter_.RestoreCache(std::move(saved));
    b_.setInsertionPointToStart(if_mine.elseBlock());
    b_.create<mlir::scf::YieldOp>(loc_, ScalarConstant(b_, loc_, ir::DType::kF32, 0.0));
    return if_mine.getResult(0);
  }

  // accs_k = accs_k (+) x_k at `index`.
  Status Accumulate(const Batch& batch, const ElementIndex& index, std::vector<Value>& accs) {
    for (size_t k = 0; k < batch.size(); ++k) {
      const ir::Instruction* r = batch[k];
      StatusOr<Value> x = emitter_.Emit(*r->operand(0), index);
      if (!x.ok()) return x.status().WithPrefix("%" + fusion_.name());
      Value f = ConvertValue(b_, loc_, *x, r->operand(0)->shape().dtype(), ir::DType::kF32);
      accs[k] = CombineReduce(b_, loc_, r->attrs().reduce_kind, accs[k], f);
    }
    return Status::Ok();
  }

  // The lane's partials: acc_k = identity; for (j = lane; j < n; j +=
  // threads_per_row) acc_k = acc_k (+) x_k[row, j], or the unrolled columns.
  StatusOr<std::vector<Value>> AccumulateRow(const Batch& batch) {
    std::vector<Value> inits;
    for (const ir::Instruction* r : batch) {
      double identity = r->attrs().reduce_kind == ir::ReduceKind::kSum
                            ? 0.0
                            : -std::numeric_limits<double>::infinity();
      inits.push_back(ScalarConstant(b_, loc_, ir::DType::kF32, identity));
    }
    std::vector<Value> accs = inits;
    if (plan_.unrolled_columns > 0) {
      for (const Chunk& chunk : chunks_) {
        for (const ElementIndex& index : chunk.elements) {
          RETURN_IF_ERROR(Accumulate(batch, index, accs));
        }
      }
      return accs;
    }
    return ForEachChunk(inits, [&](const Chunk& chunk, std::vector<Value>& next) -> Status {
      for (const ElementIndex& index : chunk.elements) {
        RETURN_IF_ERROR(Accumulate(batch, index, next));
      }
      return Status::Ok();
    });
  }

  // Emits one chunk's work, updating the values a loop carries.
  using ChunkBody = std::function<Status(const Chunk&, std::vector<Value>&)>;

  // Loops over the thread's chunks of the row running `body`, the carried
  // values starting at `values`; their final values. Note [bounded
  // columns]: one loop over the chunks below the column limit, where the
  // bounded compares are true, then one over the rest.
  StatusOr<std::vector<Value>> ForEachChunk(std::vector<Value> values, const ChunkBody& body) {
    const int64_t chunks = plan_.n / plan_.width;
    const int64_t below = plan_.bounded.empty() ? chunks : plan_.column_limit / plan_.width;
    const int64_t step = plan_.threads_per_row;
    if (below > 0) {
      ASSIGN_OR_RETURN(values, ChunkLoop(lane_, below, !plan_.bounded.empty(), values, body));
    }
    if (below < chunks) {
      Value first = lane_;  // the thread's first chunk from `below` on
      if (below > 0) {
        const Value rounds = b_.create<arith::DivUIOp>(
            loc_, b_.create<arith::SubIOp>(loc_, C(below + step - 1), lane_), C(step));
        first =
            b_.create<arith::AddIOp>(loc_, lane_, b_.create<arith::MulIOp>(loc_, rounds, C(step)));
      }
      ASSIGN_OR_RETURN(values, ChunkLoop(first, chunks, /*bounded=*/false, values, body));
    }
    return values;
  }

  // One loop of ForEachChunk: chunks from `from` to `to`, a row's threads
  // apart; with `bounded`, the bounded compares are true at its elements.
  StatusOr<std::vector<Value>> ChunkLoop(Value from, int64_t to, bool bounded,
                                         const std::vector<Value>& inits, const ChunkBody& body) {
    mlir::OpBuilder::InsertPoint after_loop = b_.saveInsertionPoint();
    auto loop = mlir::cast<mlir::scf::ForOp>(
        CreateFor(b_, loc_, from, C(to), C(plan_.threads_per_row), inits));
    FusedEmitter::Cache saved = emitter_.SaveCache();
    std::vector<Value> next(loop.getRegionIterArgs().begin(), loop.getRegionIterArgs().end());
    const Chunk& chunk = BeginChunk(ChunkColumn(loop.getInductionVar()));
    if (bounded) {
      const Value holds = b_.create<arith::ConstantOp>(loc_, b_.getBoolAttr(true));
      for (const ElementIndex& index : chunk.elements) {
        for (const ir::Instruction* c : plan_.bounded) emitter_.Assume(*c, index, holds);
      }
    }
    const Status status = body(chunk, next);
    chunks_.pop_back();
    RETURN_IF_ERROR(status);
    if (!inits.empty()) b_.create<mlir::scf::YieldOp>(loc_, next);
    emitter_.RestoreCache(std::move(saved));
    b_.restoreInsertionPoint(after_loop);
    b_.setInsertionPointAfter(loop);
    return std::vector<Value>(loop.getResults().begin(), loop.getResults().end());
  }

  // The warp's totals in every lane (butterfly shuffles).
  void CombineLanes(const Batch& batch, std::vector<Value>& accs) {
    for (int64_t offset = kWarp / 2; offset > 0; offset /= 2) {
      for (size_t k = 0; k < accs.size(); ++k) {
        auto shuffle = b_.create<mlir::gpu::ShuffleOp>(loc_, accs[k], static_cast<int32_t>(offset),
                                                       static_cast<int32_t>(kWarp),
                                                       mlir::gpu::ShuffleMode::XOR);
        accs[k] = CombineReduce(b_, loc_, batch[k]->attrs().reduce_kind, accs[k],
                                shuffle.getShuffleResult());
      }
    }
  }

  // A block row's totals: shared[k * warps + warp] = acc_k (lane 0 of each
  // warp); barrier; every thread combines the warps' partials; barrier
  // before the next batch reuses it.
  void CombineWarps(const Batch& batch, std::vector<Value>& accs) {
    const int64_t warps = plan_.warps_per_row;
    Value warp = b_.create<arith::DivUIOp>(loc_, lane_, C(kWarp));
    Value first = b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::eq,
                                           b_.create<arith::RemUIOp>(loc_, lane_, C(kWarp)), C(0));
    auto if_first = b_.create<mlir::scf::IfOp>(loc_, first, false);
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPoint(if_first.thenBlock()->getTerminator());
      for (size_t k = 0; k < accs.size(); ++k) {
        Value slot = b_.create<arith::AddIOp>(loc_, warp, C(k * warps));
        b_.create<mlir::memref::StoreOp>(
            loc_, accs[k], shared_,
            mlir::ValueRange{b_.create<arith::IndexCastOp>(loc_, b_.getIndexType(), slot)});
      }
    }
    b_.create<mlir::gpu::BarrierOp>(loc_);
    for (size_t k = 0; k < accs.size(); ++k) {
      Value total;
      for (int64_t w = 0; w < warps; ++w) {
        Value slot = b_.create<arith::ConstantIndexOp>(loc_, k * warps + w);
        Value part = b_.create<mlir::memref::LoadOp>(loc_, shared_, mlir::ValueRange{slot});
        total = total ? CombineReduce(b_, loc_, batch[k]->attrs().reduce_kind, total, part) : part;
      }
      accs[k] = total;
    }
    b_.create<mlir::gpu::BarrierOp>(loc_);
  }

  // Outputs shaped like the input in a last pass over the row (or at the
  // unrolled columns), outputs shaped like a row by lane 0.
  Status EmitOutputs() {
    if (!plan_.elem_outputs.empty() && plan_.unrolled_columns > 0) {
      LoadUnreadRows();
      for (const Chunk& chunk : chunks_) RETURN_IF_ERROR(StoreChunk(chunk));
    } else if (!plan_.elem_outputs.empty()) {
      RETURN_IF_ERROR(PreloadRowParameters());
      RETURN_IF_ERROR(ForEachChunk({}, [&](const Chunk& chunk, std::vector<Value>&) {
                        return StoreChunk(chunk);
                      }).status());
    }
    if (plan_.row_outputs.empty()) return Status::Ok();
    Value first = b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::eq, lane_, C(0));
    auto if_first = b_.create<mlir::scf::IfOp>(loc_, first, false);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPoint(if_first.thenBlock()->getTerminator());
    FusedEmitter::Cache saved = emitter_.SaveCache();
    RETURN_IF_ERROR(EmitAndStore(emitter_, b_, loc_, entry_, fusion_, plan_.row_outputs,
                                 plan_.row_slots, row_index_, row_));
    emitter_.RestoreCache(std::move(saved));
    return Status::Ok();
  }

  // Note [unrolled warp rows]: the row parameters no pass read (only the
  // outputs do), for every chunk, here: after the passes, so that they hold
  // no registers there, and before the first store, so that their loads are
  // in flight together (loads stay below stores that may alias them). One
  // the outputs do not read either is left to LLVM to drop.
  void LoadUnreadRows() {
    if (plan_.width == 1) return;
    for (Chunk& chunk : chunks_) {
      for (const ir::Instruction* p : plan_.row_params) {
        Value& vector = chunk.vectors[p];
        if (!vector) {
          vector = LoadVector(entry_->getArgument(p->attrs().index), chunk.elements[0].linear, *p);
        }
      }
    }
  }

  // Parameters shaped like a row (the cross-entropy's target, a row's
  // statistics) read once before the output loop, into the emitter's cache:
  // in the loop, LLVM must assume the stores may alias them and would reload
  // them at every element.
  Status PreloadRowParameters() {
    // Keyed as the loop reaches them: through a broadcast, whose operand
    // index is the row's multi-index alone.
    ElementIndex row;
    row.multi = row_index_.multi;
    for (const ir::Instruction* p : fusion_.called_computation()->parameters()) {
      if (p->shape().dims() == plan_.row_dims) RETURN_IF_ERROR(emitter_.Emit(*p, row).status());
    }
    return Status::Ok();
  }

  const ir::Instruction& fusion_;
  const RowReductionPlan& plan_;
  const std::string& name_;
  mlir::gpu::GPUModuleOp gpu_module_;
  Value lane_, row_, row_start_;
  ElementIndex row_index_;
  Value shared_;                                       // the warps' partials (block rows)
  std::map<const ir::Instruction*, Value> cache_ptr_;  // addrspace(3) pointer per cached param
  std::map<const ir::Instruction*, Value> column_ptr_;  // Note [column cache]: the same
  Value dynamic_shared_;                                // the launch's dynamic shared bytes
  // Note [row vectors]: the current loop's chunk, or the lane's unrolled
  // chunks (Note [unrolled warp rows]).
  std::vector<Chunk> chunks_;
  std::map<const ir::Instruction*, Value> results_;    // reduce -> its row's value
};

class RowReductionEmitter : public KernelEmitter {
 public:
  // `mixed`: emit only the row part (Note [mixed row and column reductions]).
  explicit RowReductionEmitter(bool mixed) : mixed_(mixed) {}
  std::string_view Name() const override {
    return mixed_ ? "mixed_reduction_rows" : "row_reduction";
  }

  StatusOr<KernelSpec> Emit(const ir::Instruction& fusion, const std::string& name,
                            mlir::gpu::GPUModuleOp gpu_module) const override {
    ASSIGN_OR_RETURN(const RowReductionPlan plan, PlanRowReduction(fusion, mixed_));
    ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
    RowReductionBuilder builder(fusion, *fused, plan, name, gpu_module);
    RETURN_IF_ERROR(builder.Build());
    KernelSpec spec = MakeKernelSpec(fusion, name, fusion.attrs().fusion_kind, plan.grid,
                                     plan.block, plan.shared_floats);
    spec.dynamic_shared_bytes = plan.cache_bytes;
    for (KernelParam& p : spec.params) {
      // Note [row vectors]: rows (and a row's columns) move as vectors of
      // `width` elements.
      if (p.shape.rank() > 0 && p.shape.dims().back() == plan.n) {
        p.min_alignment = std::min<int64_t>(16, p.min_alignment * plan.width);
      }
    }
    for (const auto& [p, offset] : plan.column_cached) {  // copied by 16-byte vectors
      if (ColumnCopyWidth(plan, *p) > 1) spec.params[p->attrs().index].min_alignment = 16;
    }
    return spec;
  }

 private:
  bool mixed_;
};

}  // namespace

std::unique_ptr<KernelEmitter> MakeRowReductionEmitter() {
  return std::make_unique<RowReductionEmitter>(/*mixed=*/false);
}

std::unique_ptr<KernelEmitter> MakeMixedReductionRowsEmitter() {
  return std::make_unique<RowReductionEmitter>(/*mixed=*/true);
}

}  // namespace gptc::codegen
