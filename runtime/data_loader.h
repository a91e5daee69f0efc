// Token shards and the training data loader.
//
// Shards are llm.c's format: a header of 256 little-endian int32 (magic
// 20240520, version 1, token count, the rest zero), then `count` uint16
// token ids. gpt-tokenize writes them.
//
//   ASSIGN_OR_RETURN(DataLoader loader, DataLoader::Open({.pattern = "data/brown/train_*.bin",
//                                                         .batch = 8, .seq = 1024, .seed = 0}));
//   ASSIGN_OR_RETURN(MicroBatch mb, loader.Next());   // tokens, targets: s32[B, T]
//   DataLoader::State s = loader.state();             // saved with a checkpoint
//   ...
//   RETURN_IF_ERROR(loader.Restore(s));               // the next batch is the same again
//
// Note [data order]: each shard is cut into sequences of T+1 tokens starting
// at multiples of T (the last token of one is the first of the next, as in
// llm.c). An epoch visits the shards in a permuted order and each shard's
// sequences in a permuted order; both permutations are pure functions of
// (seed, epoch, shard), so the position (epoch, shard index, sequence index)
// is the whole state: there is no generator state to save. A batch takes B
// consecutive sequences of that order for each rank: rank r of `world` takes
// sequences [pos + r*B, pos + (r+1)*B) and every rank advances by B*world.
// Sequences of a shard that do not fill a whole step are skipped.
#ifndef GPTC_RUNTIME_DATA_LOADER_H_
#define GPTC_RUNTIME_DATA_LOADER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/support/status.h"
#include "runtime/cpu_device.h"
#include "compiler/program/model_config.h"

namespace gptc::rt {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int64_t kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;

// The bytes of a shard holding `tokens` (every id must fit in uint16).
std::string EncodeShard(const std::vector<int32_t>& tokens);

// Reads and validates a shard: magic, version, size, and every id < `vocab`.
// Errors name the file and the byte offset at fault (and, for an id, the
// token's index and value).
StatusOr<std::vector<uint16_t>> ReadShard(const std::string& path, int64_t vocab);
// The same for a shard's bytes, read from `name` (for errors).
StatusOr<std::vector<uint16_t>> ParseShard(std::string_view bytes, const std::string& name,
                                           int64_t vocab);

// The shards `pattern` (glob(3)) matches, sorted; none is an error.
StatusOr<std::vector<std::string>> ExpandShardPattern(const std::string& pattern);

class DataLoader {
 public:
  struct Options {
    std::string pattern;  // glob(3) pattern of the shards, expanded in sorted order
    int64_t batch = 1;    // B, per rank
    int64_t seq = 1;      // T
    uint64_t seed = 0;
    bool shuffle = true;  // false: shards and sequences in file order (evaluation)
    int64_t rank = 0;
    int64_t world = 1;
    int64_t vocab = program::kGpt2Vocab;  // token ids must be below this
  };

  // Where the loader is (Note [data order]).
  struct State {
    int64_t epoch = 0;
    int64_t shard = 0;     // index into the epoch's shard order
    int64_t sequence = 0;  // index into the shard's sequence order
    bool operator==(const State&) const = default;
  };

  // Expands the pattern and validates every shard: its header, its size and
  // every token id (< vocab), so that a bad shard is refused before training
  // rather than when the loader reaches it. The ids are scanned in chunks
  // (about 0.2 s per 100M tokens, 200 MB, from the page cache).
  static StatusOr<DataLoader> Open(Options options);

  // The next batch: tokens and targets, s32[B, T] row-major.
  StatusOr<MicroBatch> Next();

  const State& state() const { return state_; }
  // Continues from `state` (from state() of a loader with the same options).
  Status Restore(const State& state);

  const std::vector<std::string>& shards() const { return paths_; }
  // Sequences of T+1 tokens in shard i (by file order).
  int64_t sequences_in_shard(int64_t i) const { return sequences_[i]; }
  int64_t total_tokens() const;

 private:
  DataLoader() = default;
  // The epoch's shard order (indices into paths_).
  std::vector<int64_t> ShardOrder(int64_t epoch) const;
  // Loads shard `file_index` and its sequence order for the current epoch.
  Status Load(int64_t file_index);
  // Moves state_ forward to a position where a whole step fits.
  Status Settle();

  Options options_;
  std::vector<std::string> paths_;
  std::vector<int64_t> token_counts_, sequences_;
  State state_;
  // The loaded shard: (epoch, file index) it belongs to, tokens, sequence order.
  int64_t loaded_epoch_ = -1, loaded_file_ = -1;
  std::vector<uint16_t> tokens_;
  std::vector<int64_t> order_;
};

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_DATA_LOADER_H_
