// The attention forward emitter (kind=attention holding one `attention` op).
//
// Note [attention forward]: one warp per query row (b, h, t) of
// attention(q, k, v) with q, k, v: [B, H, T, D]; lane l holds the elements
// d = l, l + 32, ... (< D) of its q row (pre-scaled) and of its output
// accumulator o, in f32. For each key j <= t (causal; every j otherwise):
//   s = warp-sum(q . k_j)                      (butterfly shuffles)
//   m' = max(m, s); c = exp(m - m'); p = exp(s - m')
//   l = l * c + p; o = o * c + p * v_j; m = m'  (online softmax)
// and finally o / l, and lse = m + log(l) for a fused attention-lse of the
// same q, k (Note [flash attention ops]; a fusion holding only the
// attention-lse runs the same loop without v). Warps work independently: no
// shared memory, no barrier.
// This is the CUDA-core form, for f32 attention and head dims the tensor-core
// kernel does not take (Note [tensor-core attention forward] in
// attention_mma.cc, which runs bf16 attention: Note [bf16 attention]); it
// reads each k, v row once per query row (through L1/L2). Under bf16 it
// rounds q, k, v and p as the tensor-core kernel does.
//
// Accepted fusions: any operand chains of the attention op that the
// FusedEmitter evaluates per element (slices, reshapes, transposes, converts,
// the qkv bias add of the fusion pass): each q/k/v element is computed from
// its [b, h, t, d] index through them. Outputs are either (a) the attention
// result through a chain of transpose / reshape / convert / copy (each
// element is written where the chain maps its index, e.g. [B, H, T, D] ->
// [B, T, H, D] -> [B, T, C]), or (b) outputs that do not depend on the
// attention op (the transposed q, k, v kept for the backward), written by a
// grid-stride loop over their elements after the rows. Anything else (an
// output computed from the result by arithmetic, a second attention op) is
// an error naming the instruction.
//
// Both forms run on the emulated device against the evaluator in
// tests/compiler/codegen/attention_mma_test.cc.
#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include "compiler/codegen/attention_mma.h"
#include "compiler/codegen/attention_plan.h"
#include "compiler/codegen/attention_util.h"
#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"
#include "compiler/codegen/kernel_emitter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace gptc::codegen {
namespace {

using mlir::Value;
namespace arith = mlir::arith;

constexpr int64_t kWarp = WarpRowKernel::kWarp;

// The CUDA-core form of Note [attention forward] in `kernel`: a warp's query
// row loads its q, runs the online softmax over the keys, and stores o / l
// and the lse through the output chains.
class CudaCoreForward {
 public:
  CudaCoreForward(WarpRowKernel& kernel, const AttentionForward& a)
      : kernel_(kernel),
        a_(a),
        b_(kernel.b()),
        loc_(kernel.loc()),
        per_lane_((a.dim + kWarp - 1) / kWarp) {}

  // Emits the rows; returns bid * block + tid, for the grid-stride loops
  // after them.
  StatusOr<Value> Emit() {
    FusedEmitter& emitter = kernel_.emitter();
    mlir::OpBuilder::InsertPoint after_rows;
    FusedEmitter::Cache saved = emitter.SaveCache();
    row_ = kernel_.BeginRow(a_.dim, &after_rows);
    ASSIGN_OR_RETURN(std::vector<Value> q, LoadScaledQ());
    ASSIGN_OR_RETURN(mlir::scf::ForOp loop, EmitKeyLoop(q));
    StoreResults(loop);
    emitter.RestoreCache(std::move(saved));
    b_.restoreInsertionPoint(after_rows);
    return row_.thread;
  }

 private:
  Value C(int64_t v) { return kernel_.C(v); }
  Value F32(double v) { return kernel_.F32(v); }
  // Rounds an f32 value to the matmul operand dtype, as the decomposition does.
  Value Round(Value x) { return RoundThrough(b_, loc_, x, a_.matmul.value_or(ir::DType::kF32)); }

  // This lane's q elements, pre-scaled (masked by q = 0).
  StatusOr<std::vector<Value>> LoadScaledQ() {
    std::vector<Value> q(per_lane_);
    for (int64_t i = 0; i < per_lane_; ++i) {
      ASSIGN_OR_RETURN(Value x, kernel_.LoadF32(*a_.q, {row_.b, row_.h, row_.r, row_.d[i]}));
      x = b_.create<arith::MulFOp>(loc_, Round(x), F32(a_.scale));
      if (row_.in_dim[i]) x = b_.create<arith::SelectOp>(loc_, row_.in_dim[i], x, F32(0));
      q[i] = x;
    }
    return q;
  }

  // for (j = 0; j < (causal ? t + 1 : tk); ++j): online softmax, carrying m,
  // l and the lane's o elements.
  StatusOr<mlir::scf::ForOp> EmitKeyLoop(const std::vector<Value>& q) {
    std::vector<Value> inits = {F32(-std::numeric_limits<double>::infinity()), F32(0)};
    for (int64_t i = 0; i < per_lane_; ++i) inits.push_back(F32(0));
    Value end = a_.causal ? b_.create<arith::MinUIOp>(
                                  loc_, b_.create<arith::AddIOp>(loc_, row_.r, C(1)), C(a_.tk))
                                .getResult()
                          : C(a_.tk);
    mlir::OpBuilder::InsertPoint after_loop = b_.saveInsertionPoint();
    auto loop = mlir::cast<mlir::scf::ForOp>(CreateFor(b_, loc_, C(0), end, C(1), inits));
    FusedEmitter& emitter = kernel_.emitter();
    FusedEmitter::Cache outer = emitter.SaveCache();
    RETURN_IF_ERROR(EmitKeyStep(loop, q));
    emitter.RestoreCache(std::move(outer));
    b_.restoreInsertionPoint(after_loop);
    b_.setInsertionPointAfter(loop);
    return loop;
  }

  // One key j: s = warp-sum(q . k_j), then the online softmax's update of
  // m, l and o (Note [attention forward]).
  Status EmitKeyStep(mlir::scf::ForOp loop, const std::vector<Value>& q) {
    const Value bi = row_.b, h = row_.h;
    Value j = loop.getInductionVar();
    auto args = loop.getRegionIterArgs();
    Value partial;
    for (int64_t i = 0; i < per_lane_; ++i) {
      ASSIGN_OR_RETURN(Value k, kernel_.LoadF32(*a_.k, {bi, h, j, row_.d[i]}));
      Value qk = b_.create<arith::MulFOp>(loc_, q[i], Round(k));
      partial = partial ? b_.create<arith::AddFOp>(loc_, partial, qk).getResult() : qk;
    }
    Value s = WarpSum(b_, loc_, partial);
    Value m = args[0], l = args[1];
    Value m_new = b_.create<arith::MaximumFOp>(loc_, m, s);
    Value corr = b_.create<mlir::math::ExpOp>(loc_, b_.create<arith::SubFOp>(loc_, m, m_new));
    Value p = b_.create<mlir::math::ExpOp>(loc_, b_.create<arith::SubFOp>(loc_, s, m_new));
    std::vector<Value> next = {
        m_new, b_.create<arith::AddFOp>(loc_, b_.create<arith::MulFOp>(loc_, l, corr), p)};
    for (int64_t i = 0; i < per_lane_ && a_.attn == nullptr; ++i) next.push_back(args[2 + i]);
    for (int64_t i = 0; i < per_lane_ && a_.attn != nullptr; ++i) {
      ASSIGN_OR_RETURN(Value v, kernel_.LoadF32(*a_.v, {bi, h, j, row_.d[i]}));
      Value o = b_.create<arith::MulFOp>(loc_, args[2 + i], corr);
      next.push_back(
          b_.create<arith::AddFOp>(loc_, o, b_.create<arith::MulFOp>(loc_, Round(p), Round(v))));
    }
    b_.create<mlir::scf::YieldOp>(loc_, next);
    return Status::Ok();
  }

  // o[b, h, t, d] = o / l to each output of the result through its chain;
  // lse[b, h, t] = m + log(l), by lane 0.
  void StoreResults(mlir::scf::ForOp loop) {
    FusedEmitter& emitter = kernel_.emitter();
    mlir::Block* entry = kernel_.entry();
    const Value bi = row_.b, h = row_.h, t = row_.r;
    Value inv = b_.create<arith::DivFOp>(loc_, F32(1), loop.getResult(1));
    for (int64_t i = 0; i < per_lane_; ++i) {
      mlir::OpBuilder::InsertPoint after_store = b_.saveInsertionPoint();
      if (row_.in_dim[i]) {
        auto if_in = b_.create<mlir::scf::IfOp>(loc_, row_.in_dim[i], false);
        b_.setInsertionPoint(if_in.thenBlock()->getTerminator());
      }
      Value o = b_.create<arith::MulFOp>(loc_, loop.getResult(2 + i), inv);
      for (size_t out = 0; out < a_.outputs.size(); ++out) {
        if (a_.chains[out].root < 0 || a_.roots[a_.chains[out].root] != a_.attn) continue;
        StoreThroughChain(emitter, b_, loc_, o, *a_.attn, a_.chains[out], {bi, h, t, row_.d[i]},
                          entry->getArgument(a_.first_output + out),
                          a_.outputs[out]->shape().dtype());
      }
      b_.restoreInsertionPoint(after_store);
    }
    if (a_.lse == nullptr) return;
    mlir::OpBuilder::InsertPoint after_store = b_.saveInsertionPoint();
    Value first = b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::eq, row_.lane, C(0));
    auto if_first = b_.create<mlir::scf::IfOp>(loc_, first, false);
    b_.setInsertionPoint(if_first.thenBlock()->getTerminator());
    Value value = b_.create<arith::AddFOp>(loc_, loop.getResult(0),
                                           b_.create<mlir::math::LogOp>(loc_, loop.getResult(1)));
    for (size_t out = 0; out < a_.outputs.size(); ++out) {
      if (a_.chains[out].root < 0 || a_.roots[a_.chains[out].root] != a_.lse) continue;
      StoreThroughChain(emitter, b_, loc_, value, *a_.lse, a_.chains[out], {bi, h, t},
                        entry->getArgument(a_.first_output + out),
                        a_.outputs[out]->shape().dtype());
    }
    b_.restoreInsertionPoint(after_store);
  }

  WarpRowKernel& kernel_;
  const AttentionForward& a_;
  mlir::OpBuilder& b_;
  const mlir::Location loc_;
  const int64_t per_lane_;
  WarpRowKernel::Row row_;
};

// The (b) outputs, which depend on neither op: for (i = bid * block + tid; i
// < n; i += grid * block), in batches of up to 8 strides, every output of
// one size together, all loads of a batch before its stores. One element a
// trip waited out a load's latency per element: on an H100 the forward spent
// most of its time copying q, k and v to bf16 in this loop.
Status EmitIndependentOutputs(WarpRowKernel& kernel, const ir::Instruction& fusion,
                              const AttentionForward& a, Value start) {
  mlir::OpBuilder& b = kernel.b();
  const mlir::Location loc = kernel.loc();
  FusedEmitter& emitter = kernel.emitter();
  auto c = [&](int64_t v) { return kernel.C(v); };
  std::map<int64_t, std::vector<size_t>> by_size;
  for (size_t out = 0; out < a.outputs.size(); ++out) {
    if (a.chains[out].root < 0) by_size[a.outputs[out]->shape().num_elements()].push_back(out);
  }
  const int64_t stride = kernel.grid() * WarpRowKernel::kBlock;
  for (const auto& [n, outs] : by_size) {
    const int64_t batch = std::min<int64_t>(8, (n + stride - 1) / stride);
    mlir::OpBuilder::InsertPoint after_loop = b.saveInsertionPoint();
    FusedEmitter::Cache saved = emitter.SaveCache();
    auto loop = mlir::cast<mlir::scf::ForOp>(CreateFor(b, loc, start, c(n), c(stride * batch), {}));
    struct Staged {
      size_t out;
      int64_t u;
      Value at, in, value;
    };
    std::vector<Staged> staged;
    for (int64_t u = 0; u < batch; ++u) {
      const Value i = b.create<arith::AddIOp>(loc, loop.getInductionVar(), c(stride * u));
      const Value in = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, i, c(n));
      ElementIndex index;
      index.linear = b.create<arith::MinUIOp>(loc, i, c(n - 1));
      for (size_t out : outs) {
        StatusOr<Value> v = emitter.Emit(*a.outputs[out], index);
        if (!v.ok()) return v.status().WithPrefix("%" + fusion.name());
        staged.push_back({out, u, i, in, *v});
      }
    }
    for (const Staged& st : staged) {
      mlir::OpBuilder::InsertPoint here = b.saveInsertionPoint();
      if (st.u > 0) {  // the loop's bound covers the batch's first element
        auto guard = b.create<mlir::scf::IfOp>(loc, st.in, false);
        b.setInsertionPoint(guard.thenBlock()->getTerminator());
      }
      StoreElement(b, loc, st.value, kernel.entry()->getArgument(a.first_output + st.out), st.at,
                   a.outputs[st.out]->shape().dtype());
      b.restoreInsertionPoint(here);
    }
    emitter.RestoreCache(std::move(saved));
    b.restoreInsertionPoint(after_loop);
  }
  return Status::Ok();
}

class AttentionEmitter : public KernelEmitter {
 public:
  explicit AttentionEmitter(AttentionMma mma) : mma_(mma) {}
  std::string_view Name() const override { return "attention"; }

  StatusOr<KernelSpec> Emit(const ir::Instruction& fusion, const std::string& name,
                            mlir::gpu::GPUModuleOp gpu_module) const override {
    ASSIGN_OR_RETURN(AttentionForward forward, PlanAttentionForward(fusion));
    forward.wgmma = forward.tensor_cores && mma_ == AttentionMma::kWgmma;
    ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
    const int64_t query_blocks = (forward.tq + kTileRows - 1) / kTileRows;
    const int64_t num_params = forward.first_output + static_cast<int64_t>(forward.outputs.size());
    WarpRowKernel kernel(*fused, num_params, forward.batch, forward.heads,
                         forward.tensor_cores ? 4 * query_blocks : forward.tq, name, gpu_module,
                         "attention");
    Value start;  // bid * block + tid, for the grid-stride loops of the (b) outputs
    int64_t shared_bytes = 0;
    if (forward.tensor_cores) {
      ASSIGN_OR_RETURN(TensorCoreForward tc,
                       EmitTensorCoreForward(kernel, gpu_module, name, forward));
      start = tc.thread;
      shared_bytes = tc.shared_bytes;
    } else {
      ASSIGN_OR_RETURN(start, CudaCoreForward(kernel, forward).Emit());
    }
    RETURN_IF_ERROR(EmitIndependentOutputs(kernel, fusion, forward, start));
    KernelSpec spec = MakeKernelSpec(fusion, name, ir::FusionKind::kAttention, kernel.grid(),
                                     WarpRowKernel::kBlock);
    spec.static_shared_bytes = shared_bytes;
    return spec;
  }

 private:
  AttentionMma mma_;
};

}  // namespace

std::unique_ptr<KernelEmitter> MakeAttentionEmitter(AttentionMma mma) {
  return std::make_unique<AttentionEmitter>(mma);
}

}  // namespace gptc::codegen
