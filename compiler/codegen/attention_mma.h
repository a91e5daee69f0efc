// Tensor-core tiles for the attention kernels: bf16 tiles in shared memory,
// ldmatrix, mma.sync m16n8k16 (bf16 x bf16 -> f32) and the fragment layouts
// that tie them together (nvvm.ldmatrix, and the mma intrinsic through
// llvm.call_intrinsic: no inline PTX), the warp-level products the kernels
// are made of, and the forward kernel; the backward's are in
// attention_backward_mma.cc.
//
// Note [mma fragments] (PTX ISA, "Matrix Fragments for mma.m16n8k16"): in
// every fragment lane l is thread q = l % 4 of group g = l / 4.
//   A (16 x 16, row): 4 b32 of two bf16 each (the lower half first):
//     a0 = A[g][2q, 2q+1]   a1 = A[g+8][2q, 2q+1]
//     a2 = A[g][2q+8, +9]   a3 = A[g+8][2q+8, +9]
//   B (16 x 8, k x n, col): b0 = B[2q, 2q+1][g]   b1 = B[2q+8, +9][g]
//   C, D (16 x 8, f32): c0, c1 = C[g][2q, 2q+1]   c2, c3 = C[g+8][2q, 2q+1]
// So the f32 results of two neighbouring n-tiles (columns 0-7 and 8-15) are,
// packed to bf16 pairwise, exactly the A fragment of their 16 columns: the
// probabilities leave one mma as the next one's A without shared memory.
// ldmatrix.x4 of four 8 x 8 bf16 matrices whose rows lanes 8m..8m+7 address
// gives lane l row l/4, columns 2(l%4), +1 of each (.trans: column l/4, rows
// 2(l%4), +1). For a tile X stored row-major (rows = keys, columns = head
// dim):
//   B = X^T (k = head dim, n = keys), as in q k^T: ldmatrix.x4 with lane
//     rows n0 + (l % 8) + 8 (l / 16), columns k0 + 8 ((l / 8) % 2) gives
//     b0, b1 of n-tile n0 then of n-tile n0 + 8;
//   B = X (k = keys, n = head dim), as in p v: ldmatrix.x4.trans with lane
//     rows k0 + (l % 16), columns n0 + 8 (l / 16) gives b0, b1 of n-tile n0
//     then of n-tile n0 + 8.
// The emulator runs the same ops from the same tables (runtime/emu/
// warp_matrix.h), so a wrong index here fails the emulator tests.
//
// Internal to compiler/codegen.
#ifndef GPTC_COMPILER_CODEGEN_ATTENTION_MMA_H_
#define GPTC_COMPILER_CODEGEN_ATTENTION_MMA_H_

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "compiler/codegen/attention_plan.h"
#include "compiler/codegen/attention_util.h"
#include "compiler/ir/computation.h"
#include "compiler/support/status.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"

namespace gptc::codegen {

using Fragment = std::array<mlir::Value, 4>;  // an A, C or D fragment (or two B)

// A bf16 tile of rows x cols in the block's shared memory (a static
// addrspace-3 global of the GPU module), each row padded by 8 elements so the
// 8 rows one ldmatrix matrix reads start in different banks and stay 16-byte
// aligned.
class SharedTile {
 public:
  // Adds the global `name` to `gpu_module`; `b` must be inside the kernel,
  // where the tile's base address is taken.
  // With `stages` > 1 the global holds that many tiles of the shape, one
  // after the other (Note [pipelined tile fill]); this object is stage 0.
  SharedTile(mlir::OpBuilder& b, mlir::gpu::GPUModuleOp gpu_module, const std::string& name,
             int64_t rows, int64_t cols, int64_t stages = 1);

  int64_t stride() const { return cols_ + 8; }
  // The shared memory of all stages.
  int64_t bytes() const { return stages_ * rows_ * stride() * 2; }
  // Stage `stage` (an integer value below `stages`): the same tile shape,
  // its own rows.
  SharedTile Stage(mlir::OpBuilder& b, mlir::Location loc, mlir::Value stage) const;
  // The address of element [row][col] (integer values of one type).
  mlir::Value Address(mlir::OpBuilder& b, mlir::Location loc, mlir::Value row, mlir::Value col);
  // Stores f32 `value` rounded to bf16 at [row][col].
  void Store(mlir::OpBuilder& b, mlir::Location loc, mlir::Value row, mlir::Value col,
             mlir::Value value);

 private:
  int64_t rows_, cols_, stages_;
  mlir::Value base_;  // !llvm.ptr<3>
};

// Two f32 rounded to bf16 and packed into one b32 (`lo` in the lower half).
mlir::Value PackBf16(mlir::OpBuilder& b, mlir::Location loc, mlir::Value lo, mlir::Value hi);

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 at this lane's row address.
Fragment LdMatrixX4(mlir::OpBuilder& b, mlir::Location loc, mlir::Value row_address, bool trans);

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: a * (b0, b1) + c.
Fragment Mma(mlir::OpBuilder& b, mlir::Location loc, const Fragment& a, mlir::Value b0,
             mlir::Value b1, const Fragment& c);

// Rows of a tile, and of the rows a block of 4 warps owns (16 a warp).
inline constexpr int64_t kTileRows = 64;

// Shorthands for the unsigned index arithmetic and the f32 math of the
// tensor-core kernels, built at the kernel's insertion point.
class TileMath {
 public:
  explicit TileMath(WarpRowKernel& kernel) : kernel_(kernel) {}
  mlir::Value C(int64_t v) const { return kernel_.C(v); }
  mlir::Value F32(double v) const { return kernel_.F32(v); }
  mlir::Value Add(mlir::Value x, mlir::Value y) const;
  mlir::Value Mul(mlir::Value x, int64_t y) const;
  mlir::Value Div(mlir::Value x, int64_t y) const;
  mlir::Value Rem(mlir::Value x, int64_t y) const;
  mlir::Value Min(mlir::Value x, int64_t y) const;
  mlir::Value Less(mlir::Value x, mlir::Value y) const;
  mlir::Value FAdd(mlir::Value x, mlir::Value y) const;
  mlir::Value FSub(mlir::Value x, mlir::Value y) const;
  mlir::Value FMul(mlir::Value x, mlir::Value y) const;
  mlir::Value FMax(mlir::Value x, mlir::Value y) const;
  mlir::Value Exp(mlir::Value x) const;

 private:
  WarpRowKernel& kernel_;
};

// A lane's constants for the fragments and ldmatrix addresses of Note [mma
// fragments].
struct WarpLanes {
  mlir::Value lane, tid;       // tid: the thread in the block
  mlir::Value group, q2;       // l / 4 and 2 (l % 4)
  mlir::Value xt_row, xt_col;  // ldmatrix.x4 rows, columns for B = X^T
  mlir::Value x_row, x_col;    // ldmatrix.x4.trans rows, columns for B = X
};
WarpLanes LanesOf(WarpRowKernel& kernel, mlir::Value lane, mlir::Value warp);

// The A fragments (dim / 16 of them) of 16 rows of `op` ([B, H, len, dim],
// read through the fusion's chains): row_lo is this lane's row (group), row_hi
// the one 8 below it, both already clamped into the operand.
StatusOr<std::vector<Fragment>> LoadRowFragments(WarpRowKernel& kernel, const ir::Instruction& op,
                                                 mlir::Value bi, mlir::Value h, mlir::Value row_lo,
                                                 mlir::Value row_hi, int64_t dim,
                                                 const WarpLanes& lanes);

// Between two barriers, the block stages rows block * 64 .. + 63 of each op
// ([B, H, len, dim]) into its tile, rounded to bf16; rows past len are zeros.
Status FillTiles(WarpRowKernel& kernel, const WarpLanes& lanes, mlir::Value bi, mlir::Value h,
                 mlir::Value block, int64_t len, int64_t dim,
                 const std::vector<std::pair<const ir::Instruction*, SharedTile*>>& tiles);

// Note [pipelined tile fill]: when every operand of a tile loop is a bf16
// parameter whose rows a tile copies 16 bytes at a time (Note [vector tile
// fill]) and the rows come in whole tiles, the copies go out as cp.async
// (global to shared, no registers): the block issues block kb + 1's copies
// into the other stage of two-stage tiles right after the barrier that opens
// block kb, and computes on block kb while they travel. One barrier a block
// then does both jobs: every warp is done with the stage the next copies
// overwrite, and every thread's copies of this block have landed (each
// thread waits for its own with cp.async.wait_group 0 before it). On an H100
// this took the gpt2-124m forward from 223 to 210 us a call, at 151
// registers (three blocks a multiprocessor instead of four).
bool CanPipelineTiles(const std::vector<const ir::Instruction*>& ops, int64_t len, int64_t dim);

// Issues this thread's cp.async copies of rows block * 64 .. + 63 of each op
// into stage block % 2 of its two-stage tile, and commits them as one group
// (also when `when`, if given, is false and nothing is copied: the groups
// stay one a block). The loop's first block, before the loop.
void IssueTileCopies(WarpRowKernel& kernel, const WarpLanes& lanes, mlir::Value bi, mlir::Value h,
                     mlir::Value block, int64_t len, int64_t dim,
                     const std::vector<std::pair<const ir::Instruction*, SharedTile*>>& tiles,
                     mlir::Value when = {});

// Opens block `block` of the loop: waits for this thread's copies of it,
// the block's barrier, then issues block + 1's (when below `end`). Returns
// the stage holding block `block` of each tile, in order.
std::vector<SharedTile> AwaitTileCopies(
    WarpRowKernel& kernel, const WarpLanes& lanes, mlir::Value bi, mlir::Value h,
    mlir::Value block, mlir::Value end, int64_t len, int64_t dim,
    const std::vector<std::pair<const ir::Instruction*, SharedTile*>>& tiles);

// a (16 x dim, A fragments) times tile^T (dim x 64): 8 f32 fragments (16 x 8).
std::vector<Fragment> TimesTileTransposed(WarpRowKernel& kernel, const std::vector<Fragment>& a,
                                          SharedTile& tile, const WarpLanes& lanes);

// acc (16 x dim, dim / 8 f32 fragments) += x (16 x 64: 8 f32 fragments,
// rounded to bf16 as A fragments) times tile (64 x dim).
void AccumulateTimesTile(WarpRowKernel& kernel, const std::vector<Fragment>& x, SharedTile& tile,
                         const WarpLanes& lanes, std::vector<Fragment>& acc);

struct TensorCoreForward {
  int64_t shared_bytes = 0;  // static shared memory of the kernel
  mlir::Value thread;        // bid * block + tid, for the grid-stride loops after it
};

// The forward on tensor cores (Note [tensor-core attention forward] in
// attention_mma.cc), in `kernel` (a WarpRowKernel of len 4 * ceil(tq / 64):
// one "row" per warp).
StatusOr<TensorCoreForward> EmitTensorCoreForward(WarpRowKernel& kernel,
                                                  mlir::gpu::GPUModuleOp gpu_module,
                                                  const std::string& name,
                                                  const AttentionForward& a);

// The dq kernel, or the dk + dv kernel, on tensor cores (Note [tensor-core
// attention backward] in attention_backward_mma.cc), in `kernel` (a
// WarpRowKernel of len 4 * ceil(rows / 64) for the query or key rows).
// Returns the static shared memory it uses.
StatusOr<int64_t> EmitTensorCoreBackward(WarpRowKernel& kernel, mlir::gpu::GPUModuleOp gpu_module,
                                         const std::string& name, const AttentionBackward& a);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_ATTENTION_MMA_H_
