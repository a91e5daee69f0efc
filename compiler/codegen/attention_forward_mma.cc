// Note [tensor-core attention forward]: FlashAttention-2's forward on
// mma.sync. A block of 4 warps owns 64 query rows of one (b, h), 16 a warp;
// the warp keeps its q rows as A fragments (Note [mma fragments] in
// attention_mma.h) for the whole kernel. For each 64-key block (causal: up to
// the diagonal one) the block stages k and v in shared memory, rounded to
// bf16 (16 bytes a load of a VectorSource: Note [strided operands]; else
// every element computed through the fusion's operand chains), and each warp
// computes, with s the raw scores q k^T and c = scale log2(e) (Note [exp2
// softmax]):
//   s = q k^T                    8 n-tiles of 16 x 8, f32 (masked: -inf)
//   m' = max(m, rowmax s), p = 2^(c s - c m'), l = l 2^(c m - c m') + rowsum p
//   o = o 2^(c m - c m') + p~ v  (p~: p rounded to bf16, as the A fragment)
// with the row statistics reduced over the 4 lanes of a row by shuffles (l
// only at the end: each lane sums its own columns). Only the blocks that
// cross the diagonal or a length are masked (Note [diagonal masks]). At the
// end o / l goes out through the output chains and scale m + log l is the
// lse. Rows past T (the last block's) compute on clamped indices and are not
// stored; keys past S are zeros in shared memory and -inf in s. Blocks take
// their query tiles longest first (Note [longest-first tiles]).
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "compiler/codegen/attention_mma.h"
#include "compiler/codegen/attention_wgmma.h"
#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace gptc::codegen {
namespace {

using mlir::Value;
namespace arith = mlir::arith;

constexpr double kInf = std::numeric_limits<double>::infinity();

// What one key block's softmax step hands on: p~ as A fragments, each row
// half's new maximum and running sum, and the factor that rescales o.
struct SoftmaxStep {
  std::vector<Fragment> p;  // PackA of the probabilities
  Value m[2], l[2], corr[2];
};

// Builds Note [tensor-core attention forward] in a WarpRowKernel: the
// warp's q fragments and the tiles, the loop over the key blocks, then the
// rows' results to the outputs.
class TensorCoreForwardBuilder {
 public:
  TensorCoreForwardBuilder(WarpRowKernel& kernel, const AttentionForward& a)
      : kernel_(kernel),
        a_(a),
        m_(kernel),
        b_(kernel.b()),
        loc_(kernel.loc()),
        d_tiles_(a.dim / 8),
        // A positive scale keeps the raw scores' maximum the scaled one's.
        prescale_(a.scale > 0 ? 1.0 : a.scale),
        c_((a.scale > 0 ? a.scale : 1.0) * kLog2E) {}

  StatusOr<TensorCoreForward> Emit(mlir::gpu::GPUModuleOp gpu_module, const std::string& name) {
    FusedEmitter& emitter = kernel_.emitter();
    const int64_t dim = a_.dim;
    const int64_t key_blocks = (a_.tk + kTileRows - 1) / kTileRows;
    FusedEmitter::Cache saved = emitter.SaveCache();
    const WarpRowKernel::TileRow row = kernel_.BeginTileRow(
        a_.causal ? WarpRowKernel::TileOrder::kLastTileFirst : WarpRowKernel::TileOrder::kHeadMajor,
        TileGroupHeads(a_.batch * a_.heads, 2 * 2 * a_.tk * dim));
    std::vector<const ir::Instruction*> ops = {a_.k};
    if (a_.attn != nullptr) ops.push_back(a_.v);
    const bool pipelined = CanPipelineTiles(ops, a_.tk, dim);
    const TileLayout layout = a_.wgmma ? TileLayout::kSwizzled : TileLayout::kPadded;
    k_tile_.emplace(b_, gpu_module, name + "_k", kTileRows, dim, pipelined ? 2 : 1, layout);
    if (a_.attn != nullptr) {
      v_tile_.emplace(b_, gpu_module, name + "_v", kTileRows, dim, pipelined ? 2 : 1, layout);
    }
    tiles_ = {{a_.k, &*k_tile_}};
    if (v_tile_) tiles_.push_back({a_.v, &*v_tile_});
    bi_ = row.b;
    h_ = row.h;
    lanes_ = LanesOf(kernel_, row.lane, row.warp);
    q0_ = m_.Mul(row.tile, kTileRows);
    row_lo_ = m_.Add(m_.Add(q0_, m_.Mul(row.warp, 16)), lanes_.group);
    row_hi_ = m_.Add(row_lo_, m_.C(8));
    blocks_ = a_.causal ? m_.Min(m_.Add(row.tile, m_.C(1)), key_blocks) : m_.C(key_blocks);
    // Note [overlapped wgmma forward]: with whole tiles by cp.async and v.
    const bool overlapped = a_.wgmma && pipelined && v_tile_;
    if (pipelined) {
      pipeline_.emplace(kernel_, lanes_, bi_, h_, a_.tk, dim, tiles_);
      if (!overlapped) pipeline_->Issue(m_.C(0));
    }
    ASSIGN_OR_RETURN(q_frags_, LoadRowFragments(kernel_, *a_.q, bi_, h_, m_.Min(row_lo_, a_.tq - 1),
                                                m_.Min(row_hi_, a_.tq - 1), dim, lanes_));
    std::vector<Value> rows;  // m and l of rows lo and hi, then o (d_tiles fragments)
    if (overlapped) {
      rows = EmitOverlapped();
    } else {
      // for (kb = 0; kb < blocks; ++kb), carrying m, l and o.
      std::vector<Value> inits = {m_.F32(-kInf), m_.F32(-kInf), m_.F32(0), m_.F32(0)};
      for (int64_t i = 0; i < 4 * d_tiles_; ++i) inits.push_back(m_.F32(0));
      mlir::OpBuilder::InsertPoint after_loop = b_.saveInsertionPoint();
      auto loop =
          mlir::cast<mlir::scf::ForOp>(CreateFor(b_, loc_, m_.C(0), blocks_, m_.C(1), inits));
      {
        FusedEmitter::Cache outer = emitter.SaveCache();
        RETURN_IF_ERROR(EmitKeyBlock(loop));
        emitter.RestoreCache(std::move(outer));
      }
      b_.restoreInsertionPoint(after_loop);
      b_.setInsertionPointAfter(loop);
      rows.assign(loop.getResults().begin(), loop.getResults().end());
    }
    StoreRows(rows);
    emitter.RestoreCache(std::move(saved));
    return TensorCoreForward{k_tile_->bytes() + (v_tile_ ? v_tile_->bytes() : 0), row.thread};
  }

 private:
  // Key block kb: its tiles, s = q k^T, the softmax step (masked or not:
  // Note [diagonal masks]), and o.
  Status EmitKeyBlock(mlir::scf::ForOp loop) {
    const Value kb = loop.getInductionVar();
    auto args = loop.getRegionIterArgs();
    std::optional<SharedTile> k_now = k_tile_, v_now = v_tile_;
    if (pipeline_) {
      std::vector<SharedTile> now = pipeline_->Await(kb, blocks_);
      k_now = now[0];
      if (v_tile_) v_now = now[1];
    } else {
      RETURN_IF_ERROR(FillTiles(kernel_, lanes_, bi_, h_, kb, a_.tk, a_.dim, tiles_));
    }
    // s = q k^T
    std::vector<Fragment> s = a_.wgmma
                                  ? WgmmaProduct(kernel_, q_frags_, *k_now, /*transposed=*/true, {})
                                  : TimesTileTransposed(kernel_, q_frags_, *k_now, lanes_);
    const Value m_old[2] = {args[0], args[1]}, l_old[2] = {args[2], args[3]};
    const SoftmaxStep step = Step(std::move(s), kb, m_old, l_old);
    std::vector<Value> next = {step.m[0], step.m[1], step.l[0], step.l[1]};
    std::vector<Fragment> o(d_tiles_);
    for (int64_t dt = 0; dt < d_tiles_; ++dt) {
      for (int64_t e = 0; e < 4; ++e) o[dt][e] = m_.FMul(args[4 + 4 * dt + e], step.corr[e / 2]);
    }
    if (v_now && a_.wgmma) {  // o += p~ v
      o = WgmmaProduct(kernel_, step.p, *v_now, /*transposed=*/false, o);
    } else if (v_now) {
      AccumulateTimesTile(kernel_, step.p, *v_now, lanes_, o);
    }
    for (const Fragment& f : o) next.insert(next.end(), f.begin(), f.end());
    b_.create<mlir::scf::YieldOp>(loc_, next);
    return Status::Ok();
  }

  // Note [overlapped wgmma forward]: FlashAttention-3's intra-warpgroup
  // pipelining, the tensor cores multiplying while the warps run a softmax.
  // Iteration j issues s_j = q k_j^T and o += p_(j-1) v_(j-1) as two
  // groups, waits for the first (wait_group 1), runs block j's softmax while
  // the second is in flight, then waits for it and rescales o to block j's
  // maximum. Block 0's s and softmax come before the loop, the last block's
  // o += p v after it. So k runs a block ahead of v through the tiles: the
  // barrier opening iteration j publishes k_j and v_(j-1) (copied by
  // iteration j - 1), and the copies issued after it, k_(j+1) and v_j, go to
  // stages whose last readers (s_(j-1), o += p_(j-2) v_(j-2)) every thread
  // has waited for. Returns m and l of rows lo and hi, then o.
  std::vector<Value> EmitOverlapped() {
    TilePipeline& pipe = *pipeline_;  // tile 0: k, tile 1: v
    const Value zero = m_.C(0), one = m_.C(1);
    pipe.Copy(0, zero);
    pipe.Commit();
    pipe.Wait();
    pipe.Copy(0, one, m_.Less(one, blocks_));
    pipe.Copy(1, zero);
    pipe.Commit();
    std::vector<Fragment> s0 = WgmmaProduct(kernel_, q_frags_, pipe.StageOf(0, zero), true, {});
    const Value no_rows[2] = {m_.F32(-kInf), m_.F32(-kInf)}, no_sums[2] = {m_.F32(0), m_.F32(0)};
    const SoftmaxStep first = Step(std::move(s0), zero, no_rows, no_sums);
    // for (j = 1; j < blocks; ++j), carrying m, l, o and p of block j - 1.
    std::vector<Value> inits = {first.m[0], first.m[1], first.l[0], first.l[1]};
    for (int64_t i = 0; i < 4 * d_tiles_; ++i) inits.push_back(m_.F32(0));
    for (const Fragment& f : first.p) inits.insert(inits.end(), f.begin(), f.end());
    mlir::OpBuilder::InsertPoint after_loop = b_.saveInsertionPoint();
    auto loop = mlir::cast<mlir::scf::ForOp>(CreateFor(b_, loc_, one, blocks_, one, inits));
    {
      FusedEmitter::Cache outer = kernel_.emitter().SaveCache();
      const Value j = loop.getInductionVar();
      auto args = loop.getRegionIterArgs();
      const Value prev = m_.Sub(j, one), next = m_.Add(j, one);
      pipe.Wait();
      pipe.Copy(0, next, m_.Less(next, blocks_));
      pipe.Copy(1, j);
      pipe.Commit();
      std::vector<Fragment> o = Fragments(args, 4, d_tiles_),
                            p = Fragments(args, 4 + 4 * d_tiles_, 4);
      WgmmaFence(b_, loc_);
      const WgmmaAccumulators s = IssueWgmma(kernel_, q_frags_, pipe.StageOf(0, j), true, {});
      WgmmaCommit(b_, loc_);
      const WgmmaAccumulators pv = IssueWgmma(kernel_, p, pipe.StageOf(1, prev), false, o);
      WgmmaCommit(b_, loc_);
      WgmmaWait(b_, loc_, 1);
      const Value m_old[2] = {args[0], args[1]}, l_old[2] = {args[2], args[3]};
      const SoftmaxStep step = Step(CompleteWgmma(b_, loc_, {s}), j, m_old, l_old);
      WgmmaWait(b_, loc_, 0);
      o = CompleteWgmma(b_, loc_, {pv});
      std::vector<Value> yield = {step.m[0], step.m[1], step.l[0], step.l[1]};
      for (Fragment& f : o) {
        for (int64_t e = 0; e < 4; ++e) yield.push_back(m_.FMul(f[e], step.corr[e / 2]));
      }
      for (const Fragment& f : step.p) yield.insert(yield.end(), f.begin(), f.end());
      b_.create<mlir::scf::YieldOp>(loc_, yield);
      kernel_.emitter().RestoreCache(std::move(outer));
    }
    b_.restoreInsertionPoint(after_loop);
    b_.setInsertionPointAfter(loop);
    auto last = loop.getResults();
    pipe.Wait();
    const std::vector<Fragment> o =
        WgmmaProduct(kernel_, Fragments(last, 4 + 4 * d_tiles_, 4),
                     pipe.StageOf(1, m_.Sub(blocks_, one)), false, Fragments(last, 4, d_tiles_));
    std::vector<Value> rows = {last[0], last[1], last[2], last[3]};
    for (const Fragment& f : o) rows.insert(rows.end(), f.begin(), f.end());
    return rows;
  }

  // `count` fragments of `values` from `first` on.
  template <typename Range>
  static std::vector<Fragment> Fragments(const Range& values, int64_t first, int64_t count) {
    std::vector<Fragment> out(count);
    for (int64_t i = 0; i < 4 * count; ++i) out[i / 4][i % 4] = values[first + i];
    return out;
  }

  // Key block kb's softmax step over its raw scores `s`: prescaled, masked
  // where Note [diagonal masks] says, then Softmax.
  SoftmaxStep Step(std::vector<Fragment> s, Value kb, const Value (&m_old)[2],
                   const Value (&l_old)[2]) {
    if (prescale_ != 1.0) {
      for (Fragment& f : s) {
        for (Value& x : f) x = m_.FMul(x, m_.F32(prescale_));
      }
    }
    const Value k0 = m_.Mul(kb, kTileRows);
    const Value needs_mask = BlockNeedsMask(m_, q0_, k0, a_.causal, /*tq=*/0, a_.tk);
    if (needs_mask) s = Masked(needs_mask, std::move(s), k0);
    return Softmax(s, m_old, l_old, needs_mask != nullptr);
  }

  // `s` with the scores of keys invisible to their query (Note [diagonal
  // masks]) set to -inf when `needs_mask`, as it is otherwise.
  std::vector<Fragment> Masked(Value needs_mask, std::vector<Fragment> s, Value k0) {
    return MaskInBranch(
        kernel_, needs_mask, std::move(s),
        [&](int64_t nt, int64_t e) {
          const Value key = m_.Add(m_.Add(k0, lanes_.q2), m_.C(8 * nt + e % 2));
          return KeyVisible(m_, e < 2 ? row_lo_ : row_hi_, key, a_.causal, 0, a_.tk);
        },
        m_.F32(-kInf));
  }

  // The online softmax of Note [tensor-core attention forward] over raw
  // scores `s` of one key block; `maybe_masked` when a score may be -inf.
  SoftmaxStep Softmax(std::vector<Fragment> s, const Value (&m_old)[2], const Value (&l_old)[2],
                      bool maybe_masked) {
    SoftmaxStep step;
    std::vector<Value> row_scores[2];
    for (int64_t nt = 0; nt < kColumnTiles; ++nt) {
      for (int64_t e = 0; e < 4; ++e) row_scores[e / 2].push_back(s[nt][e]);
    }
    Value neg_cm[2];
    for (int64_t half = 0; half < 2; ++half) {
      row_scores[half].push_back(m_old[half]);
      step.m[half] = m_.RowMax(m_.Max(row_scores[half]));
      neg_cm[half] = m_.FMul(step.m[half], m_.F32(-c_));
      if (maybe_masked) {
        // A row with no visible key so far keeps m = -inf: its scores then
        // give 2^(-inf - 0) = 0, not NaN.
        neg_cm[half] = m_.Select(m_.FEq(step.m[half], m_.F32(-kInf)), m_.F32(0), neg_cm[half]);
      }
      step.corr[half] = m_.Exp2(m_.Fma(m_old[half], m_.F32(c_), neg_cm[half]));
    }
    std::vector<Value> sums[2];
    for (int64_t nt = 0; nt < kColumnTiles; ++nt) {
      for (int64_t e = 0; e < 4; ++e) {
        s[nt][e] = m_.Exp2(m_.Fma(s[nt][e], m_.F32(c_), neg_cm[e / 2]));
        sums[e / 2].push_back(s[nt][e]);
      }
    }
    for (int64_t half = 0; half < 2; ++half) {
      step.l[half] = m_.Fma(l_old[half], step.corr[half], m_.Sum(sums[half]));
    }
    step.p = PackA(b_, loc_, s);
    return step;
  }

  // Each row's l over its 4 lanes; o / l and scale m + log l to the outputs
  // (`rows`: m and l of rows lo and hi, then o).
  void StoreRows(const std::vector<Value>& rows) {
    FusedEmitter& emitter = kernel_.emitter();
    const Value q2 = lanes_.q2;
    const Value first_of_row =
        b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::eq, q2, m_.C(0));
    for (int64_t half = 0; half < 2; ++half) {
      const Value t = half == 0 ? row_lo_ : row_hi_;
      const Value l = m_.RowSum(rows[2 + half]);
      mlir::OpBuilder::InsertPoint after_store = b_.saveInsertionPoint();
      FusedEmitter::Cache store_cache = emitter.SaveCache();
      auto in_rows = b_.create<mlir::scf::IfOp>(loc_, m_.Less(t, m_.C(a_.tq)), false);
      b_.setInsertionPoint(in_rows.thenBlock()->getTerminator());
      const Value inv = b_.create<arith::DivFOp>(loc_, m_.F32(1), l);
      for (size_t out = 0; out < a_.outputs.size(); ++out) {
        if (a_.chains[out].root < 0) continue;
        const ir::Instruction* root = a_.roots[a_.chains[out].root];
        const Value ptr = kernel_.entry()->getArgument(a_.first_output + out);
        const ir::DType dtype = a_.outputs[out]->shape().dtype();
        if (root == a_.attn) {
          const std::optional<PairStore> pair = PairStoreOf(*a_.attn, a_.chains[out]);
          for (int64_t dt = 0; dt < d_tiles_; ++dt) {
            Value value[2];
            for (int64_t e = 0; e < 2; ++e) {
              value[e] = m_.FMul(rows[4 + 4 * dt + 2 * half + e], inv);
              if (pair) continue;
              StoreThroughChain(emitter, b_, loc_, value[e], *a_.attn, a_.chains[out],
                                {bi_, h_, t, m_.Add(q2, m_.C(8 * dt + e))}, ptr, dtype);
            }
            if (pair)
              StorePair(b_, loc_, *pair, value[0], value[1], {bi_, h_, t, m_.Add(q2, m_.C(8 * dt))},
                        ptr);
          }
          continue;
        }
        auto first = b_.create<mlir::scf::IfOp>(loc_, first_of_row, false);
        mlir::OpBuilder::InsertPoint after_lse = b_.saveInsertionPoint();
        b_.setInsertionPoint(first.thenBlock()->getTerminator());
        // scale m + ln l = (c m + log2 l) ln 2, with lg2.approx (Note [exp2
        // softmax]) where libdevice's logf took about 30 instructions.
        const Value lse = m_.FMul(m_.Fma(rows[half], m_.F32(c_), m_.Log2(l)), m_.F32(1 / kLog2E));
        StoreThroughChain(emitter, b_, loc_, lse, *a_.lse, a_.chains[out], {bi_, h_, t}, ptr,
                          dtype);
        b_.restoreInsertionPoint(after_lse);
      }
      emitter.RestoreCache(std::move(store_cache));
      b_.restoreInsertionPoint(after_store);
    }
  }

  WarpRowKernel& kernel_;
  const AttentionForward& a_;
  const TileMath m_;
  mlir::OpBuilder& b_;
  const mlir::Location loc_;
  const int64_t d_tiles_;
  const double prescale_, c_;
  std::optional<TilePipeline> pipeline_;
  std::optional<SharedTile> k_tile_, v_tile_;
  std::vector<std::pair<const ir::Instruction*, SharedTile*>> tiles_;
  Value bi_, h_, q0_, row_lo_, row_hi_, blocks_;
  WarpLanes lanes_;
  std::vector<Fragment> q_frags_;
};

}  // namespace

StatusOr<TensorCoreForward> EmitTensorCoreForward(WarpRowKernel& kernel,
                                                  mlir::gpu::GPUModuleOp gpu_module,
                                                  const std::string& name,
                                                  const AttentionForward& a) {
  return TensorCoreForwardBuilder(kernel, a).Emit(gpu_module, name);
}

}  // namespace gptc::codegen
