// Static instruction counts of PTX kernels, by class: what a kernel spends
// its issue slots on per tensor-core mma, read off the text without a GPU
// (`gptc inspect --kernel-stats`, docs/PERFORMANCE.md). The counts are of
// PTX statements, not of the SASS ptxas makes of them: ptxas folds address
// arithmetic into addressing modes and moves into register allocation, so the
// figures rank kernels and changes, they do not predict issue cycles.
//
// Note [counting PTX]: a statement is the text between two `;` of an entry's
// body, less directives (`.reg`, `.shared`, ...), labels and comments; a
// guarded statement (`@%p bra ...`) counts as its instruction. An mma's
// operand lists span several lines and count once. A loop is the range from
// a label to the last branch back to it (two such ranges that overlap
// without nesting are one loop: a branch inside the body); the loops
// reported are the innermost ones that hold an mma.
#ifndef GPTC_COMPILER_SUPPORT_PTX_STATS_H_
#define GPTC_COMPILER_SUPPORT_PTX_STATS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gptc {

// What an instruction does, from its opcode and type suffix.
enum class PtxClass {
  kMma,        // mma.sync, wgmma.mma_async
  kLdmatrix,   // ldmatrix
  kExp,        // ex2, lg2 (the softmax's exponentials)
  kFloat,      // f32/f64/f16/bf16 arithmetic: add, mul, fma, max, neg, rcp, ...
  kConvert,    // cvt (bf16 packing, widening, int <-> float)
  kMask,       // setp, selp, set: the predicates and selects of masks and bounds
  kInteger,    // integer arithmetic: index and address computation
  kMove,       // mov
  kLoad,       // ld (global, shared, param, generic)
  kStore,      // st
  kAsyncCopy,  // cp.async and its commit and wait
  kBarrier,    // bar, membar, fence, and wgmma's fence, commit_group and wait_group
  kShuffle,    // shfl
  kControl,    // bra, ret, call, exit
  kOther,
};
inline constexpr int kNumPtxClasses = static_cast<int>(PtxClass::kOther) + 1;

// The class's name in tables ("mma", "ldmatrix", "exp", ...).
std::string_view PtxClassName(PtxClass c);

// The class of one instruction's opcode with its suffixes ("mma.sync.aligned.
// m16n8k16.row.col.f32.bf16.bf16.f32", "add.s32", "ex2.approx.ftz.f32").
PtxClass ClassifyPtx(std::string_view opcode);

// Counts of a range of statements by class.
struct PtxCounts {
  std::array<int64_t, kNumPtxClasses> by_class{};
  // The mma statements' work in m16n8k16 products of a warp (a wgmma
  // m64nNk16: N / 8 of them, its warps' quarter of the warpgroup's).
  double mma_tiles = 0;
  int64_t total() const;
  int64_t of(PtxClass c) const { return by_class[static_cast<int>(c)]; }
  // Statements per m16n8k16 of work (per mma.sync of that shape; 8 per
  // wgmma m64n64k16), so that mma.sync and wgmma kernels compare; 0
  // without an mma.
  double PerMma() const;
};

// One `.entry` of a PTX module.
struct PtxKernelStats {
  std::string name;
  int64_t static_shared_bytes = 0;   // the sum of its `.shared` arrays
  PtxCounts whole;                   // every statement of the body
  std::vector<PtxCounts> mma_loops;  // the innermost loops holding an mma, in text order
};

// Every entry of `ptx` (one module or several concatenated, as an
// artifact's PTX section is), in text order.
std::vector<PtxKernelStats> AnalyzePtx(std::string_view ptx);

// Resident blocks per multiprocessor on an H100 (sm_90: 64K registers, 228
// KiB of shared memory with 1 KiB reserved per block, 2048 threads, 32
// blocks) for blocks of `threads` at `registers` per thread (0: unknown,
// not a limit) and `shared_bytes` per block.
int64_t BlocksPerSm(int64_t threads, int64_t registers, int64_t shared_bytes);

}  // namespace gptc

#endif  // GPTC_COMPILER_SUPPORT_PTX_STATS_H_
