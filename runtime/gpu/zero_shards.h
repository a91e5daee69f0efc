// This rank's shard of a parameter's state under ZeRO-1 (Note [ZeRO-1
// shards] in compiler/program/program.h), on the host: what the GPU trainer
// uploads into a sharded slot, and the whole values back from the shards of
// every rank. CUDA-free.
#ifndef GPTC_RUNTIME_GPU_ZERO_SHARDS_H_
#define GPTC_RUNTIME_GPU_ZERO_SHARDS_H_

#include <cstdint>
#include <span>
#include <vector>

namespace gptc::rt::gpu {

// Elements [rank*s, (rank+1)*s) of `values` (a parameter flattened, n
// elements), s = ceil(n / world); zero past n.
std::vector<float> ShardOf(std::span<const float> values, int64_t rank, int64_t world);

// The first `elements` of `gathered` (every rank's shard in rank order, as
// an all-gather leaves them): the whole values without the padding.
std::vector<float> Unshard(std::span<const float> gathered, int64_t elements);

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_ZERO_SHARDS_H_
