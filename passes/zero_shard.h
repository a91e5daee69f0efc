// ZeRO-1's collectives, as the optimizer pass emits them when it shards the
// optimizer state over the data-parallel ranks (OptimizerOptions::zero_world,
// gptc compile --dp N --zero 1).
//
// Note [ZeRO-1]: every rank still computes the whole gradient of its own
// micro-batch, as plain data parallelism does, but instead of all-reducing
// it, reduce-scatters it: each rank receives the rank-order sum of one shard
// only (Note [ZeRO-1 shards] in compiler/program/program.h for the layout;
// the backward is seeded with 1/N, Note [scale first], so the sum is the
// mean). AdamW then runs on that shard alone, reading the rank's shards of
// the moments and of the f32 weights (the kMaster slot), and the updated
// weight shards are all-gathered back into every rank's whole parameter:
//   %g = f32[5,3] ...                                   (the gradient, final)
//   %zero.w.flat = f32[15] reshape(%g)
//   %zero.w.padded = f32[16] pad(%zero.w.flat, %zero.w.zero), low={0}, high={1}
//   %zero.w.shard = f32[8] reduce-scatter(%zero.w.padded), kind=sum, replicas=2
//   ... AdamW on f32[8] shards: %adamw.w.new ...
//   %zero.w.gathered = f32[16] all-gather(%adamw.w.new), replicas=2
//   %zero.w.unpadded = f32[15] slice(%zero.w.gathered), [0:15]
//   %zero.w.param = f32[5,3] reshape(%zero.w.unpadded)
// The global gradient norm is the sum of every rank's partial sums of
// squares over its shards (the padding adds zeros), one scalar all-reduce
// before the square root; it differs from the unsharded norm only in the
// order of the additions. The padding's shards stay zero: their gradient is
// zero, so are their moments, and their weights decay from zero to zero.
// A rank's state is 4 + 12/N bytes a parameter (the whole f32 weights, then
// shards of the moments and master weights) instead of 12: docs/DATA_PARALLEL.md.
#ifndef GPTC_PASSES_ZERO_SHARD_H_
#define GPTC_PASSES_ZERO_SHARD_H_

#include <cstdint>
#include <string_view>

#include "compiler/ir/builder.h"
#include "compiler/ir/computation.h"

namespace gptc::passes {

// Names the sharding instructions get: `zero.NAME.*` (NAME the parameter's),
// with metadata `zero.NAME`.
inline constexpr char kZeroPrefix[] = "zero.";

// This rank's shard of `grad`'s sum over `world` ranks, f32[ceil(n/world)]:
// flattened, zero-padded and reduce-scattered, emitted right after `grad`'s
// producer so that the reduce-scatter can start while the backward runs.
//
// Note [bf16 gradient communication]: with `comm` bf16 (gptc compile
// --grad-comm bf16, as llm.c) each rank's gradient is rounded to bf16
// before the reduce-scatter, the ranks' values are summed in bf16 (in rank
// order, each partial sum rounded again), and the shard is widened back to
// f32 for AdamW: half the bytes on the wire, a relative error of about
// 2^-9 per rounding (N roundings over N ranks) in the gradient, where f32
// communication's sum is exact to f32.
StatusOr<ir::Instruction*> EmitGradientShard(ir::Computation& computation, ir::Instruction* grad,
                                             int64_t world, std::string_view name,
                                             ir::DType comm = ir::DType::kF32);

// Every rank's `shard` of a parameter of `shape`, all-gathered, unpadded and
// reshaped: the whole parameter, at `b`'s insertion point.
StatusOr<ir::Instruction*> EmitGatheredParameter(ir::Builder& b, ir::Instruction* shard,
                                                 const ir::Shape& shape, int64_t world,
                                                 std::string_view name);

}  // namespace gptc::passes

#endif  // GPTC_PASSES_ZERO_SHARD_H_
