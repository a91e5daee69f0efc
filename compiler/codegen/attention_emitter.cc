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
constexpr int64_t kMaxHeadDim = 8 * kWarp;  // 8 elements per lane

class AttentionEmitter : public KernelEmitter {
 public:
  std::string_view Name() const override { return "attention"; }

  StatusOr<KernelSpec> Emit(const ir::Instruction& fusion, const std::string& name,
                            mlir::gpu::GPUModuleOp gpu_module) const override {
    ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
    std::vector<const ir::Instruction*> outputs = FusionOutputs(*fused);
    std::vector<ir::Instruction*> params = fused->parameters();

    const ir::Instruction *attn = nullptr, *lse = nullptr;
    for (const auto& inst : fused->instructions()) {
      const ir::Instruction** slot = inst->opcode() == ir::Opcode::kAttention      ? &attn
                                     : inst->opcode() == ir::Opcode::kAttentionLse ? &lse
                                                                                   : nullptr;
      if (slot == nullptr) continue;
      if (*slot != nullptr) {
        return Error("%{}: {}: a second {} op in one fusion", fusion.name(), Describe(*inst),
                     ir::OpcodeName(inst->opcode()));
      }
      *slot = inst.get();
    }
    if (attn == nullptr && lse == nullptr) {
      return Error("%{}: attention fusion without an attention or attention-lse op", fusion.name());
    }
    const ir::Instruction* scores = attn != nullptr ? attn : lse;
    if (attn != nullptr && lse != nullptr &&
        (lse->operand(0) != attn->operand(0) || lse->operand(1) != attn->operand(1) ||
         lse->attrs().causal != attn->attrs().causal ||
         lse->attrs().scale != attn->attrs().scale)) {
      return Error("%{}: {} does not take the q, k and attributes of {}", fusion.name(),
                   Describe(*lse), Describe(*attn));
    }
    const ir::Shape& qs = scores->operand(0)->shape();
    const ir::Shape& ks = scores->operand(1)->shape();
    const ir::Shape& vs = attn != nullptr ? attn->operand(2)->shape() : ks;
    if (qs.rank() != 4 || ks.rank() != 4 || vs.rank() != 4 || ks.dims() != vs.dims() ||
        qs.dim(0) != ks.dim(0) || qs.dim(1) != ks.dim(1) || qs.dim(3) != ks.dim(3) ||
        (attn != nullptr && attn->shape().dims() != qs.dims())) {
      return Error("%{}: {}: expected q, k, v of [B, H, T, D] (got {}, {}, {})", fusion.name(),
                   Describe(*scores), qs.ToString(), ks.ToString(), vs.ToString());
    }
    const int64_t batch = qs.dim(0), heads = qs.dim(1), tq = qs.dim(2), dim = qs.dim(3);
    const int64_t tk = ks.dim(2);
    if (dim > kMaxHeadDim) {
      return Error("%{}: {}: head dim {} exceeds {}", fusion.name(), Describe(*scores), dim,
                   kMaxHeadDim);
    }
    const bool causal = scores->attrs().causal;
    const double scale = scores->attrs().scale;
    const int64_t per_lane = (dim + kWarp - 1) / kWarp;

    // Outputs: chains from the result or the lse, or independent of both.
    std::vector<const ir::Instruction*> roots;
    if (attn != nullptr) roots.push_back(attn);
    if (lse != nullptr) roots.push_back(lse);
    ASSIGN_OR_RETURN(std::vector<OutputChain> chains, FindOutputChains(fusion, outputs, roots));

    // Note [bf16 attention]: the ops' grad_dtype rounds their matmul operands.
    const std::optional<ir::DType> matmul = scores->attrs().grad_dtype;
    if (attn != nullptr && lse != nullptr && lse->attrs().grad_dtype != matmul) {
      return Error("%{}: {} and {} round their matmul operands differently", fusion.name(),
                   Describe(*lse), Describe(*attn));
    }
    AttentionForward forward{.attn = attn,
                             .lse = lse,
                             .q = scores->operand(0),
                             .k = scores->operand(1),
                             .v = attn != nullptr ? attn->operand(2) : nullptr,
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
    const bool mma = matmul && UseTensorCoreForward(forward, *matmul);
    const int64_t query_blocks = (tq + kTileRows - 1) / kTileRows;

    const int64_t num_params = static_cast<int64_t>(params.size() + outputs.size());
    WarpRowKernel kernel(*fused, num_params, batch, heads, mma ? 4 * query_blocks : tq, name,
                         gpu_module, "attention");
    mlir::OpBuilder& b = kernel.b();
    const mlir::Location loc = kernel.loc();
    mlir::Block* entry = kernel.entry();
    FusedEmitter& emitter = kernel.emitter();
    auto c = [&](int64_t v) { return kernel.C(v); };
    auto f32 = [&](double v) { return kernel.F32(v); };
    const int64_t grid = kernel.grid(), block = WarpRowKernel::kBlock;
    Value start;  // bid * block + tid, for the grid-stride loops of the (b) outputs
    int64_t shared_bytes = 0;
    // Rounds an f32 value to the matmul operand dtype, as the decomposition does.
    auto round = [&](Value x) { return RoundThrough(b, loc, x, matmul.value_or(ir::DType::kF32)); };

    if (mma) {
      ASSIGN_OR_RETURN(TensorCoreForward tc,
                       EmitTensorCoreForward(kernel, gpu_module, name, forward));
      start = tc.thread;
      shared_bytes = tc.shared_bytes;
    } else {
      mlir::OpBuilder::InsertPoint after_rows;
      FusedEmitter::Cache saved = emitter.SaveCache();
      const WarpRowKernel::Row row = kernel.BeginRow(dim, &after_rows);
      start = row.thread;
      const Value lane = row.lane, bi = row.b, h = row.h, t = row.r;
      const std::vector<Value>&d = row.d, &in_dim = row.in_dim;

      // This lane's q elements, pre-scaled (masked by q = 0).
      std::vector<Value> q(per_lane);
      for (int64_t i = 0; i < per_lane; ++i) {
        ASSIGN_OR_RETURN(Value x, kernel.LoadF32(*scores->operand(0), {bi, h, t, d[i]}));
        x = b.create<arith::MulFOp>(loc, round(x), f32(scale));
        if (in_dim[i]) x = b.create<arith::SelectOp>(loc, in_dim[i], x, f32(0));
        q[i] = x;
      }

      // for (j = 0; j < (causal ? t + 1 : tk); ++j): online softmax.
      std::vector<Value> inits = {f32(-std::numeric_limits<double>::infinity()), f32(0)};
      for (int64_t i = 0; i < per_lane; ++i) inits.push_back(f32(0));
      Value end = causal ? b.create<arith::MinUIOp>(
                               loc, b.create<arith::AddIOp>(loc, t, c(1)), c(tk))
                               .getResult()
                         : c(tk);
      mlir::OpBuilder::InsertPoint after_loop = b.saveInsertionPoint();
      auto loop = mlir::cast<mlir::scf::ForOp>(CreateFor(b, loc, c(0), end, c(1), inits));
      {
        FusedEmitter::Cache outer = emitter.SaveCache();
        Value j = loop.getInductionVar();
        auto args = loop.getRegionIterArgs();
        Value partial;
        for (int64_t i = 0; i < per_lane; ++i) {
          ASSIGN_OR_RETURN(Value k, kernel.LoadF32(*scores->operand(1), {bi, h, j, d[i]}));
          Value qk = b.create<arith::MulFOp>(loc, q[i], round(k));
          partial = partial ? b.create<arith::AddFOp>(loc, partial, qk).getResult() : qk;
        }
        Value s = WarpSum(b, loc, partial);
        Value m = args[0], l = args[1];
        Value m_new = b.create<arith::MaximumFOp>(loc, m, s);
        Value corr = b.create<mlir::math::ExpOp>(loc, b.create<arith::SubFOp>(loc, m, m_new));
        Value p = b.create<mlir::math::ExpOp>(loc, b.create<arith::SubFOp>(loc, s, m_new));
        std::vector<Value> next = {
            m_new, b.create<arith::AddFOp>(loc, b.create<arith::MulFOp>(loc, l, corr), p)};
        for (int64_t i = 0; i < per_lane && attn == nullptr; ++i) next.push_back(args[2 + i]);
        for (int64_t i = 0; i < per_lane && attn != nullptr; ++i) {
          ASSIGN_OR_RETURN(Value v, kernel.LoadF32(*attn->operand(2), {bi, h, j, d[i]}));
          Value o = b.create<arith::MulFOp>(loc, args[2 + i], corr);
          next.push_back(
              b.create<arith::AddFOp>(loc, o, b.create<arith::MulFOp>(loc, round(p), round(v))));
        }
        b.create<mlir::scf::YieldOp>(loc, next);
        emitter.RestoreCache(std::move(outer));
      }
      b.restoreInsertionPoint(after_loop);
      b.setInsertionPointAfter(loop);
      Value inv = b.create<arith::DivFOp>(loc, f32(1), loop.getResult(1));

      // o[b, h, t, d] -> each output of the result through its chain.
      for (int64_t i = 0; i < per_lane; ++i) {
        mlir::OpBuilder::InsertPoint after_store = b.saveInsertionPoint();
        if (in_dim[i]) {
          auto if_in = b.create<mlir::scf::IfOp>(loc, in_dim[i], false);
          b.setInsertionPoint(if_in.thenBlock()->getTerminator());
        }
        Value o = b.create<arith::MulFOp>(loc, loop.getResult(2 + i), inv);
        for (size_t out = 0; out < outputs.size(); ++out) {
          if (chains[out].root < 0 || roots[chains[out].root] != attn) continue;
          StoreThroughChain(emitter, b, loc, o, *attn, chains[out], {bi, h, t, d[i]},
                            entry->getArgument(params.size() + out), outputs[out]->shape().dtype());
        }
        b.restoreInsertionPoint(after_store);
      }
      // lse[b, h, t] = m + log(l), by lane 0.
      if (lse != nullptr) {
        mlir::OpBuilder::InsertPoint after_store = b.saveInsertionPoint();
        Value first = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, lane, c(0));
        auto if_first = b.create<mlir::scf::IfOp>(loc, first, false);
        b.setInsertionPoint(if_first.thenBlock()->getTerminator());
        Value value = b.create<arith::AddFOp>(loc, loop.getResult(0),
                                              b.create<mlir::math::LogOp>(loc, loop.getResult(1)));
        for (size_t out = 0; out < outputs.size(); ++out) {
          if (chains[out].root < 0 || roots[chains[out].root] != lse) continue;
          StoreThroughChain(emitter, b, loc, value, *lse, chains[out], {bi, h, t},
                            entry->getArgument(params.size() + out), outputs[out]->shape().dtype());
        }
        b.restoreInsertionPoint(after_store);
      }
      emitter.RestoreCache(std::move(saved));
      b.restoreInsertionPoint(after_rows);
    }

    // (b) outputs: for (i = bid * block + tid; i < n; i += grid * block), in
    // batches of up to 8 strides, every output of one size together, all
    // loads of a batch before its stores. One element a trip waited out a
    // load's latency per element: the first GPU run's forward spent most of
    // its 0.73 ms a layer copying q, k and v to bf16 in this loop.
    std::map<int64_t, std::vector<size_t>> by_size;
    for (size_t out = 0; out < outputs.size(); ++out) {
      if (chains[out].root < 0) by_size[outputs[out]->shape().num_elements()].push_back(out);
    }
    const int64_t stride = grid * block;
    for (const auto& [n, outs] : by_size) {
      const int64_t batch = std::min<int64_t>(8, (n + stride - 1) / stride);
      mlir::OpBuilder::InsertPoint after_loop = b.saveInsertionPoint();
      FusedEmitter::Cache saved = emitter.SaveCache();
      auto loop =
          mlir::cast<mlir::scf::ForOp>(CreateFor(b, loc, start, c(n), c(stride * batch), {}));
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
          StatusOr<Value> v = emitter.Emit(*outputs[out], index);
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
        StoreElement(b, loc, st.value, entry->getArgument(params.size() + st.out), st.at,
                     outputs[st.out]->shape().dtype());
        b.restoreInsertionPoint(here);
      }
      emitter.RestoreCache(std::move(saved));
      b.restoreInsertionPoint(after_loop);
    }

    KernelSpec spec = MakeKernelSpec(fusion, name, ir::FusionKind::kAttention, grid, block);
    spec.static_shared_bytes = shared_bytes;
    return spec;
  }
};

}  // namespace

std::unique_ptr<KernelEmitter> MakeAttentionEmitter() {
  return std::make_unique<AttentionEmitter>();
}

}  // namespace gptc::codegen
