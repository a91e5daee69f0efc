// The analysis half of the column-reduction emitter
// (column_reduction_emitter.cc builds the MLIR from it): which reduces, the
// block's shape, the grid, the batches, the shared-memory and scratch layouts
// of one kernel of a column reduction, decided without MLIR so that tests can
// check them (STYLE 17).
//
// Note [column reduction]: every reduce collapses its input to [R, K] (R: the
// product of the reduced leading dims, K: of the kept trailing dims; K == 1
// for a full reduction); all reduces of a fusion share K (their R may
// differ: the grad-norm fusion reduces every gradient to a scalar). A block
// of TX x TY threads owns a tile of TX consecutive columns (TX = 32, or K
// when K < 32); thread (tx, ty) accumulates rows ty, ty + TY, ... of column
// tile * TX + tx in f32, so a warp reads 32 consecutive elements of a row
// (coalesced; with K == 1 consecutive threads read consecutive elements).
// The TY partials of a column meet in shared memory through a fixed binary
// tree (TY is a power of two): the result is bit-deterministic, without
// atomics. Reduces run in batches (Note [column reduction batches]); after a
// batch its column totals are in shared memory, so later batches and the
// outputs can use them.
// Outputs (shaped like the kept dims) are written by the ty == 0 threads.
//
// Note [column reduction batches]: a batch is up to 48 KiB / (4 * block)
// mutually independent reduces, whatever their input dims; those over the
// same dims share one loop, the others get a loop each, and the batch shares
// one shared-memory tree. The grad-norm fusion of gpt2-124m (148 reduces of
// 16 shapes, interleaved) once made a batch per reduce: 148 trees of 10
// levels, 1,600 barriers, and 12 s of LLVM time for one kernel.
//
// Note [column totals in shared memory]: a batch's totals are kept in shared
// memory (one float per reduce and column of the tile) and loaded where they
// are used, not held in registers: the grad-norm fusion has a total per
// gradient (148 at gpt2-124m), all live until its final sum, which spilled.
//
// Note [split column reductions]: the whole kernel has
// ceil(K / TX) blocks: one block of 1024 threads for a full reduction (the
// grad norm of gpt2-124m: one SM of 132 reading 0.5 GB), 24 for the
// layer-norm gain and bias gradients of gpt2-124m (K = 768 columns, R = 16 x
// 1024 rows: 24 of 132 SMs reading 100 MB). A column reduction whose reduces
// are independent of each other's totals and whose rows are many is instead
// split into G row chunks (ColumnReductionChunks) and runs as two kernels of
// one ABI plus a scratch argument (Note [kernel ABI]:
// KernelParam::Role::kScratch, a slice the plan reserves past the arena's
// buffers):
//   NAME_partials: tiles x G blocks of kPartialsBlock threads; block
//     (tile, g) = (b % tiles, b / tiles) reduces rows g * TY + ty stepping
//     G * TY of its tile's columns for every reduce, and stores the chunk's
//     column totals to scratch[(reduce * G + g) * K + column];
//   NAME: the whole kernel's grid, each thread reducing its column's G
//     partials (ty, ty + TY, ...) through the same tree, in a fixed order,
//     then writing the outputs as the whole kernel would.
// No atomics: the result is deterministic (it differs from the whole
// kernel's only by summation order). A mixed row/column fusion (Note [mixed
// row and column reductions] in codegen.h) splits its column part alike:
// NAME_rows, NAME_partials, NAME; the partials kernel writes only scratch.
// A gemm's bias-gradient fallback kernel (Note [epilogue fallback]
// in compiler/program/plan.h) stays whole: the runtime runs one kernel in place of
// the epilogue.
// Full reductions (K == 1) split by members instead (Note [member
// partials]).
// When it pays (measured in Note [when a column reduction splits] in
// column_reduction_plan.cc): when the whole kernel would have at most 66
// blocks (half an H100's 132 SMs) and loop over at least 128 rows a thread;
// then G = min(1024, ceil(R / (TY * 32)), ceil(1056 / tiles)): at least 32
// rows a partials thread, and about one full wave of 256-thread blocks (8 on
// each of 132 SMs). The layer-norm gain and bias gradients of gpt2-124m at
// batch 16 x 1024: 24 blocks whole, 1056 partials blocks (G = 44).
//
// Note [member partials]: a split column reduction of full reductions (K ==
// 1, not mixed; the grad norm: one sum of squares per parameter gradient)
// gives each block of the partials kernel one member's elements, not a
// slice of every reduce. The G-chunk layout above puts a tree for every
// reduce of a batch in every block, so its shared memory and code grow with
// the number of reduces: at gpt2-124m's 148 it takes 47.6 KiB of shared
// memory, one block fits on an SM, and the kernel waits on latency instead
// of streaming. Here the reduces are members, in classes as the loop
// kernel's (Note [member classes] in loop_plan.h): reduces whose cones are
// equal up to which parameters they read share one loop of the code, so the
// code grows with the number of gradient shapes, not of gradients. Class c
// owns M_c x B_c blocks from first_block; its block b reduces member
// m = b / B_c, whose buffers it selects at its top, in a grid-stride loop
// over m's B_c blocks, `width` elements a step (Note [loop vectorisation] in
// loop_emitter.cc), lane by lane into one f32 accumulator a thread; then a
// butterfly of shuffles in each warp, the warps' sums added in order by
// thread 0, and one store: scratch[first_block + m * B_c + j] for m's j-th
// block, so a member's partials are consecutive. The final kernel (one
// block) gives member g (numbered across the classes in order) to warp
// g % warps: its lanes add g's partials (lane, lane + 32, ...) and a
// butterfly totals them into shared memory; then the outputs, as in the
// whole kernel. Every sum is in a fixed order, without atomics: the result
// is bit-identical from run to run. B_c = max(1, min(kMaxClassBlocks / M_c,
// ceil(iterations / (block x kVectorsPerThread)))): as in the loop kernel, a
// class alone can fill the GPU, and a thread streams a few vectors at least.
// It splits when the reduces' elements together (not the largest reduce's
// alone) give the whole kernel's 1024 threads 128 each, since every block
// of the split reads one member.
#ifndef GPTC_COMPILER_CODEGEN_COLUMN_REDUCTION_PLAN_H_
#define GPTC_COMPILER_CODEGEN_COLUMN_REDUCTION_PLAN_H_

#include <cstdint>
#include <map>
#include <vector>

#include "compiler/ir/instruction.h"
#include "compiler/support/status.h"

namespace gptc::codegen {

// Which kernel of a column reduction (Note [split column reductions]).
enum class ColumnPart { kWhole, kPartials, kFinal };

// Note [member partials]: one reduce and the parameters its cone reads, in
// the order of its class's canonical form (position k means the same in
// every member).
struct ReduceMember {
  const ir::Instruction* reduce = nullptr;
  std::vector<const ir::Instruction*> params;
};

struct ReduceClass {
  std::vector<ReduceMember> members;  // members[0] is the one whose code is emitted
  int64_t elements = 0;               // of each member's input
  int64_t width = 1;                  // elements a vector load
  int64_t first_block = 0;            // in the partials kernel; also its first partial
  int64_t blocks_per_member = 1;      // B_c: each member's partials
  int64_t first_member = 0;           // its members' numbers across the classes
  int64_t iterations() const { return elements / width; }
  int64_t blocks() const { return static_cast<int64_t>(members.size()) * blocks_per_member; }
};

struct ColumnReductionPlan {
  ColumnPart part = ColumnPart::kWhole;
  // The column part of a mixed row/column fusion: row reduces and the
  // outputs of the row part are the row kernel's.
  bool mixed = false;
  std::vector<const ir::Instruction*> reduces;  // the column reduces, in fusion order
  std::vector<int64_t> kept_dims;               // shared by every reduce
  int64_t columns = 1;                          // K: elements of kept_dims
  int64_t max_rows = 1;                         // the largest R
  int64_t tx = 1, ty = 1;                       // block = tx * ty threads
  int64_t tiles = 1;                            // ceil(K / tx)
  int64_t chunks = 1;                           // G (members: the partials); 1: not split
  int64_t grid = 1;
  // Batches of mutually independent reduces (Note [column reduction
  // batches]), each ordered so that reduces over the same loop dims are next
  // to each other.
  std::vector<std::vector<const ir::Instruction*>> batches;
  // Shared memory (f32): the trees of a batch (tree_floats = largest batch x
  // block), then every reduce's totals, tx floats each at total_slot.
  int64_t tree_floats = 0;
  int64_t shared_floats = 0;
  std::map<const ir::Instruction*, int64_t> total_slot;
  // Split kernels: reduce -> its index r in scratch[(r * G + g) * K + column],
  // in the partials kernel's batch order.
  std::map<const ir::Instruction*, int64_t> partial_index;
  int64_t scratch_floats = 0;  // reduces x G x K (members: the partials); 0 when not split
  // Note [member partials]: the split kernels of full reductions; empty
  // otherwise (then batches, partial_index and chunks describe the split).
  std::vector<ReduceClass> classes;
  // The outputs this kernel writes, each with its kernel argument (Note
  // [kernel ABI]); none for the partials kernel.
  std::vector<const ir::Instruction*> written;
  std::vector<int64_t> slots;
  bool wide = false;  // 64-bit indices

  int64_t block() const { return tx * ty; }
  // The rows of reduce `r`'s input (its R).
  int64_t Rows(const ir::Instruction* r) const;
  // What a loop of the kernel runs over for `r`: its input dims, or in the
  // final kernel its G partials (every reduce shares one loop).
  std::vector<int64_t> LoopDims(const ir::Instruction* r) const;
};

// Plans kernel `part` of reduction fusion `fusion`: the whole column
// reduction, or with `mixed` the column part of a mixed row/column one; a
// split part (Note [split column reductions]) of either, which it tells
// apart itself. An error names the fusion and what does not fit.
StatusOr<ColumnReductionPlan> PlanColumnReduction(const ir::Instruction& fusion, ColumnPart part,
                                                  bool mixed);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_COLUMN_REDUCTION_PLAN_H_
