// Cutting and joining ZeRO-1 shards on the host (Note [ZeRO-1 shards] in
// compiler/program/program.h): what a device does to turn whole state (a
// fresh initialization, a checkpoint) into its rank's shards and back.
#ifndef GPTC_COMPILER_PROGRAM_ZERO_SHARDS_H_
#define GPTC_COMPILER_PROGRAM_ZERO_SHARDS_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "compiler/program/program.h"

namespace gptc::program {

// Rank `rank`'s shard of `whole` over `world` ranks: elements
// [rank*s, (rank+1)*s) of `whole` zero-padded to world*s, s = ShardElements.
template <typename To, typename From>
std::vector<To> ShardOf(std::span<const From> whole, int64_t rank, int64_t world) {
  const int64_t n = static_cast<int64_t>(whole.size());
  const int64_t s = ShardElements(n, world);
  std::vector<To> shard(static_cast<size_t>(s), To(0));
  const int64_t first = std::min(n, rank * s);
  const int64_t last = std::min(n, first + s);
  std::transform(whole.begin() + first, whole.begin() + last, shard.begin(),
                 [](From x) { return static_cast<To>(x); });
  return shard;
}

// The first `elements` of every rank's shards laid end to end (`gathered`,
// world * s elements in rank order): the whole tensor again.
template <typename To, typename From>
std::vector<To> Unshard(std::span<const From> gathered, int64_t elements) {
  std::vector<To> whole(static_cast<size_t>(elements));
  std::transform(gathered.begin(), gathered.begin() + elements, whole.begin(),
                 [](From x) { return static_cast<To>(x); });
  return whole;
}

}  // namespace gptc::program

#endif  // GPTC_COMPILER_PROGRAM_ZERO_SHARDS_H_
