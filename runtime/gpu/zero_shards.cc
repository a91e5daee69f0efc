#include "runtime/gpu/zero_shards.h"

#include <algorithm>

#include "compiler/program/program.h"

namespace gptc::rt::gpu {

std::vector<float> ShardOf(std::span<const float> values, int64_t rank, int64_t world) {
  const int64_t n = static_cast<int64_t>(values.size());
  const int64_t s = program::ShardElements(n, world);
  std::vector<float> shard(s, 0.0f);
  const int64_t first = std::min(rank * s, n);
  const int64_t last = std::min(first + s, n);
  std::copy(values.begin() + first, values.begin() + last, shard.begin());
  return shard;
}

std::vector<float> Unshard(std::span<const float> gathered, int64_t elements) {
  const int64_t n = std::min<int64_t>(elements, static_cast<int64_t>(gathered.size()));
  return std::vector<float>(gathered.begin(), gathered.begin() + n);
}

}  // namespace gptc::rt::gpu
