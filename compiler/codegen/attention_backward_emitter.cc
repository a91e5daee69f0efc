// The attention backward emitter: a kind=attention fusion holding
// attention-grad ops (Note [flash attention ops] in passes/autodiff_attention.h).
//
// Note [flash attention backward]: FlashAttention-2's schedule with dq in a
// pass of its own (no atomics, so the result is deterministic): a fusion of
// the wrt=k and wrt=v ops runs one warp per key row j of (b, h): lane l
// holds k_j and v_j at d = l, l + 32, ... (< D) and accumulates dk_j, dv_j in
// f32 over the query rows t (t >= j when causal):
//   s = scale * warp-sum(q_t . k_j),  p = exp(s - lse_t)
//   dv_j += p~ do_t,   dp = warp-sum(do_t . v_j),   ds = scale * p (dp - delta_t)
//   dk_j += ds~ q_t
// (x~: x rounded to the operands' dtype, as the decomposition feeds p and ds
// to its matmuls). The wrt=q fusion runs one warp per query row t over the
// keys j <= t: dq_t += ds~ k_j. Nothing of size [T, S] is stored: p and ds
// live one score at a time. Operand chains (converts, layouts) are evaluated
// per element through the FusedEmitter; outputs leave through their layout
// chains (attention_util.h), so dq, dk, dv land in the packed [B, T, 3C]
// gradient when the fusion pass joined its transposes.
//
// This is the CUDA-core form, for f32 operands and head dims the tensor-core
// kernels do not take (Note [tensor-core attention backward] in
// attention_backward_mma.cc): each warp reads every q/do (or k/v) row of its
// head once per row through L1/L2.
#include <vector>

#include "compiler/codegen/attention_mma.h"
#include "compiler/codegen/attention_plan.h"
#include "compiler/codegen/attention_util.h"
#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"
#include "compiler/codegen/kernel_emitter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace gptc::codegen {
namespace {

using mlir::Value;
namespace arith = mlir::arith;

constexpr int64_t kWarp = WarpRowKernel::kWarp;

// The CUDA-core form of Note [flash attention backward] in `kernel`: a
// warp's own row (a query row for dq, a key row for dk and dv) loads its two
// vectors, accumulates its gradients over the other side's rows, and stores
// them through the output chains.
class CudaCoreBackward {
 public:
  CudaCoreBackward(WarpRowKernel& kernel, const AttentionBackward& a)
      : kernel_(kernel),
        a_(a),
        b_(kernel.b()),
        loc_(kernel.loc()),
        by_query_(a.by_query()),
        per_lane_((a.dim + kWarp - 1) / kWarp) {
    for (int wrt = 0; wrt < 3; ++wrt) {
      if (a.grads[wrt] != nullptr) accs_.push_back(wrt);
    }
  }

  Status Emit() {
    row_ = kernel_.BeginRow(a_.dim);
    // The row's own vectors: q and do by query rows, k and v by key rows.
    ASSIGN_OR_RETURN(own_a_, LoadOwn(by_query_ ? a_.q : a_.k));
    ASSIGN_OR_RETURN(own_b_, LoadOwn(by_query_ ? a_.d_out : a_.v));
    ASSIGN_OR_RETURN(mlir::scf::ForOp loop, EmitOtherLoop());
    StoreGradients(loop);
    return Status::Ok();
  }

 private:
  Value C(int64_t v) { return kernel_.C(v); }
  Value F32(double v) { return kernel_.F32(v); }
  StatusOr<Value> Load(const ir::Instruction* op, std::vector<Value> multi) {
    return kernel_.LoadF32(*op, std::move(multi));
  }
  // x rounded to the matmul operands' dtype (and back to f32).
  Value Round(Value x) { return RoundThrough(b_, loc_, x, a_.q->shape().dtype()); }
  Value Add(Value x, Value y) { return b_.create<arith::AddFOp>(loc_, x, y).getResult(); }
  Value Mul(Value x, Value y) { return b_.create<arith::MulFOp>(loc_, x, y).getResult(); }
  Value Sub(Value x, Value y) { return b_.create<arith::SubFOp>(loc_, x, y).getResult(); }

  // This lane's elements of `op`'s own row (masked by 0).
  StatusOr<std::vector<Value>> LoadOwn(const ir::Instruction* op) {
    std::vector<Value> x(per_lane_);
    for (int64_t i = 0; i < per_lane_; ++i) {
      ASSIGN_OR_RETURN(x[i], Load(op, {row_.b, row_.h, row_.r, row_.d[i]}));
      if (row_.in_dim[i]) x[i] = b_.create<arith::SelectOp>(loc_, row_.in_dim[i], x[i], F32(0));
    }
    return x;
  }

  // The warp-sum of mine . op[other].
  StatusOr<Value> Dot(const std::vector<Value>& mine, const ir::Instruction* op, Value other) {
    Value partial;
    for (int64_t i = 0; i < per_lane_; ++i) {
      ASSIGN_OR_RETURN(Value x, Load(op, {row_.b, row_.h, other, row_.d[i]}));
      partial = partial ? Add(partial, Mul(mine[i], x)) : Mul(mine[i], x);
    }
    return WarpSum(b_, loc_, partial);
  }

  // The loop over the other side's rows (causal: keys up to the query, or
  // queries from the key on), carrying dq, or dk then dv.
  StatusOr<mlir::scf::ForOp> EmitOtherLoop() {
    std::vector<Value> inits(accs_.size() * per_lane_, F32(0));
    Value lo = C(0), hi = C(by_query_ ? a_.tk : a_.tq);
    if (a_.causal && by_query_) {
      hi = b_.create<arith::MinUIOp>(loc_, b_.create<arith::AddIOp>(loc_, row_.r, C(1)), C(a_.tk));
    } else if (a_.causal) {
      lo = row_.r;
    }
    mlir::OpBuilder::InsertPoint after_loop = b_.saveInsertionPoint();
    auto loop = mlir::cast<mlir::scf::ForOp>(CreateFor(b_, loc_, lo, hi, C(1), inits));
    FusedEmitter& emitter = kernel_.emitter();
    FusedEmitter::Cache outer = emitter.SaveCache();
    RETURN_IF_ERROR(EmitOtherStep(loop));
    emitter.RestoreCache(std::move(outer));
    b_.restoreInsertionPoint(after_loop);
    b_.setInsertionPointAfter(loop);
    return loop;
  }

  // One other row o (key j, or query t): p and ds of the score (q_t, k_j),
  // then dq += ds~ k_j;  dk += ds~ q_t;  dv += p~ do_t.
  Status EmitOtherStep(mlir::scf::ForOp loop) {
    const Value bi = row_.b, h = row_.h;
    Value o = loop.getInductionVar();
    auto args = loop.getRegionIterArgs();
    Value t = by_query_ ? row_.r : o;
    ASSIGN_OR_RETURN(Value lse, Load(a_.lse, {bi, h, t}));
    ASSIGN_OR_RETURN(Value delta, Load(a_.delta, {bi, h, t}));
    // s = q_t . k_j: own_a is q (by query) or k (by key).
    ASSIGN_OR_RETURN(Value qk, Dot(own_a_, by_query_ ? a_.k : a_.q, o));
    Value p = b_.create<mlir::math::ExpOp>(loc_, Sub(Mul(qk, F32(a_.scale)), lse));
    std::vector<Value> next;
    Value ds;
    if (a_.grads[0] != nullptr || a_.grads[1] != nullptr) {
      // dp = do_t . v_j: own_b is do (by query) or v (by key).
      ASSIGN_OR_RETURN(Value dp, Dot(own_b_, by_query_ ? a_.v : a_.d_out, o));
      ds = Round(Mul(Mul(p, Sub(dp, delta)), F32(a_.scale)));
    }
    for (size_t acc = 0; acc < accs_.size(); ++acc) {
      const ir::Instruction* with = accs_[acc] == 0 ? a_.k : accs_[acc] == 1 ? a_.q : a_.d_out;
      Value coeff = accs_[acc] == 2 ? Round(p) : ds;
      for (int64_t i = 0; i < per_lane_; ++i) {
        ASSIGN_OR_RETURN(Value x, Load(with, {bi, h, o, row_.d[i]}));
        next.push_back(Add(args[acc * per_lane_ + i], Mul(coeff, x)));
      }
    }
    b_.create<mlir::scf::YieldOp>(loc_, next);
    return Status::Ok();
  }

  // Each gradient to its outputs through their chains.
  void StoreGradients(mlir::scf::ForOp loop) {
    for (size_t acc = 0; acc < accs_.size(); ++acc) {
      const ir::Instruction* root = a_.grads[accs_[acc]];
      for (int64_t i = 0; i < per_lane_; ++i) {
        mlir::OpBuilder::InsertPoint after_store = b_.saveInsertionPoint();
        if (row_.in_dim[i]) {
          auto if_in = b_.create<mlir::scf::IfOp>(loc_, row_.in_dim[i], false);
          b_.setInsertionPoint(if_in.thenBlock()->getTerminator());
        }
        for (size_t out = 0; out < a_.outputs.size(); ++out) {
          for (const OutputChain* store : StoresOf(a_.chains[out])) {
            if (store->root < 0 || a_.roots[store->root] != root) continue;
            StoreThroughChain(kernel_.emitter(), b_, loc_, loop.getResult(acc * per_lane_ + i),
                              *root, *store, {row_.b, row_.h, row_.r, row_.d[i]},
                              kernel_.entry()->getArgument(a_.first_output + out),
                              a_.outputs[out]->shape().dtype());
          }
        }
        b_.restoreInsertionPoint(after_store);
      }
    }
  }

  WarpRowKernel& kernel_;
  const AttentionBackward& a_;
  mlir::OpBuilder& b_;
  const mlir::Location loc_;
  const bool by_query_;
  const int64_t per_lane_;
  std::vector<int> accs_;  // the gradients' wrt: dq, or dk then dv
  WarpRowKernel::Row row_;
  std::vector<Value> own_a_, own_b_;
};

class AttentionBackwardEmitter : public KernelEmitter {
 public:
  AttentionBackwardEmitter(bool keys, AttentionMma mma) : keys_(keys), mma_(mma) {}
  std::string_view Name() const override { return "attention-backward"; }

  StatusOr<KernelSpec> Emit(const ir::Instruction& fusion, const std::string& name,
                            mlir::gpu::GPUModuleOp gpu_module) const override {
    // Note [packed attention gradient]: a fusion of dq and dk, dv is two
    // kernels, dk + dv (keys_) then dq.
    const BackwardPart part = keys_                          ? BackwardPart::kKeys
                              : HasBothBackwardParts(fusion) ? BackwardPart::kQueries
                                                             : BackwardPart::kAll;
    ASSIGN_OR_RETURN(AttentionBackward backward, PlanAttentionBackward(fusion, part));
    backward.wgmma = backward.tensor_cores && mma_ == AttentionMma::kWgmma;
    ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
    const int64_t own_len = backward.by_query() ? backward.tq : backward.tk;
    const int64_t num_params =
        backward.first_output + static_cast<int64_t>(backward.outputs.size());
    WarpRowKernel kernel(
        *fused, num_params, backward.batch, backward.heads,
        backward.tensor_cores ? 4 * ((own_len + kTileRows - 1) / kTileRows) : own_len, name,
        gpu_module, "attention backward");
    int64_t shared_bytes = 0;
    if (backward.tensor_cores) {
      ASSIGN_OR_RETURN(shared_bytes, EmitTensorCoreBackward(kernel, gpu_module, name, backward));
    } else {
      RETURN_IF_ERROR(CudaCoreBackward(kernel, backward).Emit());
    }
    KernelSpec spec = MakeKernelSpec(fusion, name, ir::FusionKind::kAttention, kernel.grid(),
                                     WarpRowKernel::kBlock);
    spec.static_shared_bytes = shared_bytes;
    return spec;
  }

 private:
  bool keys_;
  AttentionMma mma_;
};

}  // namespace

std::unique_ptr<KernelEmitter> MakeAttentionBackwardEmitter(bool keys, AttentionMma mma) {
  return std::make_unique<AttentionBackwardEmitter>(keys, mma);
}

}  // namespace gptc::codegen
