#include "runtime/data_loader.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <numeric>

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

StatusOr<int64_t> ReadHeader(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error("{}: {}", path, std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return Error("{}: {}", path, std::strerror(err));
  }
  char header[kShardHeaderBytes] = {};
  ssize_t got = pread(fd, header, sizeof(header), 0);
  close(fd);
  if (got < 0) return Error("{}: {}", path, std::strerror(errno));
  return CheckHeader(path, header,
                     std::min<int64_t>(st.st_size, got == kShardHeaderBytes ? st.st_size : got));
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

StatusOr<std::vector<uint16_t>> ReadShard(const std::string& path, int64_t vocab) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  ASSIGN_OR_RETURN(int64_t count,
                   CheckHeader(path, bytes.data(), static_cast<int64_t>(bytes.size())));
  std::vector<uint16_t> tokens(count);
  std::memcpy(tokens.data(), bytes.data() + kShardHeaderBytes, 2 * count);
  for (int64_t i = 0; i < count; ++i) {
    if (tokens[i] >= vocab) {
      return Error("{}: offset {}: token id {} >= vocabulary size {}", path,
                   kShardHeaderBytes + 2 * i, tokens[i], vocab);
    }
  }
  return tokens;
}

StatusOr<DataLoader> DataLoader::Open(Options options) {
  if (options.batch < 1 || options.seq < 1 || options.world < 1 || options.rank < 0 ||
      options.rank >= options.world) {
    return Error("data loader: bad shape B={} T={} rank={} world={}", options.batch, options.seq,
                 options.rank, options.world);
  }
  DataLoader loader;
  glob_t g{};
  const int rc = glob(options.pattern.c_str(), GLOB_ERR, nullptr, &g);
  if (rc == GLOB_NOMATCH) return Error("{}: no shard matches", options.pattern);
  if (rc != 0) {
    globfree(&g);
    return Error("{}: cannot expand the pattern", options.pattern);
  }
  for (size_t i = 0; i < g.gl_pathc; ++i) loader.paths_.emplace_back(g.gl_pathv[i]);
  globfree(&g);  // glob(3) sorts the paths

  const int64_t step = options.batch * options.world;
  bool fits = false;
  for (const std::string& path : loader.paths_) {
    ASSIGN_OR_RETURN(int64_t count, ReadHeader(path));
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
