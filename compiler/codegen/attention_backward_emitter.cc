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
#include <array>

#include "compiler/codegen/attention_mma.h"
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
constexpr int64_t kMaxHeadDim = 8 * kWarp;  // 8 elements per lane

class AttentionBackwardEmitter : public KernelEmitter {
 public:
  std::string_view Name() const override { return "attention-backward"; }

  StatusOr<KernelSpec> Emit(const ir::Instruction& fusion, const std::string& name,
                            mlir::gpu::GPUModuleOp gpu_module) const override {
    ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
    std::vector<const ir::Instruction*> outputs = FusionOutputs(*fused);
    std::vector<ir::Instruction*> params = fused->parameters();

    std::array<const ir::Instruction*, 3> grads = {nullptr, nullptr, nullptr};
    const ir::Instruction* any = nullptr;
    for (const auto& inst : fused->instructions()) {
      if (inst->opcode() != ir::Opcode::kAttentionGrad) continue;
      const int64_t wrt = inst->attrs().index;
      if (grads[wrt] != nullptr || (any != nullptr && inst->operands() != any->operands())) {
        return Error(
            "%{}: {}: attention-grad ops of one fusion must differ in wrt and share "
            "their operands",
            fusion.name(), Describe(*inst));
      }
      grads[wrt] = any = inst.get();
    }
    if (any == nullptr) return Error("%{}: no attention-grad op", fusion.name());
    const bool by_query = grads[0] != nullptr;
    if (by_query && (grads[1] != nullptr || grads[2] != nullptr)) {
      return Error("%{}: dq runs by query rows, dk and dv by key rows: not in one fusion",
                   fusion.name());
    }
    const ir::Instruction *q_op = any->operand(0), *k_op = any->operand(1), *v_op = any->operand(2),
                          *do_op = any->operand(3), *lse_op = any->operand(4),
                          *delta_op = any->operand(5);
    const ir::Shape& qs = q_op->shape();
    const int64_t batch = qs.dim(0), heads = qs.dim(1), tq = qs.dim(2), dim = qs.dim(3);
    const int64_t tk = k_op->shape().dim(2);
    if (dim > kMaxHeadDim) {
      return Error("%{}: {}: head dim {} exceeds {}", fusion.name(), Describe(*any), dim,
                   kMaxHeadDim);
    }
    const bool causal = any->attrs().causal;
    const double scale = any->attrs().scale;
    const ir::DType operand_dtype = qs.dtype();
    const int64_t per_lane = (dim + kWarp - 1) / kWarp;

    std::vector<const ir::Instruction*> roots;
    for (const ir::Instruction* g : grads) {
      if (g != nullptr) roots.push_back(g);
    }
    ASSIGN_OR_RETURN(std::vector<OutputChain> chains, FindOutputChains(fusion, outputs, roots));
    for (size_t out = 0; out < outputs.size(); ++out) {
      if (chains[out].root < 0) {
        return Error("%{}: output {} does not come from an attention-grad op", fusion.name(),
                     Describe(*outputs[out]));
      }
    }

    AttentionBackward backward{.grads = grads,
                               .q = q_op,
                               .k = k_op,
                               .v = v_op,
                               .d_out = do_op,
                               .lse = lse_op,
                               .delta = delta_op,
                               .batch = batch,
                               .heads = heads,
                               .tq = tq,
                               .tk = tk,
                               .dim = dim,
                               .causal = causal,
                               .scale = scale,
                               .outputs = outputs,
                               .roots = roots,
                               .chains = chains,
                               .first_output = static_cast<int64_t>(params.size())};
    const bool mma = UseTensorCoreBackward(backward);
    const int64_t own_len = by_query ? tq : tk;

    const int64_t num_params = static_cast<int64_t>(params.size() + outputs.size());
    WarpRowKernel kernel(*fused, num_params, batch, heads,
                         mma ? 4 * ((own_len + kTileRows - 1) / kTileRows) : own_len, name,
                         gpu_module, "attention backward");
    if (mma) {
      ASSIGN_OR_RETURN(int64_t shared_bytes,
                       EmitTensorCoreBackward(kernel, gpu_module, name, backward));
      KernelSpec spec = MakeKernelSpec(fusion, name, ir::FusionKind::kAttention, kernel.grid(),
                                       WarpRowKernel::kBlock);
      spec.static_shared_bytes = shared_bytes;
      return spec;
    }
    mlir::OpBuilder& b = kernel.b();
    const mlir::Location loc = kernel.loc();
    mlir::Block* entry = kernel.entry();
    FusedEmitter& emitter = kernel.emitter();
    auto c = [&](int64_t v) { return kernel.C(v); };
    auto f32 = [&](double v) { return kernel.F32(v); };
    auto load = [&](const ir::Instruction* op, std::vector<Value> multi) {
      return kernel.LoadF32(*op, std::move(multi));
    };
    // x rounded to the matmul operands' dtype (and back to f32).
    auto round = [&](Value x) { return RoundThrough(b, loc, x, operand_dtype); };
    auto add = [&](Value x, Value y) { return b.create<arith::AddFOp>(loc, x, y).getResult(); };
    auto mul = [&](Value x, Value y) { return b.create<arith::MulFOp>(loc, x, y).getResult(); };
    auto sub = [&](Value x, Value y) { return b.create<arith::SubFOp>(loc, x, y).getResult(); };

    const WarpRowKernel::Row row = kernel.BeginRow(dim);
    const Value bi = row.b, h = row.h, r = row.r;
    const std::vector<Value>&d = row.d, &in_dim = row.in_dim;
    // The row's own vectors: q and do by query rows, k and v by key rows.
    auto own = [&](const ir::Instruction* op) -> StatusOr<std::vector<Value>> {
      std::vector<Value> x(per_lane);
      for (int64_t i = 0; i < per_lane; ++i) {
        ASSIGN_OR_RETURN(x[i], load(op, {bi, h, r, d[i]}));
        if (in_dim[i]) x[i] = b.create<arith::SelectOp>(loc, in_dim[i], x[i], f32(0));
      }
      return x;
    };
    ASSIGN_OR_RETURN(std::vector<Value> own_a, own(by_query ? q_op : k_op));
    ASSIGN_OR_RETURN(std::vector<Value> own_b, own(by_query ? do_op : v_op));
    auto dot = [&](const std::vector<Value>& mine, const ir::Instruction* op,
                   Value other) -> StatusOr<Value> {  // warp-sum of mine . op[other]
      Value partial;
      for (int64_t i = 0; i < per_lane; ++i) {
        ASSIGN_OR_RETURN(Value x, load(op, {bi, h, other, d[i]}));
        partial = partial ? add(partial, mul(mine[i], x)) : mul(mine[i], x);
      }
      return WarpSum(b, loc, partial);
    };

    // Accumulators: dq, or dk then dv.
    std::vector<int> accs;
    for (int wrt = 0; wrt < 3; ++wrt) {
      if (grads[wrt] != nullptr) accs.push_back(wrt);
    }
    std::vector<Value> inits(accs.size() * per_lane, f32(0));
    Value lo = c(0), hi = c(by_query ? tk : tq);
    if (causal && by_query) {
      hi = b.create<arith::MinUIOp>(loc, b.create<arith::AddIOp>(loc, r, c(1)), c(tk));
    } else if (causal) {
      lo = r;
    }
    mlir::OpBuilder::InsertPoint after_loop = b.saveInsertionPoint();
    auto loop = mlir::cast<mlir::scf::ForOp>(CreateFor(b, loc, lo, hi, c(1), inits));
    {
      FusedEmitter::Cache outer = emitter.SaveCache();
      Value o = loop.getInductionVar();  // the other row: key j, or query t
      auto args = loop.getRegionIterArgs();
      Value t = by_query ? r : o;
      ASSIGN_OR_RETURN(Value lse, load(lse_op, {bi, h, t}));
      ASSIGN_OR_RETURN(Value delta, load(delta_op, {bi, h, t}));
      // s = q_t . k_j: own_a is q (by query) or k (by key).
      ASSIGN_OR_RETURN(Value qk, dot(own_a, by_query ? k_op : q_op, o));
      Value p = b.create<mlir::math::ExpOp>(loc, sub(mul(qk, f32(scale)), lse));
      std::vector<Value> next;
      Value ds;
      if (grads[0] != nullptr || grads[1] != nullptr) {
        // dp = do_t . v_j: own_b is do (by query) or v (by key).
        ASSIGN_OR_RETURN(Value dp, dot(own_b, by_query ? v_op : do_op, o));
        ds = round(mul(mul(p, sub(dp, delta)), f32(scale)));
      }
      for (size_t a = 0; a < accs.size(); ++a) {
        // dq += ds~ k_j;  dk += ds~ q_t;  dv += p~ do_t.
        const ir::Instruction* with = accs[a] == 0 ? k_op : accs[a] == 1 ? q_op : do_op;
        Value coeff = accs[a] == 2 ? round(p) : ds;
        for (int64_t i = 0; i < per_lane; ++i) {
          ASSIGN_OR_RETURN(Value x, load(with, {bi, h, o, d[i]}));
          next.push_back(add(args[a * per_lane + i], mul(coeff, x)));
        }
      }
      b.create<mlir::scf::YieldOp>(loc, next);
      emitter.RestoreCache(std::move(outer));
    }
    b.restoreInsertionPoint(after_loop);
    b.setInsertionPointAfter(loop);

    for (size_t a = 0; a < accs.size(); ++a) {
      const ir::Instruction* root = grads[accs[a]];
      for (int64_t i = 0; i < per_lane; ++i) {
        mlir::OpBuilder::InsertPoint after_store = b.saveInsertionPoint();
        if (in_dim[i]) {
          auto if_in = b.create<mlir::scf::IfOp>(loc, in_dim[i], false);
          b.setInsertionPoint(if_in.thenBlock()->getTerminator());
        }
        for (size_t out = 0; out < outputs.size(); ++out) {
          if (roots[chains[out].root] != root) continue;
          StoreThroughChain(emitter, b, loc, loop.getResult(a * per_lane + i), *root, chains[out],
                            {bi, h, r, d[i]}, entry->getArgument(params.size() + out),
                            outputs[out]->shape().dtype());
        }
        b.restoreInsertionPoint(after_store);
      }
    }
    return MakeKernelSpec(fusion, name, ir::FusionKind::kAttention, kernel.grid(),
                          WarpRowKernel::kBlock);
  }
};

}  // namespace

std::unique_ptr<KernelEmitter> MakeAttentionBackwardEmitter() {
  return std::make_unique<AttentionBackwardEmitter>();
}

}  // namespace gptc::codegen
