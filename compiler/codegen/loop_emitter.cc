// The elementwise loop emitter (kind=loop and kind=optimizer): a grid-stride
// loop over the output elements of each output shape (Note [loop groups],
// loop_plan.h, which also says how members of one shape share code); each
// thread handles `width` consecutive elements per iteration so that
// same-shaped operands and the results move with 16-byte vector loads and
// stores (Note [loop vectorisation]).
#include <algorithm>
#include <map>

#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"
#include "compiler/codegen/kernel_emitter.h"
#include "compiler/codegen/loop_plan.h"
#include "compiler/codegen/member_classes.h"
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
class LoopEmitter : public KernelEmitter {
 public:
  std::string_view Name() const override { return "loop"; }

  StatusOr<KernelSpec> Emit(const ir::Instruction& fusion, const std::string& name,
                            mlir::gpu::GPUModuleOp gpu_module) const override {
    ASSIGN_OR_RETURN(LoopPlan plan, PlanLoop(fusion));
    ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
    const int64_t num_params =
        static_cast<int64_t>(fused->parameters().size() + FusionOutputs(*fused).size());

    mlir::OpBuilder b(gpu_module.getContext());
    mlir::gpu::GPUFuncOp func = CreateKernel(b, gpu_module, name, num_params, plan.block, 0);
    mlir::Block* entry = &func.getBody().front();
    mlir::Location loc = b.getUnknownLoc();
    mlir::IntegerType index_type = plan.wide ? b.getI64Type() : b.getI32Type();

    auto to_index = [&](Value v) {
      return b.create<mlir::arith::IndexCastOp>(loc, index_type, v).getResult();
    };
    Value tid = to_index(b.create<mlir::gpu::ThreadIdOp>(loc, mlir::gpu::Dimension::x));
    Value bid = to_index(b.create<mlir::gpu::BlockIdOp>(loc, mlir::gpu::Dimension::x));

    // The class being emitted: its group, and the buffers of the block's
    // member (Note [member classes]) by the first member's parameters.
    const LoopGroup* group = nullptr;
    std::map<const ir::Instruction*, Value> buffers;
    std::map<const ir::Instruction*, Value> vectors;  // per iteration: vector loads
    Value base;                                       // per iteration: first element
    auto read_parameter = [&](const ir::Instruction& p,
                              const ElementIndex& index) -> StatusOr<Value> {
      Value ptr = buffers.at(&p);
      ir::DType dtype = p.shape().dtype();
      const int64_t width = group->width;
      if (width > 1 && index.identity && p.shape().num_elements() == group->n) {
        return VectorLane(b, loc, ptr, base, dtype, width, index.lane, vectors[&p]);
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

    for (const LoopGroup& g : plan.groups) {
      group = &g;
      for (const LoopClass& c : g.classes) {
        vectors.clear();
        mlir::OpBuilder::InsertPoint after_class = b.saveInsertionPoint();
        FusedEmitter::Cache saved = emitter.SaveCache();
        Value class_bid = bid;
        if (plan.dispatch()) {
          // if (first_block <= bid < first_block + blocks) { ... }
          Value local =
              b.create<mlir::arith::SubIOp>(loc, bid, emitter.IndexConstant(c.first_block));
          Value in = b.create<mlir::arith::CmpIOp>(loc, mlir::arith::CmpIPredicate::ult, local,
                                                   emitter.IndexConstant(c.blocks()));
          auto if_in = b.create<mlir::scf::IfOp>(loc, in, /*withElseRegion=*/false);
          b.setInsertionPoint(if_in.thenBlock()->getTerminator());
          class_bid = local;
        }
        std::vector<Value> outputs;
        Value member_bid = SelectClassMember(b, emitter, entry, c, class_bid, buffers, outputs);
        Status status =
            EmitMember(b, emitter, fusion, g, c, plan.block, member_bid, tid, outputs, base);
        emitter.RestoreCache(std::move(saved));
        b.restoreInsertionPoint(after_class);
        if (!status.ok()) return status;
      }
    }

    return LoopKernelSpec(fusion, name, plan);
  }

 private:
  // The kernel's spec: each buffer aligned to the widest vector any group
  // moves it with.
  static KernelSpec LoopKernelSpec(const ir::Instruction& fusion, const std::string& name,
                                   const LoopPlan& plan) {
    KernelSpec spec;
    spec.name = name;
    spec.fusion = fusion.name();
    spec.kind = fusion.attrs().fusion_kind;
    spec.grid = {plan.grid, 1, 1};
    spec.block = {plan.block, 1, 1};
    spec.params = KernelParams(fusion, 1);
    for (KernelParam& p : spec.params) {
      int64_t width = 1;
      for (const LoopGroup& g : plan.groups) {
        if (p.shape.num_elements() == g.n) width = std::max(width, g.width);
      }
      p.min_alignment = width * StorageBytes(p.shape.dtype());
    }
    return spec;
  }

  // Note [member classes]: fills `buffers` (the first member's parameters ->
  // the block's member's buffers) and `outputs` (its output buffers), and
  // returns the block's index among its member's blocks.
  static Value SelectClassMember(mlir::OpBuilder& b, FusedEmitter& emitter, mlir::Block* entry,
                                 const LoopClass& c, Value class_bid,
                                 std::map<const ir::Instruction*, Value>& buffers,
                                 std::vector<Value>& outputs) {
    std::vector<std::vector<int64_t>> args;
    for (const LoopMember& m : c.members) {
      args.emplace_back();
      for (const ir::Instruction* p : m.params) args.back().push_back(p->attrs().index);
      args.back().insert(args.back().end(), m.output_slots.begin(), m.output_slots.end());
    }
    std::vector<Value> selected;
    Value member_bid =
        SelectMember(b, emitter, entry, args, c.blocks_per_member, class_bid, selected);
    const LoopMember& first = c.members[0];
    buffers.clear();
    for (size_t k = 0; k < first.params.size(); ++k) buffers[first.params[k]] = selected[k];
    outputs.assign(selected.begin() + static_cast<int64_t>(first.params.size()), selected.end());
    return member_bid;
  }

  // One member's grid-stride loop over its blocks: `base` is set to each
  // iteration's first element (the parameter reader uses it).
  static Status EmitMember(mlir::OpBuilder& b, FusedEmitter& emitter, const ir::Instruction& fusion,
                           const LoopGroup& g, const LoopClass& c, int64_t block, Value member_bid,
                           Value tid, const std::vector<Value>& outputs, Value& base) {
    mlir::Location loc = b.getUnknownLoc();
    const int64_t width = g.width;
    // for (i = bid * block + tid; i < iterations; i += blocks * block)
    Value start = b.create<mlir::arith::AddIOp>(
        loc, b.create<mlir::arith::MulIOp>(loc, member_bid, emitter.IndexConstant(block)), tid);
    CreateFor(b, loc, start, emitter.IndexConstant(g.iterations),
              emitter.IndexConstant(c.blocks_per_member * block), mlir::ValueRange{});
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
    const LoopMember& member = c.members[0];
    for (size_t o = 0; o < member.outputs.size(); ++o) {
      std::vector<Value> lanes;
      for (int64_t lane = 0; lane < width; ++lane) {
        ElementIndex index;
        index.linear = lane_index[lane];
        index.identity = true;
        index.lane = static_cast<int>(lane);
        StatusOr<Value> v = emitter.Emit(*member.outputs[o], index);
        if (!v.ok()) return v.status().WithPrefix("%" + fusion.name());
        lanes.push_back(*v);
      }
      StoreElements(b, loc, lanes, outputs[o], base, member.outputs[o]->shape().dtype());
    }
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<KernelEmitter> MakeLoopEmitter() { return std::make_unique<LoopEmitter>(); }

}  // namespace gptc::codegen
