// Helpers shared by the attention emitters (forward, backward): the kernel of
// one warp per row, outputs that leave it through layout chains
// (OutputChain, attention_plan.h), warp sums.
#ifndef GPTC_COMPILER_CODEGEN_ATTENTION_UTIL_H_
#define GPTC_COMPILER_CODEGEN_ATTENTION_UTIL_H_

#include <optional>
#include <string>
#include <vector>

#include "compiler/codegen/affine_layout.h"
#include "compiler/codegen/attention_plan.h"
#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"
#include "compiler/ir/computation.h"
#include "compiler/support/status.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"

namespace gptc::codegen {

// A kernel of one warp per row (b, h, r) of a [B, H, len] row space, as both
// attention emitters are: kWarpsPerBlock warps a block, parameters read by
// element through the FusedEmitter, 32-bit indices unless some value of the
// fusion needs 64.
class WarpRowKernel : public FusedKernelBuilder {
 public:
  static constexpr int64_t kWarp = 32;
  static constexpr int64_t kWarpsPerBlock = 4;
  static constexpr int64_t kBlock = kWarp * kWarpsPerBlock;

  // This thread's row and its lanes' head-dim elements d[i] = lane + 32 i,
  // clamped to dim - 1 where in_dim[i] (then set) is false.
  struct Row {
    mlir::Value thread;  // bid * block + tid: valid after the rows too (grid-stride loops)
    mlir::Value lane, b, h, r;
    std::vector<mlir::Value> d, in_dim;
  };

  // Adds kernel `name` with `num_params` arguments to `gpu_module`; `what`
  // names the kernel in the FusedEmitter's errors.
  WarpRowKernel(const ir::Computation& fused, int64_t num_params, int64_t batch, int64_t heads,
                int64_t len, const std::string& name, mlir::gpu::GPUModuleOp gpu_module,
                std::string what);

  // Emits the row of this thread for head dim `dim`, and leaves the builder
  // inside `if (row < rows)` when the last block is partial (whole warps take
  // the same branch); `after_rows` gets the insertion point after that if.
  Row BeginRow(int64_t dim, mlir::OpBuilder::InsertPoint* after_rows = nullptr);

  // Note [longest-first tiles]: the order in which a tensor-core kernel's
  // blocks take the (b, h, tile) of its [B, H, tiles] space of 64-row tiles.
  enum class TileOrder {
    kHeadMajor,      // head by head, tiles ascending
    kLastTileFirst,  // in groups of heads, the last tile of every head first
    kFirstTileFirst  // in groups of heads, the first tile of every head first
  };
  struct TileRow {
    mlir::Value thread;  // bid * block + tid
    mlir::Value lane, warp, b, h, tile;
  };
  // The block's tile (one per block of kWarpsPerBlock warps; the kernel's
  // `len` must be kWarpsPerBlock * tiles) and this thread's warp and lane.
  TileRow BeginTileRow(TileOrder order, int64_t group_heads);

  mlir::OpBuilder& b() { return b_; }
  mlir::Location loc() const { return loc_; }
  mlir::Block* entry() const { return entry_; }
  FusedEmitter& emitter() { return emitter_; }
  int64_t grid() const { return grid_; }
  mlir::Value C(int64_t v) { return emitter_.IndexConstant(v); }
  mlir::Value F32(double v);
  // The f32 value of `op` (a value of the fusion) at `multi`.
  StatusOr<mlir::Value> LoadF32(const ir::Instruction& op, std::vector<mlir::Value> multi);

 private:
  int64_t heads_, len_, rows_, grid_;
};

// Stores `value` (f32), the element [multi] of `root`, where `chain` maps it
// in output `ptr` (of dtype `out_dtype`), converting along the chain.
void StoreThroughChain(FusedEmitter& emitter, mlir::OpBuilder& b, mlir::Location loc,
                       mlir::Value value, const ir::Instruction& root, const OutputChain& chain,
                       std::vector<mlir::Value> multi, mlir::Value ptr, ir::DType out_dtype);

// Note [paired stores]: a lane's accumulator fragments hold neighbouring
// elements d, d + 1 (d even) of a row. Where the output chain stores the row
// contiguously (an AffineLayout with d of stride 1 and every other stride
// and the offset even, so that pairs stay aligned) the pair goes out as one
// 8-byte f32 store or one 4-byte bf16 store (cvt.rn.bf16x2), its offset an
// affine sum instead of the chain's index arithmetic per element. The pair
// form of `chain`, or nullopt: chains of transposes and reshapes with at
// most one f32 -> bf16 convert, from an f32 root (and at most one pad at the
// end: a packed output's piece).
struct PairStore {
  AffineLayout layout;
  bool bf16 = false;  // else f32
};
std::optional<PairStore> PairStoreOf(const ir::Instruction& root, const OutputChain& chain);

// Stores f32 `lo`, `hi`: the elements [multi] and [multi] + 1 in the last
// dim of the root of `pair`, into output `ptr`.
void StorePair(mlir::OpBuilder& b, mlir::Location loc, const PairStore& pair, mlir::Value lo,
               mlir::Value hi, const std::vector<mlir::Value>& multi, mlir::Value ptr);

// f32 `x` rounded to `dtype` and widened back to f32: how the attention
// kernels feed a matmul operand of that dtype (Note [bf16 attention]). x
// itself when dtype is f32.
mlir::Value RoundThrough(mlir::OpBuilder& b, mlir::Location loc, mlir::Value x, ir::DType dtype);

// The sum of `v` over the 32 lanes of a warp, in every lane (butterfly).
mlir::Value WarpSum(mlir::OpBuilder& b, mlir::Location loc, mlir::Value v);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_ATTENTION_UTIL_H_
