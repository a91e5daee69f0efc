#include "runtime/data_loader.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <span>

#include "compiler/support/file.h"

namespace gptc::rt {
namespace {

// A small, portable generator (SplitMix64), so shuffles are the same with
// every standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// A permutation of [0, n) that depends only on the three keys (Fisher-Yates).
std::vector<int64_t> Permutation(int64_t n, uint64_t seed, uint64_t a, uint64_t b, bool shuffle) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  if (!shuffle) return p;
  Rng mix(seed);
  Rng rng(mix.Next() ^ Rng(a * 0x100000001B3ull + b).Next());
  for (int64_t i = n - 1; i > 0; --i) {
    std::swap(p[i], p[rng.Next() % static_cast<uint64_t>(i + 1)]);
  }
  return p;
}

int32_t ReadInt32(const char* p) {
  int32_t v;
  std::memcpy(&v, p, 4);  // little-endian hosts only, as llm.c
  return v;
}

// Checks the header of a shard whose file is `file_size` bytes; returns the token count.
StatusOr<int64_t> CheckHeader(const std::string& path, const char* header, int64_t file_size) {
  if (file_size < kShardHeaderBytes) {
    return Error("{}: short file: {} bytes, the shard header needs {}", path, file_size,
                 kShardHeaderBytes);
  }
  if (int32_t magic = ReadInt32(header); magic != kShardMagic) {
    return Error("{}: offset 0: bad magic {}, expected {} (not a token shard)", path, magic,
                 kShardMagic);
  }
  if (int32_t version = ReadInt32(header + 4); version != kShardVersion) {
    return Error("{}: offset 4: unsupported version {}, expected {}", path, version, kShardVersion);
  }
  const int64_t count = ReadInt32(header + 8);
  const int64_t payload = file_size - kShardHeaderBytes;
  if (count < 0 || count * 2 != payload) {
    return Error("{}: offset 8: header says {} tokens ({} bytes) but {} bytes follow the header",
                 path, count, count * 2, payload);
  }
  return count;
}

// The error for token `index` of shard `path`, id `id`, at or above `vocab`.
Status TokenError(const std::string& path, int64_t index, uint16_t id, int64_t vocab) {
  return Error("{}: offset {}: token {} is id {}, not below the vocabulary size {}", path,
               kShardHeaderBytes + 2 * index, index, id, vocab);
}

// The first of `tokens` (the shard's tokens from index `first` on) that is
// not below `vocab`, as an error naming it.
Status CheckTokens(const std::string& path, std::span<const uint16_t> tokens, int64_t first,
                   int64_t vocab) {
  if (vocab > std::numeric_limits<uint16_t>::max()) return Status::Ok();  // every id fits
  // The maximum first: a branch-free loop the compiler vectorizes.
  uint16_t max = 0;
  for (uint16_t t : tokens) max = std::max(max, t);
  if (tokens.empty() || max < vocab) return Status::Ok();
  size_t i = 0;
  while (tokens[i] < vocab) ++i;
  return TokenError(path, first + static_cast<int64_t>(i), tokens[i], vocab);
}

// Checks a shard's header and size and scans every token id against
// `vocab`, in chunks (shards may be hundreds of MB); returns the token count.
StatusOr<int64_t> CheckShardFile(const std::string& path, int64_t vocab) {
  ASSIGN_OR_RETURN(const InputFile file, OpenInputFile(path));  // Note [input files]
  const int fd = file.fd();
  const auto file_size = static_cast<int64_t>(file.size());
  char header[kShardHeaderBytes] = {};
  const ssize_t got = pread(fd, header, sizeof(header), 0);
  if (got < 0) return Error("{}: {}", path, std::strerror(errno));
  const int64_t size = std::min<int64_t>(file_size, got == kShardHeaderBytes ? file_size : got);
  ASSIGN_OR_RETURN(const int64_t count, CheckHeader(path, header, size));
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  constexpr int64_t kChunkTokens = int64_t{1} << 21;  // 4 MiB
  std::vector<uint16_t> chunk(std::min(count, kChunkTokens));
  for (int64_t done = 0; done < count;) {
    const int64_t want = std::min(count - done, kChunkTokens);
    const ssize_t n = pread(fd, chunk.data(), 2 * want, kShardHeaderBytes + 2 * done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error("{}: {}", path, std::strerror(errno));
    if (n < 2) {  // the header said more
      return Error("{}: changed while being read (ends at byte {})", path,
                   kShardHeaderBytes + 2 * done + n);
    }
    const auto got_tokens = static_cast<size_t>(n / 2);  // an odd byte is read again
    RETURN_IF_ERROR(CheckTokens(path, std::span(chunk.data(), got_tokens), done, vocab));
    done += static_cast<int64_t>(got_tokens);
  }
  return count;
}

}  // namespace

std::string EncodeShard(const std::vector<int32_t>& tokens) {
  std::string bytes(kShardHeaderBytes + 2 * tokens.size(), '\0');
  const int32_t header[3] = {kShardMagic, kShardVersion, static_cast<int32_t>(tokens.size())};
  std::memcpy(bytes.data(), header, sizeof(header));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const uint16_t t = static_cast<uint16_t>(tokens[i]);
    std::memcpy(bytes.data() + kShardHeaderBytes + 2 * i, &t, 2);
  }
  return bytes;
}

StatusOr<std::vector<uint16_t>> ParseShard(std::string_view bytes, const std::string& name,
                                           int64_t vocab) {
  ASSIGN_OR_RETURN(int64_t count,
                   CheckHeader(name, bytes.data(), static_cast<int64_t>(bytes.size())));
  std::vector<uint16_t> tokens(count);
  if (count > 0) std::memcpy(tokens.data(), bytes.data() + kShardHeaderBytes, 2 * count);
  RETURN_IF_ERROR(CheckTokens(name, tokens, 0, vocab));
  return tokens;
}

StatusOr<std::vector<uint16_t>> ReadShard(const std::string& path, int64_t vocab) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return ParseShard(bytes, path, vocab);
}

StatusOr<std::vector<std::string>> ExpandShardPattern(const std::string& pattern) {
  glob_t g{};
  const int rc = glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  if (rc == GLOB_NOMATCH) return Error("{}: no shard matches", pattern);
  if (rc != 0) {
    globfree(&g);
    return Error("{}: cannot expand the pattern", pattern);
  }
  std::vector<std::string> paths;
  for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  globfree(&g);  // glob(3) sorts the paths
  return paths;
}

StatusOr<DataLoader> DataLoader::Open(Options options) {
  if (options.batch < 1 || options.seq < 1 || options.world < 1 || options.rank < 0 ||
      options.rank >= options.world) {
    return Error("data loader: bad shape B={} T={} rank={} world={}", options.batch, options.seq,
                 options.rank, options.world);
  }
  DataLoader loader;
  ASSIGN_OR_RETURN(loader.paths_, ExpandShardPattern(options.pattern));

  const int64_t step = options.batch * options.world;
  bool fits = false;
  for (const std::string& path : loader.paths_) {
    // Every token now, not when training reaches the shard (a bad id in the
    // last shard would otherwise end a long run late).
    ASSIGN_OR_RETURN(int64_t count, CheckShardFile(path, options.vocab));
    const int64_t sequences = count > 0 ? (count - 1) / options.seq : 0;
    loader.token_counts_.push_back(count);
    loader.sequences_.push_back(sequences);
    fits |= sequences >= step;
  }
  if (!fits) {
    return Error("{}: no shard holds one step of {} sequences of {}+1 tokens", options.pattern,
                 step, options.seq);
  }
  loader.options_ = std::move(options);
  return loader;
}

int64_t DataLoader::total_tokens() const {
  return std::accumulate(token_counts_.begin(), token_counts_.end(), int64_t{0});
}

std::vector<int64_t> DataLoader::ShardOrder(int64_t epoch) const {
  return Permutation(static_cast<int64_t>(paths_.size()), options_.seed, epoch, 0,
                     options_.shuffle);
}

Status DataLoader::Load(int64_t file_index) {
  if (loaded_epoch_ == state_.epoch && loaded_file_ == file_index) return Status::Ok();
  if (loaded_file_ != file_index) {
    ASSIGN_OR_RETURN(tokens_, ReadShard(paths_[file_index], options_.vocab));
    if (static_cast<int64_t>(tokens_.size()) != token_counts_[file_index]) {
      return Error("{}: changed while training ({} tokens, were {})", paths_[file_index],
                   tokens_.size(), token_counts_[file_index]);
    }
  }
  order_ = Permutation(sequences_[file_index], options_.seed, state_.epoch, file_index + 1,
                       options_.shuffle);
  loaded_epoch_ = state_.epoch;
  loaded_file_ = file_index;
  return Status::Ok();
}

Status DataLoader::Settle() {
  const int64_t step = options_.batch * options_.world;
  const int64_t shards = static_cast<int64_t>(paths_.size());
  while (true) {
    if (state_.shard >= shards) {
      ++state_.epoch;
      state_.shard = 0;
      state_.sequence = 0;
    }
    const int64_t file = ShardOrder(state_.epoch)[state_.shard];
    if (state_.sequence + step <= sequences_[file]) return Load(file);
    ++state_.shard;
    state_.sequence = 0;
  }
}

StatusOr<MicroBatch> DataLoader::Next() {
  RETURN_IF_ERROR(Settle());
  const int64_t B = options_.batch, T = options_.seq;
  MicroBatch mb;
  mb.tokens.resize(B * T);
  mb.targets.resize(B * T);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = order_[state_.sequence + options_.rank * B + b] * T;
    for (int64_t t = 0; t < T; ++t) {
      mb.tokens[b * T + t] = tokens_[start + t];
      mb.targets[b * T + t] = tokens_[start + t + 1];
    }
  }
  state_.sequence += B * options_.world;
  return mb;
}

Status DataLoader::Restore(const State& state) {
  if (state.epoch < 0 || state.shard < 0 || state.shard > static_cast<int64_t>(paths_.size()) ||
      state.sequence < 0) {
    return Error(
        "data loader state (epoch {}, shard {}, sequence {}) is out of range for {} "
        "shards",
        state.epoch, state.shard, state.sequence, paths_.size());
  }
  state_ = state;
  return Status::Ok();
}

}  // namespace gptc::rt
