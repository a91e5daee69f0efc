// Warpgroup tiles for the attention kernels (Hopper, sm_90a; --attention-mma
// wgmma): swizzled shared-memory tiles that wgmma.mma_async reads through
// descriptors the kernel builds, and the products the flash kernels are
// made of, with A in registers (q, k, v, do, p, ds as the A fragments of
// Note [mma fragments] in attention_mma.h): a block of 4 warps is one
// warpgroup, and its D of 64 x N is each warp's 16 rows as N / 8 mma D
// fragments, so the kernels' softmax and register data flow are those of the
// mma.sync kernels.
//
// Note [swizzled tiles]
// A swizzled tile of R rows x C bf16 columns lies as columns of atoms: atom
// column j holds columns j W/2 .. j W/2 + W/2 - 1 of all R rows, W bytes a
// row, W the largest of 128, 64 and 32 that divides 2 C (GPT-2's head dim
// 64: one column of 128-byte rows), and in each row the 16-byte chunk c lies
// at chunk c ^ (the row's 128-byte line within its 8-row atom, r W / 128 mod
// W / 16): the canonical layouts of the PTX ISA (Note [emulated warpgroup
// matrix operations] in runtime/emu/warpgroup_matrix.h). So neither cp.async
// writing 16 bytes a thread nor wgmma reading 8 rows at once meets a bank
// twice, and one tile serves both products of a flash kernel:
//   read K-major it is B = tile^T (N = its rows, K along its columns: s = q
//     k^T); k-step kk starts at byte (32 kk / W) R W + 32 kk % W, the next 8
//     rows SBO = 8 W further;
//   read MN-major it is B = tile (K = its rows, N = its columns: o += p v);
//     k-step kk starts at byte 16 kk W, the next 8 rows SBO = 8 W, the next
//     atom column LBO = R W further.
// The swizzle reads address bits 7 and up, so a tile starts at a multiple of
// 1024 bytes (its global's alignment) and each stage at a multiple of 8 W.
//
// Internal to compiler/codegen.
#ifndef GPTC_COMPILER_CODEGEN_ATTENTION_WGMMA_H_
#define GPTC_COMPILER_CODEGEN_ATTENTION_WGMMA_H_

#include <vector>

#include "compiler/codegen/attention_mma.h"
#include "mlir/IR/Builders.h"

namespace gptc::codegen {

// W of Note [swizzled tiles] for `cols` bf16 columns (a multiple of 16).
int64_t SwizzleBytes(int64_t cols);

// The warpgroup instructions (wgmma_asm.h), at the builder's insertion point.
void WgmmaFence(mlir::OpBuilder& b, mlir::Location loc);
void WgmmaCommit(mlir::OpBuilder& b, mlir::Location loc);
void WgmmaWait(mlir::OpBuilder& b, mlir::Location loc, int64_t pending);
// After generic-proxy stores (cp.async, st.shared) into a tile a wgmma reads
// next, before the barrier that publishes them.
void FenceProxyAsync(mlir::OpBuilder& b, mlir::Location loc);

// The accumulators of a wgmma chain in flight (N / 2 f32 a thread): until
// the register fence of CompleteWgmma after a wait, nothing else may read
// them (Note [wgmma registers] in wgmma_asm.h).
struct WgmmaAccumulators {
  std::vector<mlir::Value> regs;
};

// Issues acc + sum_kk a[kk] B_kk as a chain of wgmma (after a WgmmaFence;
// the caller commits): B = tile^T (`transposed`: N = the tile's rows, K its
// columns) or the tile (K = its rows, N = its columns); `acc` holds N / 8
// fragments, or none for zeros.
WgmmaAccumulators IssueWgmma(WarpRowKernel& kernel, const std::vector<Fragment>& a,
                             const SharedTile& tile, bool transposed,
                             const std::vector<Fragment>& acc);

// After the wait that retires them: the accumulators through the register
// fence, as N / 8 fragments.
std::vector<Fragment> CompleteWgmma(mlir::OpBuilder& b, mlir::Location loc,
                                    const std::vector<WgmmaAccumulators>& chains);

// A product in one go: fence, IssueWgmma, commit, wait, register fence.
std::vector<Fragment> WgmmaProduct(WarpRowKernel& kernel, const std::vector<Fragment>& a,
                                   const SharedTile& tile, bool transposed,
                                   const std::vector<Fragment>& acc);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_ATTENTION_WGMMA_H_
