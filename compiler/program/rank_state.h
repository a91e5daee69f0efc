// The training state one data-parallel rank holds, by kind, with and
// without ZeRO-1 (Note [ZeRO-1 shards] in program.h): what `gptc compile
// --memory-report` prints per rank. Counted from the parameters' shapes,
// not from an arena: the arena's peak adds the activations and, under
// ZeRO-1, each whole gradient between the backward's producing it and its
// reduce-scatter.
#ifndef GPTC_COMPILER_PROGRAM_RANK_STATE_H_
#define GPTC_COMPILER_PROGRAM_RANK_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/program/param.h"

namespace gptc::program {

struct RankState {
  int64_t parameters = 0;  // the f32 weights: whole on every rank
  // The f32 gradients the optimizer reads: whole (all-reduced in place and
  // held until the update), or ZeRO-1's reduce-scattered shards.
  int64_t gradients = 0;
  int64_t accumulators = 0;  // grad_acc, whole (grad_accum > 1)
  int64_t moments = 0;       // AdamW's m and v: whole, or shards
  int64_t master = 0;        // ZeRO-1's shards of the f32 weights
  int64_t total() const { return parameters + gradients + accumulators + moments + master; }
};

RankState RankStateOf(const std::vector<ParamSpec>& params, int64_t grad_accum, int64_t world_size,
                      int64_t zero_stage);

// A table of `zero_stage`'s state beside --zero 0's (or alone at 0), one
// row a kind, in GiB: what gptc compile --memory-report prints.
std::string RenderRankState(const std::vector<ParamSpec>& params, int64_t grad_accum,
                            int64_t world_size, int64_t zero_stage);

}  // namespace gptc::program

#endif  // GPTC_COMPILER_PROGRAM_RANK_STATE_H_
