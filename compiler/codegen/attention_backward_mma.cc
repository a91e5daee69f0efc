// Note [tensor-core attention backward]: the flash backward of Note [flash
// attention backward] (attention_backward_emitter.cc) on mma.sync tiles, with
// the same split: dq in a kernel of its own (no atomics), dk and dv in one.
// A block of 4 warps owns 64 rows, 16 a warp, kept as A fragments (Note [mma
// fragments] in attention_mma.h) for the whole kernel, and walks the other
// side's rows 64 at a time through shared memory (rounded to bf16 there; q,
// k, v, do are bf16 already, so that is exact):
//   dq kernel, query rows t, key tiles k, v (causal: up to the diagonal):
//     s = q k^T, dp = do v^T, p = exp(scale s - lse_t),
//     ds = scale p (dp - delta_t),   dq += ds~ k
//   dk + dv kernel, key rows j, query tiles q, do (causal: from the diagonal):
//     s^T = k q^T, p^T = exp(scale s^T - lse),  dv += p~^T do
//     dp^T = v do^T, ds^T = scale p^T (dp^T - delta),  dk += ds~^T q
// (x~: x rounded to bf16 as an A fragment, which is where the decomposition
// rounds p and ds). lse and delta are per query: a row's in the dq kernel, a
// column's (each lane's 16 columns) in the dk + dv kernel. Scores of keys
// past the causal limit, keys past S and queries past T give p = 0, so the
// zero rows of a last partial tile add nothing; own rows past the end are
// computed on clamped indices and not stored.
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "compiler/codegen/attention_mma.h"
#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace gptc::codegen {

using mlir::Value;
namespace arith = mlir::arith;

namespace {

constexpr int64_t kColumnTiles = kTileRows / 8;  // n-tiles of a 64-row block

// Builds Note [tensor-core attention backward] in a WarpRowKernel: the own
// rows' fragments, the loop over the other side's blocks, then the
// gradients to the outputs.
class TensorCoreBackwardBuilder {
 public:
  TensorCoreBackwardBuilder(WarpRowKernel& kernel, const AttentionBackward& a)
      : kernel_(kernel),
        a_(a),
        m_(kernel),
        b_(kernel.b()),
        loc_(kernel.loc()),
        by_query_(a.by_query()),
        need_ds_(a.grads[0] != nullptr || a.grads[1] != nullptr),
        d_tiles_(a.dim / 8),
        own_len_(by_query_ ? a.tq : a.tk),
        other_len_(by_query_ ? a.tk : a.tq) {
    // Accumulators: dq, or dk and/or dv (by wrt), d_tiles fragments each.
    for (int wrt = 0; wrt < 3; ++wrt) {
      if (a.grads[wrt] != nullptr) wrts_.push_back(wrt);
    }
  }

  // Returns the static shared memory the kernel uses.
  StatusOr<int64_t> Emit(mlir::gpu::GPUModuleOp gpu_module, const std::string& name) {
    FusedEmitter& emitter = kernel_.emitter();
    const int64_t dim = a_.dim;
    const int64_t other_blocks = (other_len_ + kTileRows - 1) / kTileRows;
    FusedEmitter::Cache saved = emitter.SaveCache();
    const WarpRowKernel::Row row = kernel_.BeginRow(WarpRowKernel::kWarp);  // a warp each
    bi_ = row.b;
    h_ = row.h;
    const Value own_block = m_.Div(row.r, 4), warp = m_.Rem(row.r, 4);
    lanes_ = LanesOf(kernel_, row.lane, warp);
    const Value row_lo =
        m_.Add(m_.Add(m_.Mul(own_block, kTileRows), m_.Mul(warp, 16)), lanes_.group);
    rows_[0] = row_lo;
    rows_[1] = m_.Add(row_lo, m_.C(8));
    const Value clamped[2] = {m_.Min(rows_[0], own_len_ - 1), m_.Min(rows_[1], own_len_ - 1)};
    // Own rows: q and do (dq), or k and v (dk, dv); the other side's tiles.
    const ir::Instruction* own_a = by_query_ ? a_.q : a_.k;
    const ir::Instruction* own_b = by_query_ ? a_.d_out : a_.v;
    // Note [pipelined tile fill] in the dq kernel, which has the registers to
    // spare at two blocks a multiprocessor; the dk + dv kernel has none.
    const ir::Instruction* other_a = by_query_ ? a_.k : a_.q;
    const ir::Instruction* other_b = by_query_ ? a_.v : a_.d_out;
    pipelined_ = by_query_ && CanPipelineTiles({other_a, other_b}, other_len_, dim);
    const int64_t stages = pipelined_ ? 2 : 1;
    tile_a_.emplace(b_, gpu_module, name + (by_query_ ? "_k" : "_q"), kTileRows, dim, stages);
    tile_b_.emplace(b_, gpu_module, name + (by_query_ ? "_v" : "_do"), kTileRows, dim, stages);
    tiles_ = {{other_a, &*tile_a_}, {other_b, &*tile_b_}};
    ASSIGN_OR_RETURN(
        frags_a_, LoadRowFragments(kernel_, *own_a, bi_, h_, clamped[0], clamped[1], dim, lanes_));
    ASSIGN_OR_RETURN(
        frags_b_, LoadRowFragments(kernel_, *own_b, bi_, h_, clamped[0], clamped[1], dim, lanes_));
    for (int64_t half = 0; by_query_ && half < 2; ++half) {
      ASSIGN_OR_RETURN(row_lse_[half], kernel_.LoadF32(*a_.lse, {bi_, h_, clamped[half]}));
      ASSIGN_OR_RETURN(row_delta_[half], kernel_.LoadF32(*a_.delta, {bi_, h_, clamped[half]}));
    }

    std::vector<Value> inits(wrts_.size() * 4 * d_tiles_, m_.F32(0));
    // Causal: the dq kernel stops at the diagonal tile, the dk + dv kernel
    // starts there (T = S).
    const Value begin = a_.causal && !by_query_ ? own_block : m_.C(0);
    end_ = a_.causal && by_query_ ? m_.Add(own_block, m_.C(1)) : m_.C(other_blocks);
    if (pipelined_) {
      IssueTileCopies(kernel_, lanes_, bi_, h_, begin, other_len_, dim, tiles_);
    }
    mlir::OpBuilder::InsertPoint after_loop = b_.saveInsertionPoint();
    auto loop = mlir::cast<mlir::scf::ForOp>(CreateFor(b_, loc_, begin, end_, m_.C(1), inits));
    {
      FusedEmitter::Cache outer = emitter.SaveCache();
      RETURN_IF_ERROR(EmitOtherBlock(loop));
      emitter.RestoreCache(std::move(outer));
    }
    b_.restoreInsertionPoint(after_loop);
    b_.setInsertionPointAfter(loop);
    StoreRows(loop);
    emitter.RestoreCache(std::move(saved));
    return tile_a_->bytes() + tile_b_->bytes();
  }

 private:
  // The other side's block `other`: its tiles, p and ds of the block's
  // scores, and the accumulators' products with the tiles.
  Status EmitOtherBlock(mlir::scf::ForOp loop) {
    const Value other = loop.getInductionVar();
    auto args = loop.getRegionIterArgs();
    // A lane's elements e and e + 2 of an n-tile share their column (Note
    // [mma fragments]): its index and, by key rows, its query's lse and delta
    // are computed once for both, and loaded before the tiles are filled so
    // that their latency hides behind the fill's.
    Value cols[kColumnTiles][2], col_lse[kColumnTiles][2], col_delta[kColumnTiles][2];
    for (int64_t nt = 0; nt < kColumnTiles; ++nt) {
      for (int64_t e2 = 0; e2 < 2; ++e2) {
        const Value col = m_.Add(m_.Add(m_.Mul(other, kTileRows), lanes_.q2), m_.C(8 * nt + e2));
        cols[nt][e2] = col;
        if (by_query_) continue;
        ASSIGN_OR_RETURN(col_lse[nt][e2],
                         kernel_.LoadF32(*a_.lse, {bi_, h_, m_.Min(col, a_.tq - 1)}));
        if (need_ds_) {
          ASSIGN_OR_RETURN(col_delta[nt][e2],
                           kernel_.LoadF32(*a_.delta, {bi_, h_, m_.Min(col, a_.tq - 1)}));
        }
      }
    }
    SharedTile now_a = *tile_a_, now_b = *tile_b_;
    if (pipelined_) {
      std::vector<SharedTile> now =
          AwaitTileCopies(kernel_, lanes_, bi_, h_, other, end_, other_len_, a_.dim, tiles_);
      now_a = now[0];
      now_b = now[1];
    } else {
      RETURN_IF_ERROR(FillTiles(kernel_, lanes_, bi_, h_, other, other_len_, a_.dim, tiles_));
    }
    // s (or s^T) = own_a tile_a^T; dp (or dp^T) = own_b tile_b^T.
    std::vector<Fragment> p = TimesTileTransposed(kernel_, frags_a_, now_a, lanes_);
    std::vector<Fragment> ds;
    if (need_ds_) ds = TimesTileTransposed(kernel_, frags_b_, now_b, lanes_);
    for (int64_t nt = 0; nt < kColumnTiles; ++nt) {
      for (int64_t e2 = 0; e2 < 2; ++e2) {
        for (int64_t half = 0; half < 2; ++half) {
          const Value lse = by_query_ ? row_lse_[half] : col_lse[nt][e2];
          const Value delta = by_query_ ? row_delta_[half] : col_delta[nt][e2];
          ProbabilityAndDs(cols[nt][e2], half, lse, delta, p[nt][2 * half + e2],
                           need_ds_ ? &ds[nt][2 * half + e2] : nullptr);
        }
      }
    }
    // dq += ds~ k;  dk += ds~^T q;  dv += p~^T do.
    std::vector<Value> next;
    for (size_t i = 0; i < wrts_.size(); ++i) {
      std::vector<Fragment> acc(d_tiles_);
      for (int64_t dt = 0; dt < d_tiles_; ++dt) {
        for (int64_t e = 0; e < 4; ++e) acc[dt][e] = args[(i * d_tiles_ + dt) * 4 + e];
      }
      AccumulateTimesTile(kernel_, wrts_[i] == 2 ? p : ds, wrts_[i] == 2 ? now_b : now_a, lanes_,
                          acc);
      for (const Fragment& f : acc) next.insert(next.end(), f.begin(), f.end());
    }
    b_.create<mlir::scf::YieldOp>(loc_, next);
    return Status::Ok();
  }

  // Score `s` of own row `half` and other row `col` becomes p = exp(scale s
  // - lse) (0 where the key is not visible), and dp at `ds` (when given)
  // becomes ds = scale p (dp - delta).
  void ProbabilityAndDs(Value col, int64_t half, Value lse, Value delta, Value& s, Value* ds) {
    const Value query = by_query_ ? rows_[half] : col;
    const Value key = by_query_ ? col : rows_[half];
    Value visible = m_.Less(col, m_.C(other_len_));
    if (a_.causal)
      visible = b_.create<arith::AndIOp>(loc_, visible, m_.Less(key, m_.Add(query, m_.C(1))));
    Value prob = b_.create<mlir::math::ExpOp>(loc_, m_.FSub(m_.FMul(s, m_.F32(a_.scale)), lse));
    prob = b_.create<arith::SelectOp>(loc_, visible, prob, m_.F32(0));
    s = prob;
    if (ds != nullptr) *ds = m_.FMul(m_.FMul(prob, m_.FSub(*ds, delta)), m_.F32(a_.scale));
  }

  // The own rows in bounds store their gradients through the output chains.
  void StoreRows(mlir::scf::ForOp loop) {
    FusedEmitter& emitter = kernel_.emitter();
    for (int64_t half = 0; half < 2; ++half) {
      mlir::OpBuilder::InsertPoint after_store = b_.saveInsertionPoint();
      FusedEmitter::Cache store_cache = emitter.SaveCache();
      auto in_rows = b_.create<mlir::scf::IfOp>(loc_, m_.Less(rows_[half], m_.C(own_len_)), false);
      b_.setInsertionPoint(in_rows.thenBlock()->getTerminator());
      for (size_t i = 0; i < wrts_.size(); ++i) {
        const ir::Instruction* root = a_.grads[wrts_[i]];
        for (size_t out = 0; out < a_.outputs.size(); ++out) {
          if (a_.roots[a_.chains[out].root] != root) continue;
          for (int64_t dt = 0; dt < d_tiles_; ++dt) {
            for (int64_t e = 0; e < 2; ++e) {
              StoreThroughChain(
                  emitter, b_, loc_, loop.getResult((i * d_tiles_ + dt) * 4 + 2 * half + e), *root,
                  a_.chains[out], {bi_, h_, rows_[half], m_.Add(lanes_.q2, m_.C(8 * dt + e))},
                  kernel_.entry()->getArgument(a_.first_output + out),
                  a_.outputs[out]->shape().dtype());
            }
          }
        }
      }
      emitter.RestoreCache(std::move(store_cache));
      b_.restoreInsertionPoint(after_store);
    }
  }

  WarpRowKernel& kernel_;
  const AttentionBackward& a_;
  const TileMath m_;
  mlir::OpBuilder& b_;
  const mlir::Location loc_;
  const bool by_query_;
  const bool need_ds_;
  const int64_t d_tiles_;
  const int64_t own_len_, other_len_;
  std::vector<int> wrts_;
  bool pipelined_ = false;
  std::optional<SharedTile> tile_a_, tile_b_;
  std::vector<std::pair<const ir::Instruction*, SharedTile*>> tiles_;
  Value bi_, h_, end_;
  Value rows_[2];                    // the lane's own rows (lo, lo + 8), unclamped
  Value row_lse_[2], row_delta_[2];  // by query rows
  WarpLanes lanes_;
  std::vector<Fragment> frags_a_, frags_b_;
};

}  // namespace

StatusOr<int64_t> EmitTensorCoreBackward(WarpRowKernel& kernel, mlir::gpu::GPUModuleOp gpu_module,
                                         const std::string& name, const AttentionBackward& a) {
  return TensorCoreBackwardBuilder(kernel, a).Emit(gpu_module, name);
}

}  // namespace gptc::codegen
