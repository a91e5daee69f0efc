// The analysis half of the row-reduction emitter (row_reduction_emitter.cc
// builds the MLIR from it): which reduces, in which batches, the outputs of
// each shape, the geometry, the row cache and whether the row is unrolled,
// decided without MLIR so that tests can check them (STYLE 17).
//
// Note [row reduction]: with input shape [rows..., N], a row is handled by a
// warp (N <= 1024; 8 rows per 256-thread block) or a whole block (larger N).
// Its threads stride over the N columns. Reductions run in batches: each batch
// holds the reductions that do not depend on each other (mean and mean of
// squares share one pass, variance after mean needs a second), accumulates in
// f32 in one loop, combines lanes with butterfly shuffles and, for a block,
// warps through shared memory. Every thread then holds the row's results, so
// later batches and the outputs can use them. Outputs shaped like the input
// are written in a final column loop; outputs shaped like a row by lane 0.
// Input elements are recomputed (re-read) in each pass; reads of a row after
// the first come from L1/L2, except in block mode (Note [row cache]).
//
// Note [unrolled warp rows]: a warp row of N = 32 k columns is emitted as
// straight-line code over the lane's k columns instead of a loop, with the
// same element indices in every pass and in the output stores, when the
// row-shaped parameters its reduces read hold at most 48 elements a lane
// (layer norm forward: the input, 24 a lane; backward: the output gradient
// and the centred input, 48). The fused emitter's cache then keeps each
// element a pass loaded in a register from that pass on: the row is read
// once, its loads all in flight together (the loop reloaded it from L1/L2
// each pass, and reloaded the row's statistics at every store, which may
// alias them). Parameters only the outputs read (the backward's residual
// gradient) are loaded where the outputs are stored, so that they hold no
// registers during the passes: counting them made the backward's rows kernel
// 96 elements a lane and 108 registers, slower than the loop on the H100
// (docs/PERFORMANCE.md).
//
// Note [duplicate reduces]: a fusion can hold the same reduction twice: the
// softmax cross-entropy's loss reduces the logits' max and sum of exps
// inside its decomposition, and its gradient (remat) reduces the same again
// from another convert of the same logits. Reduces whose operands compute
// the same values (same opcodes, shapes and attributes down to the same
// parameters: SameValue in row_reduction_plan.cc) are emitted once.
// gpt2-124m's cross-entropy kernel goes from five reduces in three passes
// over each row to three reduces in two (plus the output loop): max, then
// the sum of exps with the target's logit.
//
// Note [row vectors]: a thread handles its columns in chunks of `width`
// consecutive ones (16 bytes of the widest row-shaped parameter or output,
// at most 8, dividing the row; 1 when none does), so that each parameter
// read at the chunk's elements is one vector load of at most 16 bytes (from
// global memory or the row cache; bf16 as 32-bit words) and each output one
// vector store, as the loop emitter's Note [loop vectorisation] does. Not
// 16 bytes of the narrowest: 32 bytes a lane of an f32 beside bf16 become
// two 16-byte instructions whose lanes are 32 bytes apart, each touching
// twice the sectors it uses. Chunk c of a row covers columns
// [c * width, c * width + width), and a thread takes chunks lane,
// lane + threads_per_row, ... (unrolled warp rows: the lane's chunks
// lane + 32 u). Element loads of 2 or 4 bytes a lane made 2-4 sectors a
// request; the layer-norm rows and the cross-entropy's passes were issue-
// and request-bound on them.
//
// Note [row cache]: a block-per-row kernel that reads its row in several
// passes (the cross-entropy's reduces and its gradient) first copies each
// row-shaped parameter's row into dynamic shared memory, and every pass reads
// it there. Without it the cross-entropy over 16 x 1024 rows of 50304 bf16
// logits ran at a third of its roofline on an H100 (docs/PERFORMANCE.md, the
// Notes' measurements): four blocks of 100 KB rows a multiprocessor outgrow
// the 50 MB L2, so every pass went to DRAM.
//
// Note [column cache]: a warp-row kernel reads its column parameters (those
// of one row's n elements, read through a broadcast at the row's columns: a
// layer norm's gain and bias) at the same columns in every row. Read from
// global memory by each warp, they moved as many sectors as a row of their
// own: the forward layer norm's ln_2 moved 13.5 MiB of sectors a launch for
// 7.5 MiB of compulsory bytes (one 124m-shaped layer at batch 1), 6 of them
// gain and bias. Each block instead copies them once into dynamic shared
// memory (16-byte vectors where the row allows, then a barrier), its warps
// read their chunks there, and the grid is capped at kColumnCacheGrid blocks
// that stride over the groups of rows_per_block rows, so that one copy
// serves several groups when the rows are many (at batch 16 the copies are
// 1,056 x 6 KiB beside 120 MiB of rows).
//
// Note [one-hot reduces]: the softmax cross-entropy's loss takes the
// target's logit as a row sum of select(class == target, logit, 0): a
// compare, a select and an add at every element of the sum pass, for one
// element a row. A row sum of select(compare(iota, broadcast(t)) EQ, v, 0),
// the iota along the row and t a row value, is v at column t (0 when t is
// not a column of the row): exactly, the other terms being zeros (only a
// zero's sign may differ). It takes no part in its batch's pass: the thread
// whose chunk holds column t reads that element, every other thread takes
// 0, and the threads' partials are combined as the batch's sums are. Only
// the owner reads it because an output may overwrite the parameter in place
// (Note [in-place temporaries] in compiler/analysis/buffer_assignment.h), each thread
// its own columns after it has read them.
//
// Note [bounded columns]: the cross-entropy masks the vocabulary's padding
// (classes 50257 to 50303 of 50304) with select(iota < 50257, logit, -inf)
// in each of its passes: the column's index, a compare and a select at every
// element, for 47 columns a row. Compares of an iota along the row with a
// constant that hold for every column below a limit (iota < K, iota <= K,
// and mirrored) are the row's bounded compares; each pass runs one loop over
// the thread's chunks that lie below the limit, where the emitter takes them
// as true, then one over the rest. A thread visits the same chunks in the
// same order, so its sums are the same bits.
#ifndef GPTC_COMPILER_CODEGEN_ROW_REDUCTION_PLAN_H_
#define GPTC_COMPILER_CODEGEN_ROW_REDUCTION_PLAN_H_

#include <cstdint>
#include <map>
#include <vector>

#include "compiler/ir/instruction.h"
#include "compiler/ir/patterns.h"
#include "compiler/support/status.h"

namespace gptc::codegen {

struct RowReductionPlan {
  // The reduces to emit, in fusion order, without duplicates (Note
  // [duplicate reduces]).
  std::vector<const ir::Instruction*> reduces;
  // The composites' decomposition parameters bound to their operands, and
  // each duplicate reduce bound to its twin.
  ir::CompositeBindings bindings;
  std::vector<int64_t> input_dims;  // [rows..., n]
  std::vector<int64_t> row_dims;    // [rows...]
  int64_t n = 0;                    // columns of a row
  int64_t rows = 0;
  // The outputs shaped like the input and like a row, each with its kernel
  // argument (Note [kernel ABI]).
  std::vector<const ir::Instruction*> elem_outputs, row_outputs;
  std::vector<int64_t> elem_slots, row_slots;
  // Batches of mutually independent reduces, in order.
  std::vector<std::vector<const ir::Instruction*>> batches;
  // Note [one-hot reduces]: each such reduce (in its batch) with the value
  // it picks and the row value that is the column.
  struct OneHot {
    const ir::Instruction* value;
    const ir::Instruction* column;
  };
  std::map<const ir::Instruction*, OneHot> one_hot;
  // Geometry (Note [row reduction]).
  int64_t threads_per_row = 0;
  int64_t rows_per_block = 1;
  int64_t block = 0;
  int64_t grid = 0;
  int64_t warps_per_row = 1;
  int64_t shared_floats = 0;  // static: a float per reduce of a batch and warp of a row
  bool wide = false;          // 64-bit indices
  // The parameters read a row at a time.
  std::vector<const ir::Instruction*> row_params;
  // Note [row cache]: the cached parameters and their byte offsets in
  // dynamic shared memory, and its size; those copied by 16-byte vectors
  // (whole vectors a row) and by elements, each in the order of `cached`.
  std::map<const ir::Instruction*, int64_t> cached;
  int64_t cache_bytes = 0;
  std::vector<const ir::Instruction*> cached_by_vector, cached_by_element;
  // Note [column cache]: the column parameters and their byte offsets in
  // dynamic shared memory (after the row cache), and the row groups the
  // grid strides over (grid < row_groups: each block takes several).
  std::map<const ir::Instruction*, int64_t> column_cached;
  int64_t row_groups = 0;
  // Note [unrolled warp rows]: the columns of a lane when the row is
  // emitted without a loop (n / 32), else 0.
  int64_t unrolled_columns = 0;
  // Note [row vectors]: consecutive columns a thread handles together.
  int64_t width = 1;
  // Note [bounded columns]: the compares true at every column below
  // column_limit (n when there are none).
  std::vector<const ir::Instruction*> bounded;
  int64_t column_limit = 0;
};

// Plans the row-reduction kernel of `fusion`, or with `mixed` the row part of
// a mixed row/column one (Note [mixed row and column reductions] in
// codegen.h). An error names the fusion and what does not fit.
StatusOr<RowReductionPlan> PlanRowReduction(const ir::Instruction& fusion, bool mixed);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_ROW_REDUCTION_PLAN_H_
