// The row-reduction emitter (kind=reduction or cross_entropy whose reduces
// are over the last dim): layer norm forward/backward, softmax, row sums, the
// softmax cross-entropy with its gradient (the composite is inlined; rows of
// 50304 logits take a block of 512 threads each).
//
// Note [row reduction]: with input shape [rows..., N], a row is handled by a
// warp (N <= 1024; 8 rows per 256-thread block) or a whole block (larger N).
// Its threads stride over the N columns. Reductions run in batches: each batch
// holds the reductions that do not depend on each other (mean and mean of
// squares share one pass, variance after mean needs a second), accumulates in
// f32 in one loop, combines lanes with butterfly shuffles and, for a block,
// warps through shared memory. Every thread then holds the row's results, so
// later batches and the outputs can use them. Outputs shaped like the input
// are written in a final column loop; outputs shaped like a row by lane 0.
// Input elements are recomputed (re-read) in each pass; reads of a row after
// the first come from L1/L2, except in block mode (Note [row cache]).
//
// Note [unrolled warp rows]: a warp row of N = 32 k columns is emitted as
// straight-line code over the lane's k columns instead of a loop, with the
// same element indices in every pass and in the output stores, when its
// row-shaped parameters hold at most 48 elements a lane (layer norm forward:
// one, 24 a lane). The fused emitter's cache then keeps each loaded element
// in a register from the first pass on: the row is read once, its loads all
// in flight together (the loop reloaded it from L1/L2 each pass, and reloaded
// the row's statistics at every store, which may alias them). On the H100
// this took the forward layer norm from 85 to 71 us; the backward's rows
// kernel (four row-shaped parameters, 96 a lane, 108 registers) went from 127
// to 140 us, so it keeps the loop.
//
// Note [duplicate reduces]: a fusion can hold the same reduction twice: the
// softmax cross-entropy's loss reduces the logits' max and sum of exps
// inside its decomposition, and its gradient (remat) reduces the same again
// from another convert of the same logits. Reduces whose operands compute
// the same values (same opcodes, shapes and attributes down to the same
// parameters: SameValue) are emitted once. gpt2-124m's cross-entropy kernel
// goes from five reduces in three passes over each row to three reduces in
// two (plus the output loop): max, then the sum of exps with the target's
// logit.
//
// Note [row cache]: a block-per-row kernel that reads its row in several
// passes (the cross-entropy's reduces and its gradient) first copies each
// row-shaped parameter's row into dynamic shared memory, and every pass reads
// it there. Without it the first GPU run's cross-entropy over 16 x 1024 rows
// of 50304 bf16 logits took 3.2 ms, 3.3x its roofline: four blocks of 100 KB
// rows a multiprocessor outgrow the 50 MB L2, so every pass went to DRAM.
#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "compiler/ir/patterns.h"
#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"
#include "compiler/codegen/kernel_emitter.h"
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
constexpr int64_t kWarpRowsPerBlock = 8;
// Note [row cache]: at most this much of a row in shared memory, so that two
// blocks of it fit on a multiprocessor (228 KiB).
constexpr int64_t kMaxRowCacheBytes = 112 * 1024;
// Note [unrolled warp rows]: at most this many row elements a lane (over all
// row-shaped parameters) are held in registers.
constexpr int64_t kMaxUnrolledElements = 48;

using Bindings = ir::CompositeBindings;

// Whether `a` and `b` compute the same values (Note [duplicate reduces]):
// the same instruction once decomposition parameters are bound (and
// duplicates mapped to their first twin), or the same opcode, shape and
// attributes over operands that are. Composites and parameters only match
// themselves.
bool SameValue(const ir::Instruction* a, const ir::Instruction* b, const Bindings& bindings,
               std::map<std::pair<const ir::Instruction*, const ir::Instruction*>, bool>& memo) {
  for (auto it = bindings.find(a); it != bindings.end(); it = bindings.find(a)) a = it->second;
  for (auto it = bindings.find(b); it != bindings.end(); it = bindings.find(b)) b = it->second;
  if (a == b) return true;
  if (a->opcode() != b->opcode() || a->opcode() == ir::Opcode::kParameter ||
      a->called_computation() != nullptr || b->called_computation() != nullptr ||
      a->shape() != b->shape() || !(a->attrs() == b->attrs()) ||
      a->operand_count() != b->operand_count()) {
    return false;
  }
  if (auto it = memo.find({a, b}); it != memo.end()) return it->second;
  bool same = true;
  for (int64_t i = 0; same && i < a->operand_count(); ++i) {
    same = SameValue(a->operand(i), b->operand(i), bindings, memo);
  }
  memo[{a, b}] = same;
  return same;
}

class RowReductionEmitter : public KernelEmitter {
 public:
  // `mixed`: emit only the row part (Note [mixed row and column reductions]).
  explicit RowReductionEmitter(bool mixed) : mixed_(mixed) {}
  std::string_view Name() const override {
    return mixed_ ? "mixed_reduction_rows" : "row_reduction";
  }

  StatusOr<KernelSpec> Emit(const ir::Instruction& fusion, const std::string& name,
                            mlir::gpu::GPUModuleOp gpu_module) const override {
    ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
    std::vector<const ir::Instruction*> outputs = FusionOutputs(*fused);
    std::vector<ir::Instruction*> params = fused->parameters();
    std::vector<bool> skip_output(outputs.size(), false);  // the column part, when mixed_
    if (mixed_) {
      StatusOr<std::vector<bool>> column = MixedReductionColumnPart(*fused);
      if (!column.ok()) return column.status().WithPrefix("%" + fusion.name());
      skip_output = *column;
    }

    // The reduces and the row geometry.
    std::vector<const ir::Instruction*> reduces;
    std::vector<int64_t> input_dims;
    Bindings bindings;
    ir::BindComposites(*fused, bindings);
    for (const ir::Instruction* inst : FusionReduces(*fused)) {
      if (mixed_ && !ir::IsRowReduce(*inst)) continue;
      const ir::Shape& in = inst->operand(0)->shape();
      if (in.rank() == 0 || inst->attrs().dimensions != std::vector<int64_t>{in.rank() - 1}) {
        return Error(
            "%{}: {} reduces dims {} of {}: only row reductions (over the last dim) are "
            "supported yet",
            fusion.name(), Describe(*inst), ir::DimsToString(inst->attrs().dimensions),
            in.ToString());
      }
      if (!ir::IsFloat(in.dtype()) || !ir::IsFloat(inst->shape().dtype())) {
        return Error("%{}: {}: only floating-point reductions are supported", fusion.name(),
                     Describe(*inst));
      }
      if (!input_dims.empty() && in.dims() != input_dims) {
        return Error("%{}: {} reduces {} but an earlier reduce reduces dims {}", fusion.name(),
                     Describe(*inst), in.ToString(), ir::DimsToString(input_dims));
      }
      input_dims = in.dims();
      reduces.push_back(inst);
    }
    if (reduces.empty()) return Error("%{}: reduction fusion without a reduce", fusion.name());
    // Note [duplicate reduces]: a reduce computing what an earlier one does
    // (the cross-entropy gradient's max and sum of the rematerialized
    // logits, the loss's own) reads the earlier one's result; binding it to
    // its twin also makes DependsOnAny and later comparisons see through it.
    {
      std::map<std::pair<const ir::Instruction*, const ir::Instruction*>, bool> memo;
      std::vector<const ir::Instruction*> unique;
      for (const ir::Instruction* r : reduces) {
        const ir::Instruction* twin = nullptr;
        for (const ir::Instruction* u : unique) {
          if (u->shape() == r->shape() && u->attrs() == r->attrs() &&
              SameValue(u->operand(0), r->operand(0), bindings, memo)) {
            twin = u;
            break;
          }
        }
        if (twin == nullptr) {
          unique.push_back(r);
          continue;
        }
        bindings[r] = twin;
        memo.clear();  // earlier answers did not see r as its twin
      }
      reduces = std::move(unique);
    }
    std::vector<int64_t> row_dims(input_dims.begin(), input_dims.end() - 1);
    const ir::Shape input_shape(ir::DType::kF32, input_dims), row_shape(ir::DType::kF32, row_dims);
    const int64_t n = input_dims.back();
    const int64_t rows = row_shape.num_elements();
    std::vector<const ir::Instruction*> elem_outputs, row_outputs;
    std::vector<int64_t> elem_slots, row_slots;  // kernel argument of each output
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (skip_output[o]) continue;
      const ir::Shape& s = outputs[o]->shape();
      int64_t slot = static_cast<int64_t>(params.size() + o);
      if (!s.is_tuple() && s.dims() == input_dims) {
        elem_outputs.push_back(outputs[o]);
        elem_slots.push_back(slot);
      } else if (!s.is_tuple() && s.dims() == row_dims) {
        row_outputs.push_back(outputs[o]);
        row_slots.push_back(slot);
      } else {
        return Error("%{}: output {} has shape {}; a row reduction writes {} or {}", fusion.name(),
                     Describe(*outputs[o]), s.ToString(), ir::DimsToString(input_dims),
                     ir::DimsToString(row_dims));
      }
    }

    // Batches of mutually independent reduces, in order.
    std::vector<std::vector<const ir::Instruction*>> batches;
    std::set<const ir::Instruction*> current;
    for (const ir::Instruction* r : reduces) {
      std::map<const ir::Instruction*, bool> memo;
      if (!batches.empty() && !ir::DependsOnAny(r->operand(0), current, memo, &bindings)) {
        batches.back().push_back(r);
      } else {
        batches.push_back({r});
      }
      current.insert(r);
      if (batches.back().size() == 1) current = {r};
    }
    size_t max_batch = 0;
    for (const auto& batch : batches) max_batch = std::max(max_batch, batch.size());

    // Geometry (Note [row reduction]).
    const int64_t threads_per_row = n <= 1024 ? kWarp : (n <= 4096 ? 256 : 512);
    const int64_t rows_per_block = threads_per_row == kWarp ? std::min(kWarpRowsPerBlock, rows) : 1;
    const int64_t block = threads_per_row * rows_per_block;
    const int64_t grid = (rows + rows_per_block - 1) / rows_per_block;
    const int64_t warps_per_row = threads_per_row / kWarp;
    const int64_t shared_floats =
        warps_per_row > 1 ? static_cast<int64_t>(max_batch) * warps_per_row : 0;
    const bool wide = rows * n + threads_per_row >= std::numeric_limits<int32_t>::max();

    mlir::OpBuilder b(gpu_module.getContext());
    const int64_t num_params = static_cast<int64_t>(params.size() + outputs.size());
    mlir::gpu::GPUFuncOp func = CreateKernel(b, gpu_module, name, num_params, block, shared_floats);
    mlir::Block* entry = &func.getBody().front();
    mlir::Location loc = b.getUnknownLoc();
    mlir::IntegerType index_type = wide ? b.getI64Type() : b.getI32Type();

    // Note [row cache]: the row-shaped parameters kept in shared memory, and
    // their byte offsets there.
    std::vector<const ir::Instruction*> row_params;  // read a row at a time
    for (const ir::Instruction* p : params) {
      if (!p->shape().is_tuple() && p->shape().num_elements() == rows * n) row_params.push_back(p);
    }
    std::map<const ir::Instruction*, int64_t> cached;
    int64_t cache_bytes = 0;
    const size_t passes = batches.size() + (elem_outputs.empty() ? 0 : 1);
    if (threads_per_row > kWarp && !mixed_ && passes > 1) {
      for (const ir::Instruction* p : row_params) {
        const int64_t bytes = (n * StorageBytes(p->shape().dtype()) + 15) / 16 * 16;
        if (cache_bytes + bytes > kMaxRowCacheBytes) continue;
        cached[p] = cache_bytes;
        cache_bytes += bytes;
      }
    }
    std::map<const ir::Instruction*, Value> cache_ptr;  // addrspace(3) pointer per cached param
    Value cached_linear, cached_column;                 // the element of the current column loop

    std::map<const ir::Instruction*, Value> results;  // reduce -> its row's value
    auto read_parameter = [&](const ir::Instruction& p,
                              const ElementIndex& index) -> StatusOr<Value> {
      if (auto it = cache_ptr.find(&p);
          it != cache_ptr.end() && cached_linear && index.linear == cached_linear) {
        return LoadElement(b, loc, it->second, cached_column, p.shape().dtype());
      }
      return LoadElement(b, loc, entry->getArgument(p.attrs().index), index.linear,
                         p.shape().dtype());
    };
    FusedEmitter* self = nullptr;
    FusedEmitter::Reader reader = [&](const ir::Instruction& p, const ElementIndex& index) {
      ElementIndex linear = index;
      linear.linear = self->Linear(index, p.shape());
      return read_parameter(p, linear);
    };
    FusedEmitter::Reader read_reduce = [&](const ir::Instruction& r,
                                           const ElementIndex&) -> StatusOr<Value> {
      auto twin = bindings.find(&r);  // a duplicate reduce reads its twin's result
      auto it = results.find(twin == bindings.end() ? &r : twin->second);
      if (it == results.end()) {
        return Error("{}: used before its row is reduced (not a row-local fusion)", Describe(r));
      }
      return it->second;
    };
    FusedEmitter emitter(b, entry, index_type, "reduction", reader, read_reduce);
    emitter.BindComposites(*fused);
    self = &emitter;
    auto c = [&](int64_t v) { return emitter.IndexConstant(v); };

    auto to_index = [&](Value v) {
      return b.create<arith::IndexCastOp>(loc, index_type, v).getResult();
    };
    Value tid = to_index(b.create<mlir::gpu::ThreadIdOp>(loc, mlir::gpu::Dimension::x));
    Value bid = to_index(b.create<mlir::gpu::BlockIdOp>(loc, mlir::gpu::Dimension::x));
    Value lane = threads_per_row == block
                     ? tid
                     : b.create<arith::RemUIOp>(loc, tid, c(threads_per_row)).getResult();
    Value row = bid;
    if (rows_per_block > 1) {
      Value in_block = b.create<arith::DivUIOp>(loc, tid, c(threads_per_row));
      row = b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, bid, c(rows_per_block)),
                                    in_block);
      if (rows % rows_per_block != 0) {  // whole warps drop out: no barrier in warp mode
        Value live = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, row, c(rows));
        auto guard = b.create<mlir::scf::IfOp>(loc, live, /*withElseRegion=*/false);
        b.setInsertionPoint(guard.thenBlock()->getTerminator());
      }
    }
    ElementIndex row_index;
    row_index.linear = row;
    row_index.multi = emitter.Multi(row_index, row_shape);
    Value row_start = b.create<arith::MulIOp>(loc, row, c(n));
    auto element_index = [&](Value j) {
      ElementIndex index;
      index.linear = b.create<arith::AddIOp>(loc, row_start, j);
      index.multi = row_index.multi;
      index.multi.push_back(j);
      cached_linear = index.linear;
      cached_column = j;
      return index;
    };

    if (!cached.empty()) {
      // One extern [0 x i8] in shared memory: the launch's dynamic bytes.
      LLVM::GlobalOp global;
      {
        mlir::OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(gpu_module.getBody());
        global = b.create<LLVM::GlobalOp>(loc, LLVM::LLVMArrayType::get(b.getI8Type(), 0),
                                          /*isConstant=*/false, LLVM::Linkage::External,
                                          name + "_row", mlir::Attribute(), /*alignment=*/16,
                                          /*addrSpace=*/3);
      }
      const Value base = b.create<LLVM::AddressOfOp>(loc, global);
      for (const auto& [p, offset] : cached) {
        cache_ptr[p] = b.create<LLVM::GEPOp>(
            loc, base.getType(), b.getI8Type(), base,
            mlir::ValueRange{b.create<arith::ConstantOp>(loc, b.getI32IntegerAttr(offset))},
            /*inbounds=*/true);
      }
      // Rows of whole 16-byte vectors are copied a vector a thread (rows
      // start 16-byte aligned when they are: buffers are), then a barrier:
      // a pass's thread reads columns another thread copied. Other rows go
      // an element at a time, each thread copying the columns it later reads.
      std::vector<const ir::Instruction*> by_vector, by_element;
      for (const auto& [p, offset] : cached) {
        ((n * StorageBytes(p->shape().dtype())) % 16 == 0 ? by_vector : by_element).push_back(p);
      }
      if (!by_element.empty()) {
        mlir::OpBuilder::InsertPoint after_copy = b.saveInsertionPoint();
        auto copy =
            mlir::cast<mlir::scf::ForOp>(CreateFor(b, loc, lane, c(n), c(threads_per_row), {}));
        const Value j = copy.getInductionVar();
        const Value at = b.create<arith::AddIOp>(loc, row_start, j);
        for (const ir::Instruction* p : by_element) {
          const ir::DType dtype = p->shape().dtype();
          StoreElement(b, loc, LoadElement(b, loc, entry->getArgument(p->attrs().index), at, dtype),
                       cache_ptr[p], j, dtype);
        }
        b.restoreInsertionPoint(after_copy);
        b.setInsertionPointAfter(copy);
      }
      for (const ir::Instruction* p : by_vector) {
        // A loop per parameter: its vectors hold 16 bytes / its element size.
        const int64_t bytes = StorageBytes(p->shape().dtype());
        const int64_t width = 16 / bytes;
        mlir::Type lane_type = b.getIntegerType(8 * bytes);
        auto vector_type = mlir::VectorType::get({width}, lane_type);
        mlir::OpBuilder::InsertPoint after_copy = b.saveInsertionPoint();
        auto copy = mlir::cast<mlir::scf::ForOp>(
            CreateFor(b, loc, lane, c(n / width), c(threads_per_row), {}));
        const Value first = b.create<arith::MulIOp>(loc, copy.getInductionVar(), c(width));
        const Value global = entry->getArgument(p->attrs().index);
        const Value from = b.create<LLVM::GEPOp>(
            loc, global.getType(), lane_type, global,
            mlir::ValueRange{b.create<arith::AddIOp>(loc, row_start, first)}, true);
        const Value to = b.create<LLVM::GEPOp>(loc, cache_ptr[p].getType(), lane_type, cache_ptr[p],
                                               mlir::ValueRange{first}, true);
        const Value v = b.create<LLVM::LoadOp>(loc, vector_type, from, /*alignment=*/16);
        b.create<LLVM::StoreOp>(loc, v, to, /*alignment=*/16);
        b.restoreInsertionPoint(after_copy);
        b.setInsertionPointAfter(copy);
      }
      if (!by_vector.empty()) b.create<mlir::gpu::BarrierOp>(loc);
    }

    // Note [unrolled warp rows]: the element indices of a lane's columns,
    // shared by every pass, when the row is emitted without a loop.
    std::vector<ElementIndex> unrolled;
    if (threads_per_row == kWarp && n % kWarp == 0 &&
        static_cast<int64_t>(row_params.size()) * (n / kWarp) <= kMaxUnrolledElements) {
      for (int64_t u = 0; u < n / kWarp; ++u) {
        unrolled.push_back(element_index(b.create<arith::AddIOp>(loc, lane, c(kWarp * u))));
      }
    }

    Value shared;
    if (shared_floats > 0) shared = func.getWorkgroupAttributions()[0];
    for (const auto& batch : batches) {
      // acc_k = identity; for (j = lane; j < n; j += threads_per_row) acc_k = acc_k (+) x_k[row, j]
      std::vector<Value> inits;
      for (const ir::Instruction* r : batch) {
        double identity = r->attrs().reduce_kind == ir::ReduceKind::kSum
                              ? 0.0
                              : -std::numeric_limits<double>::infinity();
        inits.push_back(ScalarConstant(b, loc, ir::DType::kF32, identity));
      }
      // accs_k = accs_k (+) x_k at `index`.
      auto accumulate = [&](const ElementIndex& index, std::vector<Value>& accs) -> Status {
        for (size_t k = 0; k < batch.size(); ++k) {
          const ir::Instruction* r = batch[k];
          StatusOr<Value> x = emitter.Emit(*r->operand(0), index);
          if (!x.ok()) return x.status().WithPrefix("%" + fusion.name());
          Value f = ConvertValue(b, loc, *x, r->operand(0)->shape().dtype(), ir::DType::kF32);
          accs[k] = CombineReduce(b, loc, r->attrs().reduce_kind, accs[k], f);
        }
        return Status::Ok();
      };
      std::vector<Value> accs = inits;
      if (!unrolled.empty()) {
        for (const ElementIndex& index : unrolled) RETURN_IF_ERROR(accumulate(index, accs));
      } else {
        mlir::OpBuilder::InsertPoint after_loop = b.saveInsertionPoint();
        auto loop =
            mlir::cast<mlir::scf::ForOp>(CreateFor(b, loc, lane, c(n), c(threads_per_row), inits));
        FusedEmitter::Cache saved = emitter.SaveCache();
        std::vector<Value> next(loop.getRegionIterArgs().begin(), loop.getRegionIterArgs().end());
        RETURN_IF_ERROR(accumulate(element_index(loop.getInductionVar()), next));
        b.create<mlir::scf::YieldOp>(loc, next);
        emitter.RestoreCache(std::move(saved));
        b.restoreInsertionPoint(after_loop);
        b.setInsertionPointAfter(loop);
        accs.assign(loop.getResults().begin(), loop.getResults().end());
      }
      for (int64_t offset = kWarp / 2; offset > 0; offset /= 2) {
        for (size_t k = 0; k < accs.size(); ++k) {
          auto shuffle = b.create<mlir::gpu::ShuffleOp>(loc, accs[k], static_cast<int32_t>(offset),
                                                        static_cast<int32_t>(kWarp),
                                                        mlir::gpu::ShuffleMode::XOR);
          accs[k] =
              CombineReduce(b, loc, batch[k]->attrs().reduce_kind, accs[k], shuffle.getShuffleResult());
        }
      }
      if (warps_per_row > 1) {
        // shared[k * warps + warp] = acc_k (lane 0 of each warp); barrier; every
        // thread combines the warps' partials; barrier before the next batch reuses it.
        Value warp = b.create<arith::DivUIOp>(loc, lane, c(kWarp));
        Value first = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq,
                                              b.create<arith::RemUIOp>(loc, lane, c(kWarp)), c(0));
        auto if_first = b.create<mlir::scf::IfOp>(loc, first, false);
        {
          mlir::OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(if_first.thenBlock()->getTerminator());
          for (size_t k = 0; k < accs.size(); ++k) {
            Value slot = b.create<arith::AddIOp>(loc, warp, c(k * warps_per_row));
            b.create<mlir::memref::StoreOp>(
                loc, accs[k], shared,
                mlir::ValueRange{b.create<arith::IndexCastOp>(loc, b.getIndexType(), slot)});
          }
        }
        b.create<mlir::gpu::BarrierOp>(loc);
        for (size_t k = 0; k < accs.size(); ++k) {
          Value total;
          for (int64_t w = 0; w < warps_per_row; ++w) {
            Value slot = b.create<arith::ConstantIndexOp>(loc, k * warps_per_row + w);
            Value part = b.create<mlir::memref::LoadOp>(loc, shared, mlir::ValueRange{slot});
            total = total ? CombineReduce(b, loc, batch[k]->attrs().reduce_kind, total, part) : part;
          }
          accs[k] = total;
        }
        b.create<mlir::gpu::BarrierOp>(loc);
      }
      for (size_t k = 0; k < batch.size(); ++k) {
        results[batch[k]] =
            ConvertValue(b, loc, accs[k], ir::DType::kF32, batch[k]->shape().dtype());
      }
    }

    if (!elem_outputs.empty() && !unrolled.empty()) {
      for (const ElementIndex& index : unrolled) {
        RETURN_IF_ERROR(EmitAndStore(emitter, b, loc, entry, fusion, elem_outputs, elem_slots,
                                     index, index.linear));
      }
    } else if (!elem_outputs.empty()) {
      mlir::OpBuilder::InsertPoint after_loop = b.saveInsertionPoint();
      auto loop =
          mlir::cast<mlir::scf::ForOp>(CreateFor(b, loc, lane, c(n), c(threads_per_row), {}));
      FusedEmitter::Cache saved = emitter.SaveCache();
      ElementIndex index = element_index(loop.getInductionVar());
      RETURN_IF_ERROR(
          EmitAndStore(emitter, b, loc, entry, fusion, elem_outputs, elem_slots, index, index.linear));
      emitter.RestoreCache(std::move(saved));
      b.restoreInsertionPoint(after_loop);
      b.setInsertionPointAfter(loop);
    }
    if (!row_outputs.empty()) {
      Value first = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, lane, c(0));
      auto if_first = b.create<mlir::scf::IfOp>(loc, first, false);
      mlir::OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(if_first.thenBlock()->getTerminator());
      FusedEmitter::Cache saved = emitter.SaveCache();
      RETURN_IF_ERROR(
          EmitAndStore(emitter, b, loc, entry, fusion, row_outputs, row_slots, row_index, row));
      emitter.RestoreCache(std::move(saved));
    }

    KernelSpec spec =
        MakeKernelSpec(fusion, name, fusion.attrs().fusion_kind, grid, block, shared_floats);
    spec.dynamic_shared_bytes = cache_bytes;
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
