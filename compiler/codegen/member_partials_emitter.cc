// Note [member partials] (column_reduction_plan.h): the partials kernel of a
// split of full reductions, a block per member chunk, and the final
// kernel's totals of each member's partials.
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/member_classes.h"
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

Value Identity(mlir::OpBuilder& b, mlir::Location loc, ir::ReduceKind kind) {
  const double identity =
      kind == ir::ReduceKind::kSum ? 0.0 : -std::numeric_limits<double>::infinity();
  return ScalarConstant(b, loc, ir::DType::kF32, identity);
}

// x combined with its value in every other lane of the warp, by a butterfly
// of shuffles: every lane ends with the same total, in a fixed order.
Value WarpTotal(mlir::OpBuilder& b, mlir::Location loc, ir::ReduceKind kind, Value x) {
  for (int32_t offset = kWarp / 2; offset > 0; offset /= 2) {
    auto shuffle = b.create<mlir::gpu::ShuffleOp>(loc, x, offset, static_cast<int32_t>(kWarp),
                                                  mlir::gpu::ShuffleMode::XOR);
    x = CombineReduce(b, loc, kind, x, shuffle.getShuffleResult());
  }
  return x;
}

// Builds the partials kernel: for the block's class, its member's
// grid-stride loop into one accumulator a thread, then the block's total
// into scratch[bid].
class MemberPartialsBuilder : public FusedKernelBuilder {
 public:
  MemberPartialsBuilder(const ir::Instruction& fusion, const ir::Computation& fused,
                        const ColumnReductionPlan& plan, const std::string& name,
                        mlir::gpu::GPUModuleOp gpu_module)
      : FusedKernelBuilder(
            gpu_module, name, Arguments(fused) + 1, plan.block(), plan.shared_floats, plan.wide,
            "reduction",
            [this](const ir::Instruction& p, const ElementIndex& index) {
              return ReadParameter(p, index);
            },
            [](const ir::Instruction& r, const ElementIndex&) -> StatusOr<Value> {
              return Error("{}: a reduce read by another reduce's input", Describe(r));
            }),
        fusion_(fusion),
        plan_(plan),
        scratch_arg_(Arguments(fused)) {}

  Status Build() {
    auto to_index = [&](Value v) {
      return b_.create<arith::IndexCastOp>(loc_, index_type_, v).getResult();
    };
    tid_ = to_index(b_.create<mlir::gpu::ThreadIdOp>(loc_, mlir::gpu::Dimension::x));
    bid_ = to_index(b_.create<mlir::gpu::BlockIdOp>(loc_, mlir::gpu::Dimension::x));
    // One block total for all classes when they combine alike (the result
    // of the block's class carried out of the others); else one in each.
    std::set<ir::ReduceKind> kinds;
    for (const ReduceClass& c : plan_.classes) kinds.insert(Kind(c));
    const bool shared_total = kinds.size() == 1;
    Value acc = Identity(b_, loc_, *kinds.begin());
    for (const ReduceClass& c : plan_.classes) {
      ASSIGN_OR_RETURN(acc, EmitClass(c, acc, !shared_total));
    }
    if (shared_total) EmitBlockTotal(*kinds.begin(), acc);
    return Status::Ok();
  }

 private:
  // The kernel's parameters and outputs (the scratch argument is next).
  static int64_t Arguments(const ir::Computation& fused) {
    return static_cast<int64_t>(fused.parameters().size() + FusionOutputs(fused).size());
  }
  static ir::ReduceKind Kind(const ReduceClass& c) {
    return c.members[0].reduce->attrs().reduce_kind;
  }
  Value C(int64_t v) { return emitter_.IndexConstant(v); }

  // Parameter `p` of the class's first member: the block's member's buffer,
  // in vectors where read at the member's own elements.
  StatusOr<Value> ReadParameter(const ir::Instruction& p, const ElementIndex& index) {
    Value ptr = buffers_.at(&p);
    const ir::DType dtype = p.shape().dtype();
    if (width_ > 1 && index.identity && p.shape().num_elements() == elements_) {
      return VectorLane(b_, loc_, ptr, base_, dtype, width_, index.lane, vectors_[&p]);
    }
    return LoadElement(b_, loc_, ptr, emitter_.Linear(index, p.shape()), dtype);
  }

  // if (first_block <= bid < first_block + blocks) { the class's loop } in
  // a region yielding its accumulator, `other` for the other classes' blocks
  // (no region with one class); with `own_total`, the region stores the
  // block's total itself.
  StatusOr<Value> EmitClass(const ReduceClass& c, Value other, bool own_total) {
    Value local = b_.create<arith::SubIOp>(loc_, bid_, C(c.first_block));
    FusedEmitter::Cache saved = emitter_.SaveCache();
    mlir::scf::IfOp in_class;
    if (plan_.classes.size() > 1) {
      Value in = b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::ult, local, C(c.blocks()));
      in_class = b_.create<mlir::scf::IfOp>(loc_, mlir::TypeRange{b_.getF32Type()}, in,
                                            /*withElseRegion=*/true);
      b_.setInsertionPointToStart(in_class.elseBlock());
      b_.create<mlir::scf::YieldOp>(loc_, other);
      b_.setInsertionPointToStart(in_class.thenBlock());
    }
    StatusOr<Value> acc = EmitMemberLoop(c, local);
    emitter_.RestoreCache(std::move(saved));
    if (!acc.ok()) return acc.status().WithPrefix("%" + fusion_.name());
    if (own_total) EmitBlockTotal(Kind(c), *acc);
    if (!in_class) return *acc;
    b_.create<mlir::scf::YieldOp>(loc_, *acc);
    b_.setInsertionPointAfter(in_class);
    return in_class.getResult(0);
  }

  // The block's member's grid-stride loop over its blocks (Note [member
  // classes]): for (i = j * block + tid; i < iterations; i += B * block)
  // acc (+)= each lane of vector i of the reduce's input.
  StatusOr<Value> EmitMemberLoop(const ReduceClass& c, Value class_bid) {
    std::vector<std::vector<int64_t>> args;
    for (const ReduceMember& m : c.members) {
      args.emplace_back();
      for (const ir::Instruction* p : m.params) args.back().push_back(p->attrs().index);
    }
    std::vector<Value> selected;
    Value member_bid =
        SelectMember(b_, emitter_, entry_, args, c.blocks_per_member, class_bid, selected);
    const ReduceMember& first = c.members[0];
    buffers_.clear();
    for (size_t k = 0; k < first.params.size(); ++k) buffers_[first.params[k]] = selected[k];
    width_ = c.width;
    elements_ = c.elements;
    const int64_t block = plan_.block();
    const ir::ReduceKind kind = Kind(c);
    Value start = b_.create<arith::AddIOp>(
        loc_, b_.create<arith::MulIOp>(loc_, member_bid, C(block)), tid_);
    auto loop = mlir::cast<mlir::scf::ForOp>(
        CreateFor(b_, loc_, start, C(c.iterations()), C(c.blocks_per_member * block),
                  mlir::ValueRange{Identity(b_, loc_, kind)}));
    Value i = loop.getInductionVar();
    base_ = c.width == 1 ? i : b_.create<arith::MulIOp>(loc_, i, C(c.width)).getResult();
    vectors_.clear();
    const ir::Instruction& input = *first.reduce->operand(0);
    Value acc = loop.getRegionIterArgs()[0];
    for (int64_t lane = 0; lane < c.width; ++lane) {
      ElementIndex index;
      index.linear = lane == 0 ? base_ : b_.create<arith::AddIOp>(loc_, base_, C(lane)).getResult();
      index.identity = true;
      index.lane = static_cast<int>(lane);
      ASSIGN_OR_RETURN(Value x, emitter_.Emit(input, index));
      acc = CombineReduce(b_, loc_, kind,
                          acc, ConvertValue(b_, loc_, x, input.shape().dtype(), ir::DType::kF32));
    }
    b_.create<mlir::scf::YieldOp>(loc_, acc);
    b_.setInsertionPointAfter(loop);
    return loop.getResult(0);
  }

  // The block's total of the threads' `acc` (a butterfly in each warp, the
  // warps' totals in order by thread 0) to scratch[bid].
  void EmitBlockTotal(ir::ReduceKind kind, Value acc) {
    Value warp = b_.create<arith::DivUIOp>(loc_, tid_, C(kWarp));
    Value lane = b_.create<arith::RemUIOp>(loc_, tid_, C(kWarp));
    acc = WarpTotal(b_, loc_, kind, acc);
    Value shared = func_.getWorkgroupAttributions()[0];
    auto shared_at = [&](Value v) {
      return b_.create<arith::IndexCastOp>(loc_, b_.getIndexType(), v).getResult();
    };
    {
      Value first = b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::eq, lane, C(0));
      auto if_first = b_.create<mlir::scf::IfOp>(loc_, first, /*withElseRegion=*/false);
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPoint(if_first.thenBlock()->getTerminator());
      b_.create<mlir::memref::StoreOp>(loc_, acc, shared, mlir::ValueRange{shared_at(warp)});
    }
    b_.create<mlir::gpu::BarrierOp>(loc_);
    Value top = b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::eq, tid_, C(0));
    auto if_top = b_.create<mlir::scf::IfOp>(loc_, top, /*withElseRegion=*/false);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPoint(if_top.thenBlock()->getTerminator());
    Value total;
    for (int64_t w = 0; w < plan_.block() / kWarp; ++w) {
      Value x = b_.create<mlir::memref::LoadOp>(loc_, shared, shared_at(C(w)));
      total = w == 0 ? x : CombineReduce(b_, loc_, kind, total, x);
    }
    StoreElement(b_, loc_, total, entry_->getArgument(scratch_arg_), bid_, ir::DType::kF32);
  }

  const ir::Instruction& fusion_;
  const ColumnReductionPlan& plan_;
  const int64_t scratch_arg_;
  Value tid_, bid_;
  // The class being emitted: its first member's parameters -> the block's
  // member's buffers, and the vectors loaded in this iteration.
  std::map<const ir::Instruction*, Value> buffers_, vectors_;
  int64_t width_ = 1, elements_ = 0;
  Value base_;  // the iteration's first element
};

}  // namespace

StatusOr<KernelSpec> EmitMemberPartials(const ir::Instruction& fusion,
                                        const ColumnReductionPlan& plan, const std::string& name,
                                        mlir::gpu::GPUModuleOp gpu_module) {
  ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
  MemberPartialsBuilder builder(fusion, *fused, plan, name, gpu_module);
  RETURN_IF_ERROR(builder.Build());
  KernelSpec spec = MakeKernelSpec(fusion, name, ir::FusionKind::kReduction, plan.grid,
                                   plan.block(), plan.shared_floats);
  // Each buffer aligned to the widest vector a class reads it with.
  for (const ReduceClass& c : plan.classes) {
    for (const ReduceMember& m : c.members) {
      for (const ir::Instruction* p : m.params) {
        KernelParam& param = spec.params[p->attrs().index];
        if (p->shape().num_elements() == c.elements) {
          param.min_alignment =
              std::max(param.min_alignment, c.width * StorageBytes(p->shape().dtype()));
        }
      }
    }
  }
  spec.params.push_back(KernelParam{KernelParam::Role::kScratch, 0,
                                    ir::Shape(ir::DType::kF32, {plan.scratch_floats}), 4});
  return spec;
}

void EmitMemberTotals(mlir::OpBuilder& b, FusedEmitter& emitter, mlir::Block* entry,
                      const ColumnReductionPlan& plan, Value tid, Value shared,
                      int64_t scratch_arg) {
  mlir::Location loc = b.getUnknownLoc();
  auto c = [&](int64_t v) { return emitter.IndexConstant(v); };
  const int64_t warps = plan.block() / kWarp;
  Value warp = b.create<arith::DivUIOp>(loc, tid, c(kWarp));
  Value lane = b.create<arith::RemUIOp>(loc, tid, c(kWarp));
  for (const ReduceClass& rc : plan.classes) {
    const ir::ReduceKind kind = rc.members[0].reduce->attrs().reduce_kind;
    mlir::OpBuilder::InsertionGuard guard(b);
    // Member m is warp (first_member + m) % warps's.
    const int64_t shift = (warps - rc.first_member % warps) % warps;
    Value start = shift == 0 ? warp
                             : b.create<arith::RemUIOp>(
                                    loc, b.create<arith::AddIOp>(loc, warp, c(shift)), c(warps))
                                   .getResult();
    auto members = mlir::cast<mlir::scf::ForOp>(
        CreateFor(b, loc, start, c(static_cast<int64_t>(rc.members.size())), c(warps), {}));
    Value m = members.getInductionVar();
    Value first = b.create<arith::AddIOp>(
        loc, b.create<arith::MulIOp>(loc, m, c(rc.blocks_per_member)), c(rc.first_block));
    auto sum = mlir::cast<mlir::scf::ForOp>(CreateFor(b, loc, lane, c(rc.blocks_per_member),
                                                      c(kWarp),
                                                      mlir::ValueRange{Identity(b, loc, kind)}));
    Value x = LoadElement(b, loc, entry->getArgument(scratch_arg),
                          b.create<arith::AddIOp>(loc, first, sum.getInductionVar()),
                          ir::DType::kF32);
    b.create<mlir::scf::YieldOp>(loc, CombineReduce(b, loc, kind, sum.getRegionIterArgs()[0], x));
    b.setInsertionPointAfter(sum);
    Value total = WarpTotal(b, loc, kind, sum.getResult(0));
    Value is_first = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, lane, c(0));
    auto if_first = b.create<mlir::scf::IfOp>(loc, is_first, /*withElseRegion=*/false);
    b.setInsertionPoint(if_first.thenBlock()->getTerminator());
    Value slot = b.create<arith::AddIOp>(loc, m, c(rc.first_member));
    b.create<mlir::memref::StoreOp>(
        loc, total, shared,
        mlir::ValueRange{b.create<arith::IndexCastOp>(loc, b.getIndexType(), slot)});
  }
}

}  // namespace gptc::codegen
