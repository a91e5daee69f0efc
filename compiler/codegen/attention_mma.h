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
#include <functional>
#include <optional>
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
// addrspace-3 global of the GPU module), in one of two layouts:
//   kPadded: each row padded by 8 elements, so the 8 rows one ldmatrix
//     matrix reads start in different banks and stay 16-byte aligned;
//   kSwizzled: Note [swizzled tiles] (attention_wgmma.h), the canonical
//     layout wgmma reads through a descriptor.
enum class TileLayout { kPadded, kSwizzled };

class SharedTile {
 public:
  // Adds the global `name` to `gpu_module`; `b` must be inside the kernel,
  // where the tile's base address is taken.
  // With `stages` > 1 the global holds that many tiles of the shape, one
  // after the other (Note [pipelined tile fill]); this object is stage 0.
  SharedTile(mlir::OpBuilder& b, mlir::gpu::GPUModuleOp gpu_module, const std::string& name,
             int64_t rows, int64_t cols, int64_t stages = 1,
             TileLayout layout = TileLayout::kPadded);

  TileLayout layout() const { return layout_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // Elements from a row to the next in the same columns (kPadded: cols + 8;
  // kSwizzled: within an 8-row atom, its row bytes / 2).
  int64_t stride() const;
  // kSwizzled: the bytes of an atom row (32, 64 or 128).
  int64_t swizzle_bytes() const;
  // The shared memory of all stages.
  int64_t bytes() const;
  // Stage `stage` (an integer value below `stages`): the same tile shape,
  // its own rows.
  SharedTile Stage(mlir::OpBuilder& b, mlir::Location loc, mlir::Value stage) const;
  // The tile seen from element `elements` (an integer value) on: a lane's
  // part of an ldmatrix address added once, so that the addresses below
  // differ from it by constants (the immediate offsets of ld/ldmatrix).
  // kSwizzled: only AddressAt(0, 0) of such a view is the element's.
  SharedTile Offset(mlir::OpBuilder& b, mlir::Location loc, mlir::Value elements) const;
  // The address of element [row][col] (constants, from the offset; kPadded).
  mlir::Value AddressAt(mlir::OpBuilder& b, mlir::Location loc, int64_t row, int64_t col) const;
  // The element offset of [row][col] from the tile's start, and its address
  // (integer values of one type).
  mlir::Value Index(mlir::OpBuilder& b, mlir::Location loc, mlir::Value row, mlir::Value col) const;
  mlir::Value Address(mlir::OpBuilder& b, mlir::Location loc, mlir::Value row,
                      mlir::Value col) const;
  // Stores f32 `value` rounded to bf16 at [row][col].
  void Store(mlir::OpBuilder& b, mlir::Location loc, mlir::Value row, mlir::Value col,
             mlir::Value value) const;
  mlir::Value base() const { return base_; }  // !llvm.ptr<3>

 private:
  int64_t rows_, cols_, stages_;
  TileLayout layout_;
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
inline constexpr int64_t kColumnTiles = kTileRows / 8;  // n-tiles of a 64-row block

// Note [exp2 softmax]: exp(scale * s - m) is computed as ex2(fma(s, scale *
// log2(e), -m * log2(e))): one FMA and one ex2.approx.ftz per score, where
// libdevice's accurate expf of a separately scaled score took a multiply, a
// subtraction and about ten instructions. The approximation's relative
// error (2^-22) is far below the bf16 rounding of p that follows. (kLog2E:
// fused_emitter.h.)

// Shorthands for the unsigned index arithmetic and the f32 math of the
// tensor-core kernels, built at the kernel's insertion point.
class TileMath {
 public:
  explicit TileMath(WarpRowKernel& kernel) : kernel_(kernel) {}
  mlir::Value C(int64_t v) const { return kernel_.C(v); }
  mlir::Value F32(double v) const { return kernel_.F32(v); }
  mlir::Value Add(mlir::Value x, mlir::Value y) const;
  mlir::Value Sub(mlir::Value x, mlir::Value y) const;
  mlir::Value Mul(mlir::Value x, int64_t y) const;
  mlir::Value Div(mlir::Value x, int64_t y) const;
  mlir::Value Rem(mlir::Value x, int64_t y) const;
  mlir::Value Min(mlir::Value x, int64_t y) const;
  mlir::Value Min(mlir::Value x, mlir::Value y) const;
  mlir::Value Less(mlir::Value x, mlir::Value y) const;
  mlir::Value And(mlir::Value x, mlir::Value y) const;
  mlir::Value Or(mlir::Value x, mlir::Value y) const;
  mlir::Value Select(mlir::Value c, mlir::Value x, mlir::Value y) const;
  mlir::Value FAdd(mlir::Value x, mlir::Value y) const;
  mlir::Value FSub(mlir::Value x, mlir::Value y) const;
  mlir::Value FMul(mlir::Value x, mlir::Value y) const;
  mlir::Value FMax(mlir::Value x, mlir::Value y) const;
  mlir::Value FEq(mlir::Value x, mlir::Value y) const;
  // x * y + z rounded once (fma.rn.f32).
  mlir::Value Fma(mlir::Value x, mlir::Value y, mlir::Value z) const;
  // 2^x and log2 x (ex2.approx.ftz.f32, lg2.approx.ftz.f32: Note [exp2 softmax]).
  mlir::Value Exp2(mlir::Value x) const;
  mlir::Value Log2(mlir::Value x) const;
  // The sum or maximum of `values`, as a balanced tree (short dependency chains).
  mlir::Value Sum(std::vector<mlir::Value> values) const;
  mlir::Value Max(std::vector<mlir::Value> values) const;
  // `v` combined over the 4 lanes of a fragment row (shuffles xor 1, 2).
  mlir::Value RowMax(mlir::Value v) const;
  mlir::Value RowSum(mlir::Value v) const;

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

// Note [strided operands]: the bf16 parameter whose elements an attention
// operand ([B, H, len, dim]) reads, with d contiguous: element (b, h, t, d)
// at offset + b * batch_pitch + h * head_pitch + t * row_pitch + d. The
// operand itself, or a transpose of the [B, len, H, dim] (or [B, len, H*dim])
// parameter with the heads interleaved in its rows (do out of the dx gemm),
// possibly widened (the forward's q, k, v: Note [rounded attention operands]
// in passes/fusion_planner.h): the kernels read its rows 16 bytes at a time
// (tiles) or 4 (fragments), with no chain and no rounding.
struct VectorSource {
  const ir::Instruction* param = nullptr;
  int64_t batch_pitch = 0, head_pitch = 0, row_pitch = 0, offset = 0;
};
std::optional<VectorSource> VectorSourceOf(const ir::Instruction& op, int64_t len, int64_t dim);

// The A fragments (dim / 16 of them) of 16 rows of `op` ([B, H, len, dim]):
// row_lo is this lane's row (group), row_hi the one 8 below it, both already
// clamped into the operand. 4-byte loads of a VectorSource, else each element
// through the fusion's chains.
StatusOr<std::vector<Fragment>> LoadRowFragments(WarpRowKernel& kernel, const ir::Instruction& op,
                                                 mlir::Value bi, mlir::Value h, mlir::Value row_lo,
                                                 mlir::Value row_hi, int64_t dim,
                                                 const WarpLanes& lanes);

// Between two barriers, the block stages rows block * 64 .. + 63 of each op
// ([B, H, len, dim]) into its tile, rounded to bf16; rows past len are zeros.
Status FillTiles(WarpRowKernel& kernel, const WarpLanes& lanes, mlir::Value bi, mlir::Value h,
                 mlir::Value block, int64_t len, int64_t dim,
                 const std::vector<std::pair<const ir::Instruction*, SharedTile*>>& tiles);

// Note [pipelined tile fill]: when every operand of a tile loop is a
// VectorSource (Note [strided operands]) and the rows come in whole tiles,
// the copies go out as cp.async (global to shared, no registers): the block
// issues block kb + 1's copies into the other stage of two-stage tiles right
// after the barrier that opens block kb, and computes on block kb while
// they travel. One barrier a block then does both jobs: every warp is done
// with the stage the next copies overwrite, and every thread's copies of
// this block have landed (each thread waits for its own with
// cp.async.wait_group 0 before it). A thread's pieces and their addresses
// are computed once, before the loop: a block moves each global address by
// a constant multiple of the block index. On an H100 the pipelined forward
// beat the synchronous fill (docs/PERFORMANCE.md, the Notes' measurements).
bool CanPipelineTiles(const std::vector<const ir::Instruction*>& ops, int64_t len, int64_t dim);

class TilePipeline {
 public:
  // Before the loop (CanPipelineTiles of the tiles' ops): this thread's
  // 16-byte pieces of each tile, their shared offsets and the global
  // addresses of block 0.
  TilePipeline(WarpRowKernel& kernel, const WarpLanes& lanes, mlir::Value bi, mlir::Value h,
               int64_t len, int64_t dim,
               const std::vector<std::pair<const ir::Instruction*, SharedTile*>>& tiles);
  // Issues this thread's copies of block `block` into stage block % 2 and
  // commits them as one group (also when `when`, if given, is false and
  // nothing is copied: the groups stay one a block). The loop's first block,
  // before the loop.
  void Issue(mlir::Value block, mlir::Value when = {});
  // Opens block `block` of the loop: waits for this thread's copies of it,
  // the block's barrier, then issues block + 1's (when below `end`).
  // Returns the stage holding block `block` of each tile, in order.
  std::vector<SharedTile> Await(mlir::Value block, mlir::Value end);

  // The parts of Issue and Await, for tiles that run ahead of others (Note
  // [overlapped wgmma forward] in attention_forward_mma.cc): this thread's
  // copies of block `block` of tile `tile` into its stage block % 2 (when
  // `when` holds), not committed; the commit of a group; the wait for this
  // thread's groups and the barrier that publishes every thread's; the stage
  // of tile `tile` holding block `block`.
  void Copy(size_t tile, mlir::Value block, mlir::Value when = {});
  void Commit();
  void Wait();
  SharedTile StageOf(size_t tile, mlir::Value block) const;

 private:
  struct Piece {
    size_t tile;
    mlir::Value shared;   // element offset in the stage
    mlir::Value global;   // !llvm.ptr<1> of block 0
    int64_t block_pitch;  // elements between blocks
  };
  WarpRowKernel& kernel_;
  std::vector<SharedTile*> tiles_;
  std::vector<Piece> pieces_;
};

// a (16 x dim, A fragments) times tile^T (dim x 64): 8 f32 fragments (16 x 8).
std::vector<Fragment> TimesTileTransposed(WarpRowKernel& kernel, const std::vector<Fragment>& a,
                                          const SharedTile& tile, const WarpLanes& lanes);

// The f32 results of n-tiles 2 kk and 2 kk + 1 (16 x 16 columns), rounded to
// bf16 and packed as the A fragment of columns 16 kk .. + 15 (Note [mma
// fragments]): 8 fragments in, 4 out.
std::vector<Fragment> PackA(mlir::OpBuilder& b, mlir::Location loc, const std::vector<Fragment>& x);

// acc (16 x dim, dim / 8 f32 fragments) += a (16 x 64: 4 packed A
// fragments, PackA) times tile (64 x dim).
void AccumulateTimesTile(WarpRowKernel& kernel, const std::vector<Fragment>& a,
                         const SharedTile& tile, const WarpLanes& lanes,
                         std::vector<Fragment>& acc);

// Note [diagonal masks]: a 64 x 64 block of scores needs its mask (causal:
// key > query; keys past their length; queries past theirs in the
// backward) only where the block crosses the diagonal or a length. The
// kernels test that once a block, a uniform branch, and the other blocks
// run the softmax without comparisons or selects: at T = 1024 that is 15
// of every 16 blocks of a row of tiles.
//
// Whether the block of query rows [q0, q0 + 64) and key rows [k0, k0 + 64)
// (index values) needs a mask: causal and k0 + 63 > q0, or a key row past
// tk, or a query row past tq (a length of 0, or a multiple of 64, is never
// passed: a kernel's own rows past their length are not stored and need no
// mask). A null value: no block of the kernel does.
mlir::Value BlockNeedsMask(const TileMath& m, mlir::Value q0, mlir::Value k0, bool causal,
                           int64_t tq, int64_t tk);
// `x` (a block's 8 f32 fragments) with each element (n-tile nt, element e)
// whose `visible(nt, e)` is false set to `fill`, when `needs_mask` holds: a
// uniform branch of selects (the fragments as they are otherwise); a null
// `visible` value: the element is always visible.
std::vector<Fragment> MaskInBranch(WarpRowKernel& kernel, mlir::Value needs_mask,
                                   std::vector<Fragment> x,
                                   const std::function<mlir::Value(int64_t nt, int64_t e)>& visible,
                                   mlir::Value fill);

// Whether key `key` is visible to query `query` in a masked block: at most
// query when causal, below tk, and query below tq (lengths as above; the
// dk + dv kernel's zero query rows past T would otherwise count). A null
// value: every key is.
mlir::Value KeyVisible(const TileMath& m, mlir::Value query, mlir::Value key, bool causal,
                       int64_t tq, int64_t tk);

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
