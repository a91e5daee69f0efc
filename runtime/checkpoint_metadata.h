// What a checkpoint's safetensors files say besides their tensors: the
// __metadata__ codec (every field range-checked when read), the checksum that
// covers tensors and metadata, and the identity of the training data the run
// read. runtime/checkpoint.h writes and reads the files with it; it depends on
// nothing but the safetensors and shard readers, so that the fuzzers
// (tests/runtime/fuzz) exercise it alone.
//
// Note [checkpoint metadata ranges]: the metadata is text a person or a
// program may have edited, so nothing is taken on trust: a step must lie in
// [0, kMaxCheckpointStep] (2^40 steps: 35 years at a millisecond a step; a
// step beyond it would make the step counter overflow, a negative one would
// schedule a negative learning rate), an epoch cannot exceed the step (an
// epoch takes at least one step), a shard index lies within the shard list
// the checkpoint recorded, a run id is 16 hex digits, a validation loss is
// finite and not negative, and so on. Each error is one line naming the file and the key, with
// the value cut short.
#ifndef GPTC_RUNTIME_CHECKPOINT_METADATA_H_
#define GPTC_RUNTIME_CHECKPOINT_METADATA_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/support/status.h"
#include "runtime/data_loader.h"
#include "runtime/safetensors.h"

namespace gptc::rt {

inline constexpr int64_t kMaxCheckpointStep = int64_t{1} << 40;

// Note [shard identity]: a shard is known by its file name (not its
// directory: a dataset moved to another disk is the same data), its size and
// a hash of its first kShardHeadBytes bytes (the header, with the token
// count, and the first tokens): the same files under another --train
// pattern or path are the same data, and a file regenerated under the same
// name is not.
inline constexpr int64_t kShardHeadBytes = 64 * 1024;
struct ShardIdentity {
  std::string name;   // the file name, without its directory
  int64_t bytes = 0;  // the file's size
  uint64_t head = 0;  // FNV-1a-64 of its first kShardHeadBytes bytes
  bool operator==(const ShardIdentity&) const = default;
};
StatusOr<ShardIdentity> IdentifyShard(const std::string& path);
// "train_000.bin (10,240 bytes)".
std::string DescribeShard(const ShardIdentity& shard);

// Note [data source]: the loader's position (DataLoader::State) means
// something only for the same shards, sequence length and seed: with another
// of these, resuming would silently repeat some data and skip other. So a
// checkpoint records them, and gptrun refuses to resume with others unless
// told to start the data over (--reset-data). Checkpoints from before shard
// identities record only a hash of the file names ("gptc.data.shards"), and
// those from before data sources record nothing, and nothing is compared.
struct DataSource {
  std::string train;                 // the --train pattern as given (for messages)
  std::vector<ShardIdentity> files;  // the shards it matched, in the loader's order
  std::string legacy_shards;         // older checkpoints: "N:HASH" of the file names alone
  int64_t seq = 0;                   // tokens per sequence
  std::string seed;                  // the data order's seed, in decimal
  bool known() const { return !files.empty() || !legacy_shards.empty(); }
  // "N:HASH" over the file names, as checkpoints before shard identities wrote it.
  std::string NamesHash() const;
};

// The DataSource of `shards` (the loader's paths) read with `seq` and `seed`;
// reads the head of every shard (Note [shard identity]).
StatusOr<DataSource> MakeDataSource(const std::string& pattern,
                                    const std::vector<std::string>& shards, int64_t seq,
                                    uint64_t seed);

// What differs between the data a checkpoint read (`was`) and what this run
// would read (`now`) in a way that changes the data order, each a phrase
// naming the files or values compared; empty when resuming may continue. The
// --train patterns are not compared, only the files they found.
std::vector<std::string> DataSourceChanges(const DataSource& was, const DataSource& now);

// Everything a checkpoint's __metadata__ holds.
struct CheckpointMetadata {
  int64_t step = 0;
  DataLoader::State data;
  int64_t vocab = 0;     // the real rows of wte.weight (Note [padded wte] in checkpoint.h)
  int64_t wte_rows = 0;  // all its rows; 0 when not recorded
  std::string run_id;    // empty in checkpoints from before run ids
  DataSource data_source;
  std::optional<double> val_loss;            // gptc.val_loss (Note [checkpoint housekeeping])
  std::map<std::string, std::string> extra;  // keys outside gptc.*, kept as they are
};

// The __metadata__ map of `meta` ("format": "pt" and the gptc.* keys; the
// checksum is CheckpointChecksum's to add).
std::map<std::string, std::string> EncodeCheckpointMetadata(const CheckpointMetadata& meta);
// Reads and range-checks (Note [checkpoint metadata ranges]) the metadata of
// the file `path`.
StatusOr<CheckpointMetadata> DecodeCheckpointMetadata(
    const std::map<std::string, std::string>& metadata, const std::string& path);

// Note [checkpoint checksums]: "gptc.checksum" is FNV-1a-64 over every
// tensor's name, dtype, shape and bytes, in name order (a reader may list
// them in any), and then over every other __metadata__ key and value, in key
// order, each with its length; it is kept in the file's own __metadata__ (so
// a safetensors reader elsewhere still loads the file). --resume recomputes
// it, so a flipped byte in tensor data, or a step edited in the metadata, is
// refused instead of resumed. Files written before the metadata was covered
// carry "fnv1a64:..." over the tensors alone and are checked so; files
// written before checksums carry none and are checked by the ranges alone.
inline constexpr char kChecksumKey[] = "gptc.checksum";
std::string CheckpointChecksum(const SafeTensors& file);
Status VerifyCheckpointChecksum(const SafeTensors& file, const std::string& path);

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_CHECKPOINT_METADATA_H_
