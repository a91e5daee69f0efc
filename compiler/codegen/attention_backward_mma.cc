// Note [tensor-core attention backward]: the flash backward of Note [flash
// attention backward] (attention_backward_emitter.cc) on mma.sync tiles, with
// the same split: dq in a kernel of its own (no atomics: the result is the
// same bits run after run), dk and dv in one. A block of 4 warps owns 64
// rows, 16 a warp, kept as A fragments (Note [mma fragments] in
// attention_mma.h) for the whole kernel, and walks the other side's rows 64
// at a time through shared memory (q, k, v, do are bf16 already, so the
// tiles hold them exactly), with c = scale log2(e) (Note [exp2 softmax]):
//   dq kernel, query rows t, key tiles k, v (causal: up to the diagonal):
//     s = q k^T, dp = do v^T, p = 2^(c s - log2(e) lse_t),
//     ds = p (scale dp - scale delta_t),   dq += ds~ k
//   dk + dv kernel, key rows j, query tiles q, do (causal: from the diagonal):
//     s^T = k q^T, p^T = 2^(c s^T - log2(e) lse),  dv += p~^T do
//     dp^T = v do^T, ds^T = p^T (scale dp^T - scale delta),  dk += ds~^T q
// (x~: x rounded to bf16 as an A fragment, which is where the decomposition
// rounds p and ds). lse and delta are per query: a row's in the dq kernel,
// loaded once; a column's in the dk + dv kernel, staged in shared memory a
// block ahead (Note [staged row statistics]). Only blocks crossing the
// diagonal or a length are masked (Note [diagonal masks]); there keys past
// the causal limit, keys past S and queries past T give p = 0. Own rows past
// the end are computed on clamped indices and not stored. Both kernels take
// their tiles longest first (Note [longest-first tiles]) and, where the
// other side's operands allow, fill the tiles by cp.async a block ahead
// (Note [pipelined tile fill]).
#include <optional>
#include <utility>
#include <vector>

#include "compiler/codegen/attention_mma.h"
#include "compiler/codegen/attention_wgmma.h"
#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace gptc::codegen {

using mlir::Value;
namespace arith = mlir::arith;
namespace LLVM = mlir::LLVM;

namespace {

// Note [staged row statistics]: the dk + dv kernel's block of 64 query
// columns needs each column's -log2(e) lse and -scale delta. A lane reads 16
// columns of each a block, the same ones as the 7 other lanes of its column
// group and the 3 other warps: loading them from global memory was 32 scalar
// loads a thread a block, waited on in the middle of the block. Instead the
// block's first 64 threads each load one column's lse and delta for the next
// block when a block starts, scale them, and store them at its end into the
// other stage of a [2][2][64] f32 array; the barrier that opens the next
// block publishes them, and each lane reads its 16 columns as 8-byte pairs.
class StagedStats {
 public:
  StagedStats(WarpRowKernel& kernel, mlir::gpu::GPUModuleOp gpu_module, const std::string& name)
      : kernel_(kernel), m_(kernel) {
    mlir::OpBuilder& b = kernel.b();
    const mlir::Location loc = kernel.loc();
    LLVM::GlobalOp global;
    {
      mlir::OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(gpu_module.getBody());
      auto type = LLVM::LLVMArrayType::get(b.getF32Type(), 2 * 2 * kTileRows);
      global = b.create<LLVM::GlobalOp>(loc, type, /*isConstant=*/false, LLVM::Linkage::Internal,
                                        name, mlir::Attribute(), /*alignment=*/16,
                                        /*addrSpace=*/3);
    }
    base_ = b.create<LLVM::AddressOfOp>(loc, global);
  }

  static constexpr int64_t kBytes = 2 * 2 * kTileRows * 4;

  // Loads column block * 64 + tid of lse and delta (clamped below len) in
  // threads below 64 and when `when` holds; zeros elsewhere.
  StatusOr<std::pair<Value, Value>> Load(const AttentionBackward& a, Value bi, Value h, Value tid,
                                         Value block, Value when) {
    mlir::OpBuilder& b = kernel_.b();
    const mlir::Location loc = kernel_.loc();
    Value active = m_.Less(tid, m_.C(kTileRows));
    if (when) active = m_.And(active, when);
    auto branch = b.create<mlir::scf::IfOp>(loc, mlir::TypeRange{b.getF32Type(), b.getF32Type()},
                                            active, true);
    {
      mlir::OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(branch.thenBlock());
      FusedEmitter::Cache saved = kernel_.emitter().SaveCache();
      const Value t = m_.Min(m_.Add(m_.Mul(block, kTileRows), tid), a.tq - 1);
      ASSIGN_OR_RETURN(Value lse, kernel_.LoadF32(*a.lse, {bi, h, t}));
      ASSIGN_OR_RETURN(Value delta, kernel_.LoadF32(*a.delta, {bi, h, t}));
      kernel_.emitter().RestoreCache(std::move(saved));
      b.create<mlir::scf::YieldOp>(loc, mlir::ValueRange{lse, delta});
      b.setInsertionPointToStart(branch.elseBlock());
      b.create<mlir::scf::YieldOp>(loc, mlir::ValueRange{m_.F32(0), m_.F32(0)});
    }
    return std::make_pair(branch.getResult(0), branch.getResult(1));
  }

  // Threads below 64 store -log2(e) lse and -scale delta of their column
  // into stage block % 2.
  void Store(Value tid, Value block, std::pair<Value, Value> stats, double scale) {
    mlir::OpBuilder& b = kernel_.b();
    const mlir::Location loc = kernel_.loc();
    mlir::OpBuilder::InsertionGuard guard(b);
    auto branch = b.create<mlir::scf::IfOp>(loc, m_.Less(tid, m_.C(kTileRows)), false);
    b.setInsertionPoint(branch.thenBlock()->getTerminator());
    const Value at = m_.Add(m_.Mul(m_.Rem(block, 2), 2 * kTileRows), tid);
    b.create<LLVM::StoreOp>(loc, m_.FMul(stats.first, m_.F32(-kLog2E)), Element(at));
    b.create<LLVM::StoreOp>(loc, m_.FMul(stats.second, m_.F32(-scale)),
                            Element(m_.Add(at, m_.C(kTileRows))));
  }

  // Stage block % 2's values of columns col and col + 1 (col even): the
  // -log2(e) lse pair, then the -scale delta pair.
  std::array<Value, 4> Read(Value block, Value col) {
    mlir::OpBuilder& b = kernel_.b();
    const mlir::Location loc = kernel_.loc();
    const Value at = m_.Add(m_.Mul(m_.Rem(block, 2), 2 * kTileRows), col);
    std::array<Value, 4> out;
    auto pair_type = mlir::VectorType::get({2}, b.getF32Type());
    for (int64_t which = 0; which < 2; ++which) {
      const Value pair = b.create<LLVM::LoadOp>(
          loc, pair_type, Element(m_.Add(at, m_.C(which * kTileRows))), /*alignment=*/8);
      for (int64_t e = 0; e < 2; ++e) {
        out[2 * which + e] = b.create<LLVM::ExtractElementOp>(
            loc, pair, b.create<arith::ConstantOp>(loc, b.getI32IntegerAttr(e)));
      }
    }
    return out;
  }

 private:
  Value Element(Value at) {
    mlir::OpBuilder& b = kernel_.b();
    return b.create<LLVM::GEPOp>(kernel_.loc(), base_.getType(), b.getF32Type(), base_,
                                 mlir::ValueRange{at});
  }

  WarpRowKernel& kernel_;
  const TileMath m_;
  Value base_;  // !llvm.ptr<3>
};

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
        other_len_(by_query_ ? a.tk : a.tq),
        c_(a.scale * kLog2E) {
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
    // Causal: the dq kernel's last query tile is its longest, the dk + dv
    // kernel's first key tile.
    const auto order = !a_.causal  ? WarpRowKernel::TileOrder::kHeadMajor
                       : by_query_ ? WarpRowKernel::TileOrder::kLastTileFirst
                                   : WarpRowKernel::TileOrder::kFirstTileFirst;
    const WarpRowKernel::TileRow row =
        kernel_.BeginTileRow(order, TileGroupHeads(a_.batch * a_.heads, 2 * 2 * other_len_ * dim));
    bi_ = row.b;
    h_ = row.h;
    lanes_ = LanesOf(kernel_, row.lane, row.warp);
    own0_ = m_.Mul(row.tile, kTileRows);
    rows_[0] = m_.Add(m_.Add(own0_, m_.Mul(row.warp, 16)), lanes_.group);
    rows_[1] = m_.Add(rows_[0], m_.C(8));
    const Value clamped[2] = {m_.Min(rows_[0], own_len_ - 1), m_.Min(rows_[1], own_len_ - 1)};
    // Own rows: q and do (dq), or k and v (dk, dv); the other side's tiles.
    const ir::Instruction* own_a = by_query_ ? a_.q : a_.k;
    const ir::Instruction* own_b = by_query_ ? a_.d_out : a_.v;
    const ir::Instruction* other_a = by_query_ ? a_.k : a_.q;
    const ir::Instruction* other_b = by_query_ ? a_.v : a_.d_out;
    const bool pipelined = CanPipelineTiles({other_a, other_b}, other_len_, dim);
    const int64_t stages = pipelined ? 2 : 1;
    const TileLayout layout = a_.wgmma ? TileLayout::kSwizzled : TileLayout::kPadded;
    tile_a_.emplace(b_, gpu_module, name + (by_query_ ? "_k" : "_q"), kTileRows, dim, stages,
                    layout);
    tile_b_.emplace(b_, gpu_module, name + (by_query_ ? "_v" : "_do"), kTileRows, dim, stages,
                    layout);
    tiles_ = {{other_a, &*tile_a_}, {other_b, &*tile_b_}};
    ASSIGN_OR_RETURN(
        frags_a_, LoadRowFragments(kernel_, *own_a, bi_, h_, clamped[0], clamped[1], dim, lanes_));
    ASSIGN_OR_RETURN(
        frags_b_, LoadRowFragments(kernel_, *own_b, bi_, h_, clamped[0], clamped[1], dim, lanes_));
    for (int64_t half = 0; by_query_ && half < 2; ++half) {
      ASSIGN_OR_RETURN(Value lse, kernel_.LoadF32(*a_.lse, {bi_, h_, clamped[half]}));
      ASSIGN_OR_RETURN(Value delta, kernel_.LoadF32(*a_.delta, {bi_, h_, clamped[half]}));
      row_nl_[half] = m_.FMul(lse, m_.F32(-kLog2E));
      row_nsd_[half] = m_.FMul(delta, m_.F32(-a_.scale));
    }

    std::vector<Value> inits(wrts_.size() * 4 * d_tiles_, m_.F32(0));
    // Causal: the dq kernel stops at the diagonal tile, the dk + dv kernel
    // starts there (T = S).
    const Value begin = a_.causal && !by_query_ ? row.tile : m_.C(0);
    end_ = a_.causal && by_query_ ? m_.Min(m_.Add(row.tile, m_.C(1)), other_blocks)
                                  : m_.C(other_blocks);
    if (!by_query_) {
      stats_.emplace(kernel_, gpu_module, name + "_stats");
      ASSIGN_OR_RETURN(auto first, stats_->Load(a_, bi_, h_, lanes_.tid, begin, Value()));
      stats_->Store(lanes_.tid, begin, first, a_.scale);
    }
    if (pipelined) {
      pipeline_.emplace(kernel_, lanes_, bi_, h_, other_len_, dim, tiles_);
      pipeline_->Issue(begin);
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
    return tile_a_->bytes() + tile_b_->bytes() + (stats_ ? StagedStats::kBytes : 0);
  }

 private:
  // The block's p~ and ds~ as A fragments (either may be empty).
  struct Probabilities {
    std::vector<Fragment> p, ds;
  };

  // The other side's block `other`: its tiles, p and ds of the block's
  // scores, and the accumulators' products with the tiles.
  Status EmitOtherBlock(mlir::scf::ForOp loop) {
    const Value other = loop.getInductionVar();
    auto args = loop.getRegionIterArgs();
    const Value next = m_.Add(other, m_.C(1));
    std::pair<Value, Value> next_stats;
    if (stats_) {  // Note [staged row statistics]: the next block's, in flight during this one
      ASSIGN_OR_RETURN(next_stats,
                       stats_->Load(a_, bi_, h_, lanes_.tid, next, m_.Less(next, end_)));
    }
    SharedTile now_a = *tile_a_, now_b = *tile_b_;
    if (pipeline_) {
      std::vector<SharedTile> now = pipeline_->Await(other, end_);
      now_a = now[0];
      now_b = now[1];
    } else {
      RETURN_IF_ERROR(FillTiles(kernel_, lanes_, bi_, h_, other, other_len_, a_.dim, tiles_));
    }
    std::vector<Fragment> s, dp;
    Scores(now_a, now_b, s, dp);
    // By key rows: each column's -log2(e) lse and -scale delta.
    std::vector<std::array<Value, 4>> col_stats;
    for (int64_t nt = 0; stats_ && nt < kColumnTiles; ++nt) {
      col_stats.push_back(stats_->Read(other, m_.Add(lanes_.q2, m_.C(8 * nt))));
    }
    const Value other0 = m_.Mul(other, kTileRows);
    const Value needs_mask = by_query_ ? BlockNeedsMask(m_, own0_, other0, a_.causal, 0, a_.tk)
                                       : BlockNeedsMask(m_, other0, own0_, a_.causal, a_.tq, 0);
    const Probabilities x = Probability(s, dp, col_stats, other0, needs_mask);
    // dq += ds~ k;  dk += ds~^T q;  dv += p~^T do.
    std::vector<std::vector<Fragment>> accs(wrts_.size(), std::vector<Fragment>(d_tiles_));
    for (size_t i = 0; i < wrts_.size(); ++i) {
      for (int64_t dt = 0; dt < d_tiles_; ++dt) {
        for (int64_t e = 0; e < 4; ++e) accs[i][dt][e] = args[(i * d_tiles_ + dt) * 4 + e];
      }
    }
    Accumulate(x, now_a, now_b, accs);
    std::vector<Value> result;
    for (const std::vector<Fragment>& acc : accs) {
      for (const Fragment& f : acc) result.insert(result.end(), f.begin(), f.end());
    }
    if (stats_) stats_->Store(lanes_.tid, next, next_stats, a_.scale);
    b_.create<mlir::scf::YieldOp>(loc_, result);
    return Status::Ok();
  }

  // s (or s^T) = own_a tile_a^T; dp (or dp^T) = own_b tile_b^T (when ds is
  // needed). On wgmma the two chains share a fence and a wait.
  void Scores(const SharedTile& now_a, const SharedTile& now_b, std::vector<Fragment>& s,
              std::vector<Fragment>& dp) {
    if (!a_.wgmma) {
      s = TimesTileTransposed(kernel_, frags_a_, now_a, lanes_);
      if (need_ds_) dp = TimesTileTransposed(kernel_, frags_b_, now_b, lanes_);
      return;
    }
    WgmmaFence(b_, loc_);
    std::vector<WgmmaAccumulators> chains = {
        IssueWgmma(kernel_, frags_a_, now_a, /*transposed=*/true, {})};
    if (need_ds_) chains.push_back(IssueWgmma(kernel_, frags_b_, now_b, /*transposed=*/true, {}));
    WgmmaCommit(b_, loc_);
    WgmmaWait(b_, loc_, 0);
    const std::vector<Fragment> both = CompleteWgmma(b_, loc_, chains);
    s.assign(both.begin(), both.begin() + kColumnTiles);
    dp.assign(both.begin() + kColumnTiles, both.end());
  }

  // Each accumulator (by wrts_) += its A (p~ for dv, else ds~) times its
  // tile (do, q or k).
  void Accumulate(const Probabilities& x, const SharedTile& now_a, const SharedTile& now_b,
                  std::vector<std::vector<Fragment>>& accs) {
    auto a_of = [&](size_t i) -> const std::vector<Fragment>& {
      return wrts_[i] == 2 ? x.p : x.ds;
    };
    auto tile_of = [&](size_t i) -> const SharedTile& { return wrts_[i] == 2 ? now_b : now_a; };
    if (!a_.wgmma) {
      for (size_t i = 0; i < accs.size(); ++i) {
        AccumulateTimesTile(kernel_, a_of(i), tile_of(i), lanes_, accs[i]);
      }
      return;
    }
    WgmmaFence(b_, loc_);
    std::vector<WgmmaAccumulators> chains;
    for (size_t i = 0; i < accs.size(); ++i) {
      chains.push_back(IssueWgmma(kernel_, a_of(i), tile_of(i), /*transposed=*/false, accs[i]));
    }
    WgmmaCommit(b_, loc_);
    WgmmaWait(b_, loc_, 0);
    const std::vector<Fragment> all = CompleteWgmma(b_, loc_, chains);
    for (size_t i = 0; i < accs.size(); ++i) {
      accs[i].assign(all.begin() + i * d_tiles_, all.begin() + (i + 1) * d_tiles_);
    }
  }

  // p = 2^(c s - log2(e) lse), and ds = p (scale dp - scale delta), packed
  // as A fragments: p when dv is computed, ds when dq or dk is. When
  // `needs_mask` holds, p of keys invisible to their query is 0 (Note
  // [diagonal masks]: a uniform branch of selects between the exponentials
  // and ds, the same code either side of it).
  Probabilities Probability(std::vector<Fragment> s, std::vector<Fragment> dp,
                            const std::vector<std::array<Value, 4>>& col_stats, Value other0,
                            Value needs_mask) {
    for (int64_t nt = 0; nt < kColumnTiles; ++nt) {
      for (int64_t e = 0; e < 4; ++e) {
        const Value nl = by_query_ ? row_nl_[e / 2] : col_stats[nt][e % 2];
        s[nt][e] = m_.Exp2(m_.Fma(s[nt][e], m_.F32(c_), nl));
      }
    }
    if (needs_mask) s = Masked(needs_mask, std::move(s), other0);
    for (int64_t nt = 0; need_ds_ && nt < kColumnTiles; ++nt) {
      for (int64_t e = 0; e < 4; ++e) {
        const Value nsd = by_query_ ? row_nsd_[e / 2] : col_stats[nt][2 + e % 2];
        dp[nt][e] = m_.FMul(s[nt][e], m_.Fma(dp[nt][e], m_.F32(a_.scale), nsd));
      }
    }
    Probabilities x;
    if (wrts_.back() == 2) x.p = PackA(b_, loc_, s);
    if (need_ds_) x.ds = PackA(b_, loc_, dp);
    return x;
  }

  // `p` with the probabilities of keys invisible to their query set to 0
  // when `needs_mask`, as it is otherwise.
  std::vector<Fragment> Masked(Value needs_mask, std::vector<Fragment> p, Value other0) {
    return MaskInBranch(
        kernel_, needs_mask, std::move(p),
        [&](int64_t nt, int64_t e) {
          const Value col = m_.Add(m_.Add(other0, lanes_.q2), m_.C(8 * nt + e % 2));
          const Value row = rows_[e / 2];
          return by_query_ ? KeyVisible(m_, row, col, a_.causal, 0, a_.tk)
                           : KeyVisible(m_, col, row, a_.causal, a_.tq, 0);
        },
        m_.F32(0));
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
          const Value ptr = kernel_.entry()->getArgument(a_.first_output + out);
          for (const OutputChain* store : StoresOf(a_.chains[out])) {
            if (store->root < 0 || a_.roots[store->root] != root) continue;
            const std::optional<PairStore> pair = PairStoreOf(*root, *store);
            for (int64_t dt = 0; dt < d_tiles_; ++dt) {
              const int64_t at = (i * d_tiles_ + dt) * 4 + 2 * half;
              if (pair) {
                StorePair(b_, loc_, *pair, loop.getResult(at), loop.getResult(at + 1),
                          {bi_, h_, rows_[half], m_.Add(lanes_.q2, m_.C(8 * dt))}, ptr);
                continue;
              }
              for (int64_t e = 0; e < 2; ++e) {
                StoreThroughChain(emitter, b_, loc_, loop.getResult(at + e), *root, *store,
                                  {bi_, h_, rows_[half], m_.Add(lanes_.q2, m_.C(8 * dt + e))}, ptr,
                                  a_.outputs[out]->shape().dtype());
              }
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
  const double c_;
  std::vector<int> wrts_;
  std::optional<TilePipeline> pipeline_;
  std::optional<StagedStats> stats_;
  std::optional<SharedTile> tile_a_, tile_b_;
  std::vector<std::pair<const ir::Instruction*, SharedTile*>> tiles_;
  Value bi_, h_, own0_, end_;
  Value rows_[2];                 // the lane's own rows (lo, lo + 8), unclamped
  Value row_nl_[2], row_nsd_[2];  // by query rows: -log2(e) lse and -scale delta
  WarpLanes lanes_;
  std::vector<Fragment> frags_a_, frags_b_;
};

}  // namespace

StatusOr<int64_t> EmitTensorCoreBackward(WarpRowKernel& kernel, mlir::gpu::GPUModuleOp gpu_module,
                                         const std::string& name, const AttentionBackward& a) {
  return TensorCoreBackwardBuilder(kernel, a).Emit(gpu_module, name);
}

}  // namespace gptc::codegen
