// The elementwise loop emitter (kind=loop and kind=optimizer): a grid-stride
// loop over the output elements of each output shape (Note [loop groups]); each thread handles `width` consecutive elements per
// iteration so that same-shaped operands and the results move with 16-byte
// vector loads and stores (Note [loop vectorisation]).
#include <algorithm>
#include <limits>
#include <map>

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

// Note [loop vectorisation]: with width W (16 bytes of the widest dtype among
// the results and the operands that have the result's element count, capped
// at 8 and dividing the element count), iteration i covers elements
// [i*W, i*W + W). An operand read at the thread's own element index (through
// elementwise ops and reshapes only) is loaded once per iteration as a
// vector<W> with alignment W*bytes and its lanes extracted; other reads
// (broadcasts, transposes, slices...) are scalar loads. Results are stored as
// vectors. Buffers are 256-byte aligned (buffer assignment), so W*bytes <= 16
// divides every vector's address.
constexpr int64_t kBlock = 256;
constexpr int64_t kMaxBlocks = 132 * 16;  // H100 SMs x 16: enough to fill the GPU

// Note [loop groups]: the outputs of a fusion may have different shapes (the
// horizontal optimizer fusion updates every parameter, m and v; other
// multi-output loop fusions too). Outputs of one shape form a group; group g
// owns blocks [first_block, first_block + blocks) of the grid (blocks: enough
// for its elements, at most kMaxBlocks) and runs the vectorised grid-stride
// loop of Note [loop vectorisation] over its own shape with its own width.
// A block tests its range once, so the cost of the dispatch is one compare
// per group per block; all groups share the block size.
struct Group {
  std::vector<int64_t> dims;
  int64_t n = 0;  // elements
  std::vector<const ir::Instruction*> outputs;
  std::vector<int64_t> slots;  // kernel argument of each output
  int64_t width = 1, iterations = 0, first_block = 0, blocks = 1;
};

class LoopEmitter : public KernelEmitter {
 public:
  std::string_view Name() const override { return "loop"; }

  StatusOr<KernelSpec> Emit(const ir::Instruction& fusion, const std::string& name,
                            mlir::gpu::GPUModuleOp gpu_module) const override {
    ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
    std::vector<const ir::Instruction*> outputs = FusionOutputs(*fused);
    std::vector<ir::Instruction*> params = fused->parameters();

    // Output groups by shape (Note [loop groups]), in order of first output.
    std::vector<Group> groups;
    for (size_t o = 0; o < outputs.size(); ++o) {
      const ir::Shape& s = outputs[o]->shape();
      if (s.is_tuple()) {
        return Error("%{}: tuple-shaped output {}", fusion.name(), Describe(*outputs[o]));
      }
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const Group& g) { return g.dims == s.dims(); });
      if (it == groups.end()) {
        groups.push_back(Group{s.dims(), s.num_elements()});
        it = groups.end() - 1;
      }
      it->outputs.push_back(outputs[o]);
      it->slots.push_back(static_cast<int64_t>(params.size() + o));
    }
    int64_t max_iterations = 0, max_elements = 0;
    for (Group& g : groups) {
      int64_t widest = 1;
      for (const ir::Instruction* out : g.outputs)
        widest = std::max(widest, StorageBytes(out->shape().dtype()));
      for (const ir::Instruction* p : params) {
        if (p->shape().num_elements() == g.n)
          widest = std::max(widest, StorageBytes(p->shape().dtype()));
      }
      g.width = std::min<int64_t>(8, 16 / widest);
      while (g.width > 1 && g.n % g.width != 0) g.width /= 2;
      g.iterations = g.n / g.width;
      max_iterations = std::max(max_iterations, g.iterations);
      max_elements = std::max(max_elements, g.n);
    }
    const int64_t block =
        groups.size() > 1 ? kBlock
                          : std::min(kBlock, std::max<int64_t>(32, (max_iterations + 31) / 32 * 32));
    int64_t grid = 0;
    for (Group& g : groups) {
      g.first_block = grid;
      g.blocks = std::max<int64_t>(1, std::min(kMaxBlocks, (g.iterations + block - 1) / block));
      grid += g.blocks;
    }
    const bool wide = max_elements + kMaxBlocks * block >= std::numeric_limits<int32_t>::max();

    mlir::OpBuilder b(gpu_module.getContext());
    const int64_t num_params = static_cast<int64_t>(params.size() + outputs.size());
    mlir::gpu::GPUFuncOp func = CreateKernel(b, gpu_module, name, num_params, block, 0);
    mlir::Block* entry = &func.getBody().front();
    mlir::Location loc = b.getUnknownLoc();
    mlir::IntegerType index_type = wide ? b.getI64Type() : b.getI32Type();

    auto to_index = [&](Value v) {
      return b.create<mlir::arith::IndexCastOp>(loc, index_type, v).getResult();
    };
    Value tid = to_index(b.create<mlir::gpu::ThreadIdOp>(loc, mlir::gpu::Dimension::x));
    Value bid = to_index(b.create<mlir::gpu::BlockIdOp>(loc, mlir::gpu::Dimension::x));

    const Group* group = nullptr;                     // the group being emitted
    std::map<const ir::Instruction*, Value> vectors;  // per iteration: vector loads
    Value base;                                       // per iteration: first element
    auto read_parameter = [&](const ir::Instruction& p,
                              const ElementIndex& index) -> StatusOr<Value> {
      Value ptr = entry->getArgument(p.attrs().index);
      ir::DType dtype = p.shape().dtype();
      const int64_t width = group->width;
      if (width > 1 && index.identity && p.shape().num_elements() == group->n) {
        Value& vec = vectors[&p];
        if (!vec) {
          // Loaded at its first use (Note [loop register pressure]); the
          // iteration's body is one block, so later lanes and outputs see it.
          mlir::Type storage = StorageType(b.getContext(), dtype);
          mlir::Type vec_type = mlir::VectorType::get({width}, storage);
          Value addr = b.create<mlir::LLVM::GEPOp>(loc, ptr.getType(), storage, ptr,
                                                   mlir::ValueRange{base}, true);
          vec = b.create<mlir::LLVM::LoadOp>(loc, vec_type, addr, width * StorageBytes(dtype));
        }
        Value lane = b.create<mlir::arith::ConstantOp>(loc, b.getI32IntegerAttr(index.lane));
        Value x = b.create<mlir::LLVM::ExtractElementOp>(loc, vec, lane);
        return FromStorage(b, loc, x, dtype);
      }
      return LoadElement(b, loc, ptr, index.linear, dtype);
    };
    // Scalar reads need a linear index; the emitter computes it from the multi-index.
    FusedEmitter* self = nullptr;
    FusedEmitter::Reader reader = [&](const ir::Instruction& p, const ElementIndex& index) {
      ElementIndex linear = index;
      linear.linear = self->Linear(index, p.shape());
      return read_parameter(p, linear);
    };
    FusedEmitter emitter(b, entry, index_type, "loop", reader, nullptr);
    self = &emitter;

    for (const Group& g : groups) {
      group = &g;
      vectors.clear();
      mlir::OpBuilder::InsertPoint after_group = b.saveInsertionPoint();
      FusedEmitter::Cache saved = emitter.SaveCache();
      Value group_bid = bid;
      if (groups.size() > 1) {
        // if (first_block <= bid < first_block + blocks) { ... }
        Value local = b.create<mlir::arith::SubIOp>(loc, bid, emitter.IndexConstant(g.first_block));
        Value in = b.create<mlir::arith::CmpIOp>(loc, mlir::arith::CmpIPredicate::ult, local,
                                                 emitter.IndexConstant(g.blocks));
        auto if_in = b.create<mlir::scf::IfOp>(loc, in, /*withElseRegion=*/false);
        b.setInsertionPoint(if_in.thenBlock()->getTerminator());
        group_bid = local;
      }
      Status status = EmitGroup(b, emitter, entry, fusion, g, block, group_bid, tid, base);
      emitter.RestoreCache(std::move(saved));
      b.restoreInsertionPoint(after_group);
      if (!status.ok()) return status;
    }

    KernelSpec spec;
    spec.name = name;
    spec.fusion = fusion.name();
    spec.kind = fusion.attrs().fusion_kind;
    spec.grid = {grid, 1, 1};
    spec.block = {block, 1, 1};
    spec.params = KernelParams(fusion, 1);
    for (KernelParam& p : spec.params) {
      // The widest vector any group moves this buffer with.
      int64_t width = 1;
      for (const Group& g : groups) {
        if (p.shape.num_elements() == g.n) width = std::max(width, g.width);
      }
      p.min_alignment = width * StorageBytes(p.shape.dtype());
    }
    return spec;
  }

 private:
  // One group's grid-stride loop over its blocks: `base` is set to each
  // iteration's first element (the parameter reader uses it).
  static Status EmitGroup(mlir::OpBuilder& b, FusedEmitter& emitter, mlir::Block* entry,
                          const ir::Instruction& fusion, const Group& g, int64_t block,
                          Value group_bid, Value tid, Value& base) {
    mlir::Location loc = b.getUnknownLoc();
    const int64_t width = g.width;
    // for (i = bid * block + tid; i < iterations; i += blocks * block)
    Value start = b.create<mlir::arith::AddIOp>(
        loc, b.create<mlir::arith::MulIOp>(loc, group_bid, emitter.IndexConstant(block)), tid);
    CreateFor(b, loc, start, emitter.IndexConstant(g.iterations),
              emitter.IndexConstant(g.blocks * block), mlir::ValueRange{});
    Value i = mlir::cast<mlir::scf::ForOp>(b.getInsertionBlock()->getParentOp()).getInductionVar();
    base = width == 1
               ? i
               : b.create<mlir::arith::MulIOp>(loc, i, emitter.IndexConstant(width)).getResult();

    // Note [loop register pressure]: outputs are computed and stored one at a
    // time (all lanes of one output, then its vector store), and operands are
    // loaded at their first use, so only the values of the output at hand (and
    // those it shares with later outputs through the emitter's cache) are
    // live. Computing every output lane by lane with every load at the top of
    // the iteration kept all the loads of a horizontal fusion live at once:
    // the 124M optimizer fusion (12 layers x p, g, m, v x 4 lanes per group)
    // spilled 23 KB.
    std::vector<Value> lane_index(width);
    for (int64_t lane = 0; lane < width; ++lane) {
      lane_index[lane] =
          lane == 0
              ? base
              : b.create<mlir::arith::AddIOp>(loc, base, emitter.IndexConstant(lane)).getResult();
    }
    for (size_t o = 0; o < g.outputs.size(); ++o) {
      std::vector<Value> lanes;
      for (int64_t lane = 0; lane < width; ++lane) {
        ElementIndex index;
        index.linear = lane_index[lane];
        index.identity = true;
        index.lane = static_cast<int>(lane);
        StatusOr<Value> v = emitter.Emit(*g.outputs[o], index);
        if (!v.ok()) return v.status().WithPrefix("%" + fusion.name());
        lanes.push_back(*v);
      }
      ir::DType dtype = g.outputs[o]->shape().dtype();
      Value ptr = entry->getArgument(g.slots[o]);
      if (width == 1) {
        StoreElement(b, loc, lanes[0], ptr, base, dtype);
        continue;
      }
      mlir::Type storage = StorageType(b.getContext(), dtype);
      mlir::Type vec_type = mlir::VectorType::get({width}, storage);
      Value vec = b.create<mlir::LLVM::UndefOp>(loc, vec_type);
      for (int64_t lane = 0; lane < width; ++lane) {
        Value pos = b.create<mlir::arith::ConstantOp>(loc, b.getI32IntegerAttr(lane));
        vec = b.create<mlir::LLVM::InsertElementOp>(loc, vec,
                                                    ToStorage(b, loc, lanes[lane], dtype), pos);
      }
      Value addr = b.create<mlir::LLVM::GEPOp>(loc, ptr.getType(), storage, ptr,
                                               mlir::ValueRange{base}, true);
      b.create<mlir::LLVM::StoreOp>(loc, vec, addr, width * StorageBytes(dtype));
    }
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<KernelEmitter> MakeLoopEmitter() { return std::make_unique<LoopEmitter>(); }

}  // namespace gptc::codegen
