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

#include "compiler/codegen/attention_mma.h"
#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace gptc::codegen {

using mlir::Value;
namespace arith = mlir::arith;

bool UseTensorCoreBackward(const AttentionBackward& a) {
  return a.q->shape().dtype() == ir::DType::kBF16 && a.dim % 16 == 0 && a.dim <= 64;
}

StatusOr<int64_t> EmitTensorCoreBackward(WarpRowKernel& kernel, mlir::gpu::GPUModuleOp gpu_module,
                                         const std::string& name, const AttentionBackward& a) {
  const TileMath m(kernel);
  mlir::OpBuilder& b = kernel.b();
  const mlir::Location loc = kernel.loc();
  FusedEmitter& emitter = kernel.emitter();
  const bool by_query = a.grads[0] != nullptr;
  const int64_t dim = a.dim, d_tiles = dim / 8;
  const int64_t own_len = by_query ? a.tq : a.tk, other_len = by_query ? a.tk : a.tq;
  const int64_t other_blocks = (other_len + kTileRows - 1) / kTileRows;

  FusedEmitter::Cache saved = emitter.SaveCache();
  const WarpRowKernel::Row row = kernel.BeginRow(WarpRowKernel::kWarp);  // a warp each
  const Value bi = row.b, h = row.h;
  const Value own_block = m.Div(row.r, 4), warp = m.Rem(row.r, 4);
  const WarpLanes lanes = LanesOf(kernel, row.lane, warp);
  const Value row_lo = m.Add(m.Add(m.Mul(own_block, kTileRows), m.Mul(warp, 16)), lanes.group);
  const Value rows[2] = {row_lo, m.Add(row_lo, m.C(8))};
  const Value clamped[2] = {m.Min(rows[0], own_len - 1), m.Min(rows[1], own_len - 1)};
  // Own rows: q and do (dq), or k and v (dk, dv); the other side's tiles.
  const ir::Instruction* own_a = by_query ? a.q : a.k;
  const ir::Instruction* own_b = by_query ? a.d_out : a.v;
  // Note [pipelined tile fill] in the dq kernel, which has the registers to
  // spare at two blocks a multiprocessor; the dk + dv kernel has none.
  const ir::Instruction* other_a = by_query ? a.k : a.q;
  const ir::Instruction* other_b = by_query ? a.v : a.d_out;
  const bool pipelined = by_query && CanPipelineTiles({other_a, other_b}, other_len, dim);
  const int64_t stages = pipelined ? 2 : 1;
  SharedTile tile_a(b, gpu_module, name + (by_query ? "_k" : "_q"), kTileRows, dim, stages);
  SharedTile tile_b(b, gpu_module, name + (by_query ? "_v" : "_do"), kTileRows, dim, stages);
  const std::vector<std::pair<const ir::Instruction*, SharedTile*>> tiles = {{other_a, &tile_a},
                                                                            {other_b, &tile_b}};
  ASSIGN_OR_RETURN(std::vector<Fragment> frags_a,
                   LoadRowFragments(kernel, *own_a, bi, h, clamped[0], clamped[1], dim, lanes));
  ASSIGN_OR_RETURN(std::vector<Fragment> frags_b,
                   LoadRowFragments(kernel, *own_b, bi, h, clamped[0], clamped[1], dim, lanes));
  Value row_lse[2], row_delta[2];
  for (int64_t half = 0; by_query && half < 2; ++half) {
    ASSIGN_OR_RETURN(row_lse[half], kernel.LoadF32(*a.lse, {bi, h, clamped[half]}));
    ASSIGN_OR_RETURN(row_delta[half], kernel.LoadF32(*a.delta, {bi, h, clamped[half]}));
  }

  // Accumulators: dq, or dk and/or dv (by wrt), d_tiles fragments each.
  std::vector<int> wrts;
  for (int wrt = 0; wrt < 3; ++wrt) {
    if (a.grads[wrt] != nullptr) wrts.push_back(wrt);
  }
  std::vector<Value> inits(wrts.size() * 4 * d_tiles, m.F32(0));
  // Causal: the dq kernel stops at the diagonal tile, the dk + dv kernel
  // starts there (T = S).
  const Value begin = a.causal && !by_query ? own_block : m.C(0);
  const Value end = a.causal && by_query ? m.Add(own_block, m.C(1)) : m.C(other_blocks);
  if (pipelined) {
    IssueTileCopies(kernel, lanes, bi, h, begin, other_len, dim, tiles);
  }
  mlir::OpBuilder::InsertPoint after_loop = b.saveInsertionPoint();
  auto loop = mlir::cast<mlir::scf::ForOp>(CreateFor(b, loc, begin, end, m.C(1), inits));
  {
    FusedEmitter::Cache outer = emitter.SaveCache();
    const Value other = loop.getInductionVar();
    auto args = loop.getRegionIterArgs();
    const bool need_ds = a.grads[0] != nullptr || a.grads[1] != nullptr;
    // A lane's elements e and e + 2 of an n-tile share their column (Note
    // [mma fragments]): its index and, by key rows, its query's lse and delta
    // are computed once for both, and loaded before the tiles are filled so
    // that their latency hides behind the fill's.
    Value cols[kTileRows / 8][2], col_lse[kTileRows / 8][2], col_delta[kTileRows / 8][2];
    for (int64_t nt = 0; nt < kTileRows / 8; ++nt) {
      for (int64_t e2 = 0; e2 < 2; ++e2) {
        const Value col = m.Add(m.Add(m.Mul(other, kTileRows), lanes.q2), m.C(8 * nt + e2));
        cols[nt][e2] = col;
        if (by_query) continue;
        ASSIGN_OR_RETURN(col_lse[nt][e2], kernel.LoadF32(*a.lse, {bi, h, m.Min(col, a.tq - 1)}));
        if (need_ds) {
          ASSIGN_OR_RETURN(col_delta[nt][e2],
                           kernel.LoadF32(*a.delta, {bi, h, m.Min(col, a.tq - 1)}));
        }
      }
    }
    SharedTile now_a = tile_a, now_b = tile_b;
    if (pipelined) {
      std::vector<SharedTile> now =
          AwaitTileCopies(kernel, lanes, bi, h, other, end, other_len, dim, tiles);
      now_a = now[0];
      now_b = now[1];
    } else {
      RETURN_IF_ERROR(FillTiles(kernel, lanes, bi, h, other, other_len, dim, tiles));
    }
    // s (or s^T) = own_a tile_a^T; dp (or dp^T) = own_b tile_b^T.
    std::vector<Fragment> p = TimesTileTransposed(kernel, frags_a, now_a, lanes);
    std::vector<Fragment> ds;
    if (need_ds) ds = TimesTileTransposed(kernel, frags_b, now_b, lanes);
    for (int64_t nt = 0; nt < kTileRows / 8; ++nt) {
      for (int64_t e2 = 0; e2 < 2; ++e2) {
        const Value col = cols[nt][e2];
        for (int64_t half = 0; half < 2; ++half) {
          const int64_t e = 2 * half + e2;
          const Value query = by_query ? rows[half] : col;
          const Value key = by_query ? col : rows[half];
          Value visible = m.Less(col, m.C(other_len));
          if (a.causal)
            visible = b.create<arith::AndIOp>(loc, visible, m.Less(key, m.Add(query, m.C(1))));
          const Value lse = by_query ? row_lse[half] : col_lse[nt][e2];
          const Value delta = by_query ? row_delta[half] : col_delta[nt][e2];
          Value prob =
              b.create<mlir::math::ExpOp>(loc, m.FSub(m.FMul(p[nt][e], m.F32(a.scale)), lse));
          prob = b.create<arith::SelectOp>(loc, visible, prob, m.F32(0));
          p[nt][e] = prob;
          if (need_ds) ds[nt][e] = m.FMul(m.FMul(prob, m.FSub(ds[nt][e], delta)), m.F32(a.scale));
        }
      }
    }
    // dq += ds~ k;  dk += ds~^T q;  dv += p~^T do.
    std::vector<Value> next;
    for (size_t i = 0; i < wrts.size(); ++i) {
      std::vector<Fragment> acc(d_tiles);
      for (int64_t dt = 0; dt < d_tiles; ++dt) {
        for (int64_t e = 0; e < 4; ++e) acc[dt][e] = args[(i * d_tiles + dt) * 4 + e];
      }
      AccumulateTimesTile(kernel, wrts[i] == 2 ? p : ds, wrts[i] == 2 ? now_b : now_a, lanes, acc);
      for (const Fragment& f : acc) next.insert(next.end(), f.begin(), f.end());
    }
    b.create<mlir::scf::YieldOp>(loc, next);
    emitter.RestoreCache(std::move(outer));
  }
  b.restoreInsertionPoint(after_loop);
  b.setInsertionPointAfter(loop);

  for (int64_t half = 0; half < 2; ++half) {
    mlir::OpBuilder::InsertPoint after_store = b.saveInsertionPoint();
    FusedEmitter::Cache store_cache = emitter.SaveCache();
    auto in_rows = b.create<mlir::scf::IfOp>(loc, m.Less(rows[half], m.C(own_len)), false);
    b.setInsertionPoint(in_rows.thenBlock()->getTerminator());
    for (size_t i = 0; i < wrts.size(); ++i) {
      const ir::Instruction* root = a.grads[wrts[i]];
      for (size_t out = 0; out < a.outputs.size(); ++out) {
        if (a.roots[a.chains[out].root] != root) continue;
        for (int64_t dt = 0; dt < d_tiles; ++dt) {
          for (int64_t e = 0; e < 2; ++e) {
            StoreThroughChain(
                emitter, b, loc, loop.getResult((i * d_tiles + dt) * 4 + 2 * half + e), *root,
                a.chains[out], {bi, h, rows[half], m.Add(lanes.q2, m.C(8 * dt + e))},
                kernel.entry()->getArgument(a.first_output + out), a.outputs[out]->shape().dtype());
          }
        }
      }
    }
    emitter.RestoreCache(std::move(store_cache));
    b.restoreInsertionPoint(after_store);
  }
  emitter.RestoreCache(std::move(saved));
  return tile_a.bytes() + tile_b.bytes();
}

}  // namespace gptc::codegen
