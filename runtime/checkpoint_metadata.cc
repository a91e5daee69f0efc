#include "runtime/checkpoint_metadata.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "compiler/support/text.h"

namespace gptc::rt {
namespace {

using nlohmann::json;

constexpr int64_t kMaxShards = int64_t{1} << 20;
constexpr int64_t kMaxShardSequences = int64_t{1} << 31;  // a shard's count is an int32
constexpr int64_t kMaxShardBytes = int64_t{1} << 40;
constexpr int64_t kMaxSeq = int64_t{1} << 24;
constexpr int64_t kMaxRows = int64_t{1} << 31;
constexpr size_t kMaxText = 4096;  // a --train pattern, a directory name
constexpr size_t kMaxFileName = 255;

// FNV-1a-64, continued from `h`.
uint64_t Fnv(std::string_view bytes, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string Hex(uint64_t v) { return fmt::format("{:016x}", v); }

bool IsHex16(std::string_view s) {
  return s.size() == 16 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// Reads the keys of one file's __metadata__, each checked against its range;
// errors name the file and the key.
class MetaReader {
 public:
  MetaReader(const std::map<std::string, std::string>& meta, const std::string& path)
      : meta_(meta), path_(path) {}

  bool Has(const std::string& key) const { return meta_.contains(key); }
  std::string String(const std::string& key) const {
    auto it = meta_.find(key);
    return it == meta_.end() ? "" : it->second;
  }
  // The value of `key` as an integer in [min, max]; absent: `fallback`, or
  // an error without one.
  StatusOr<int64_t> Int(const std::string& key, int64_t min, int64_t max,
                        std::optional<int64_t> fallback = std::nullopt) const {
    auto it = meta_.find(key);
    if (it == meta_.end()) {
      if (fallback) return *fallback;
      return Error("{}: __metadata__ lacks '{}'", path_, key);
    }
    int64_t v = 0;
    const std::string& s = it->second;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty()) {
      return Error("{}: __metadata__ '{}' is {}, not an integer", path_, key, Shown(s, 40));
    }
    if (v < min || v > max)
      return Error("{}: __metadata__ '{}' is {}, {}", path_, key, v, Range(min, max));
    return v;
  }
  Status Bad(const std::string& key, std::string_view why) const {
    return Error("{}: __metadata__ '{}' {}", path_, key, why);
  }
  Status TooLong(const std::string& key) const {
    auto it = meta_.find(key);
    if (it == meta_.end() || it->second.size() <= kMaxText) return Status::Ok();
    return Bad(key, fmt::format("is {} bytes long, above {}", it->second.size(), kMaxText));
  }

 private:
  static std::string Range(int64_t min, int64_t max) {
    if (max == kMaxCheckpointStep) return fmt::format("not in [{}, 2^40]", min);
    return fmt::format("not in [{}, {}]", min, max);
  }
  const std::map<std::string, std::string>& meta_;
  const std::string& path_;
};

// gptc.data.files: [[name, bytes, "head"], ...] (Note [shard identity]).
std::string EncodeFiles(const std::vector<ShardIdentity>& files) {
  json list = json::array();
  for (const ShardIdentity& f : files) list.push_back({f.name, f.bytes, Hex(f.head)});
  return list.dump();
}

StatusOr<std::vector<ShardIdentity>> DecodeFiles(const MetaReader& in) {
  const std::string key = "gptc.data.files";
  const json list = json::parse(in.String(key), nullptr, /*allow_exceptions=*/false);
  if (!list.is_array()) return in.Bad(key, "is not a JSON list");
  if (list.empty() || static_cast<int64_t>(list.size()) > kMaxShards) {
    return in.Bad(key, fmt::format("lists {} shards, not 1 to {}", list.size(), kMaxShards));
  }
  std::vector<ShardIdentity> files;
  for (const json& f : list) {
    const std::string at = fmt::format("entry {}", files.size());
    if (!f.is_array() || f.size() != 3 || !f[0].is_string() || !f[1].is_number_unsigned() ||
        !f[2].is_string()) {
      return in.Bad(key, fmt::format("{}: is not [name, bytes, \"head\"]", at));
    }
    ShardIdentity s{.name = f[0].get<std::string>()};
    if (s.name.empty() || s.name.size() > kMaxFileName || s.name.find('/') != std::string::npos ||
        s.name.find('\0') != std::string::npos) {
      return in.Bad(key, fmt::format("{}: {} is not a file name", at, Shown(s.name, 40)));
    }
    const uint64_t bytes = f[1].get<uint64_t>();
    if (bytes < static_cast<uint64_t>(kShardHeaderBytes) || bytes > kMaxShardBytes) {
      return in.Bad(key,
                    fmt::format("{}: {} bytes, not in [{}, 2^40]", at, bytes, kShardHeaderBytes));
    }
    s.bytes = static_cast<int64_t>(bytes);
    const std::string head = f[2].get<std::string>();
    if (!IsHex16(head)) {
      return in.Bad(key, fmt::format("{}: head {} is not 16 hex digits", at, Shown(head, 40)));
    }
    s.head = std::stoull(head, nullptr, 16);
    files.push_back(std::move(s));
  }
  return files;
}

// gptc.data.*: the data source, checked (a shard index within its list).
Status DecodeDataSource(const MetaReader& in, CheckpointMetadata& m) {
  DataSource& d = m.data_source;
  if (in.Has("gptc.data.files")) {
    ASSIGN_OR_RETURN(d.files, DecodeFiles(in));
  } else if (in.Has("gptc.data.shards")) {
    d.legacy_shards = in.String("gptc.data.shards");
    const size_t colon = d.legacy_shards.find(':');
    int64_t n = 0;
    auto [end, ec] = std::from_chars(d.legacy_shards.data(), d.legacy_shards.data() + colon, n);
    if (colon == std::string::npos || ec != std::errc() || end != d.legacy_shards.data() + colon ||
        n < 1 || n > kMaxShards || !IsHex16(d.legacy_shards.substr(colon + 1))) {
      return in.Bad("gptc.data.shards",
                    fmt::format("is {}, not COUNT:HASH", Shown(d.legacy_shards, 40)));
    }
  }
  if (!d.known()) return Status::Ok();
  RETURN_IF_ERROR(in.TooLong("gptc.data.train"));
  d.train = in.String("gptc.data.train");
  ASSIGN_OR_RETURN(d.seq, in.Int("gptc.data.seq", 1, kMaxSeq));
  d.seed = in.String("gptc.data.seed");
  uint64_t seed = 0;
  auto [end, ec] = std::from_chars(d.seed.data(), d.seed.data() + d.seed.size(), seed);
  if (d.seed.empty() || ec != std::errc() || end != d.seed.data() + d.seed.size()) {
    return in.Bad("gptc.data.seed", fmt::format("is {}, not a seed", Shown(d.seed, 40)));
  }
  const int64_t shards =
      !d.files.empty() ? static_cast<int64_t>(d.files.size()) : std::stoll(d.legacy_shards);
  if (m.data.shard > shards) {
    return in.Bad("gptc.data.shard",
                  fmt::format("is {}, beyond the {} shards the run read", m.data.shard, shards));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ShardIdentity> IdentifyShard(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error("{}: {}", path, std::strerror(errno));
  struct stat st;
  std::string head(kShardHeadBytes, '\0');
  ssize_t got = -1;
  if (fstat(fd, &st) == 0) got = pread(fd, head.data(), head.size(), 0);
  const int err = errno;
  close(fd);
  if (got < 0) return Error("{}: {}", path, std::strerror(err));
  head.resize(static_cast<size_t>(got));
  const size_t slash = path.rfind('/');
  return ShardIdentity{.name = path.substr(slash == std::string::npos ? 0 : slash + 1),
                       .bytes = static_cast<int64_t>(st.st_size),
                       .head = Fnv(head)};
}

std::string DescribeShard(const ShardIdentity& shard) {
  return fmt::format("{} ({} bytes)", shard.name, WithThousands(shard.bytes));
}

std::string DataSource::NamesHash() const {
  // FNV-1a over the file names, each ended by 0xff.
  uint64_t hash = 1469598103934665603ull;
  for (const ShardIdentity& f : files) hash = Fnv("\xff", Fnv(f.name, hash));
  return fmt::format("{}:{:016x}", files.size(), hash);
}

StatusOr<DataSource> MakeDataSource(const std::string& pattern,
                                    const std::vector<std::string>& shards, int64_t seq,
                                    uint64_t seed) {
  DataSource d{.train = pattern, .seq = seq, .seed = std::to_string(seed)};
  for (const std::string& path : shards) {
    ASSIGN_OR_RETURN(ShardIdentity id, IdentifyShard(path));
    d.files.push_back(std::move(id));
  }
  return d;
}

namespace {

// "a.bin (1,024 bytes), b.bin (...)": at most three, then how many more.
std::string ListShards(const std::vector<const ShardIdentity*>& shards) {
  std::string out;
  for (size_t i = 0; i < shards.size() && i < 3; ++i) {
    out += (i > 0 ? ", " : "") + DescribeShard(*shards[i]);
  }
  if (shards.size() > 3) out += fmt::format(" and {} more", shards.size() - 3);
  return out;
}

// The shards of `was` and `now` that are not the same files, named.
std::string ShardChanges(const DataSource& was, const DataSource& now) {
  std::map<std::string, const ShardIdentity*> before, after;
  for (const ShardIdentity& f : was.files) before[f.name] = &f;
  for (const ShardIdentity& f : now.files) after[f.name] = &f;
  std::vector<const ShardIdentity*> gone, added;
  std::vector<std::string> parts;
  for (const auto& [name, f] : before) {
    auto it = after.find(name);
    if (it == after.end()) {
      gone.push_back(f);
    } else if (it->second->bytes != f->bytes) {
      parts.push_back(fmt::format("its {} is {} bytes where the checkpoint's was {}", name,
                                  WithThousands(it->second->bytes), WithThousands(f->bytes)));
    } else if (it->second->head != f->head) {
      parts.push_back(fmt::format("its {} begins with other tokens than the checkpoint's", name));
    }
  }
  for (const auto& [name, f] : after) {
    if (!before.contains(name)) added.push_back(f);
  }
  if (!gone.empty()) parts.insert(parts.begin(), "it lacks the checkpoint's " + ListShards(gone));
  if (!added.empty()) parts.push_back("it adds " + ListShards(added));
  if (parts.empty()) parts.push_back("the same shards in another order");
  if (parts.size() > 3) parts.resize(3);
  return fmt::format("--train '{}' finding {} shard{} where the checkpoint read {} from '{}': {}",
                     now.train, now.files.size(), now.files.size() == 1 ? "" : "s",
                     was.files.size(), was.train, fmt::join(parts, "; "));
}

}  // namespace

std::vector<std::string> DataSourceChanges(const DataSource& was, const DataSource& now) {
  std::vector<std::string> changes;
  if (!was.known()) return changes;
  if (!was.files.empty() && was.files != now.files) {
    changes.push_back(ShardChanges(was, now));
  } else if (was.files.empty() && was.legacy_shards != now.NamesHash()) {
    changes.push_back(fmt::format(
        "--train '{}' finds {} shards whose names are not the {} the checkpoint read from '{}'",
        now.train, now.files.size(), was.legacy_shards.substr(0, was.legacy_shards.find(':')),
        was.train));
  }
  if (was.seq != now.seq) {
    changes.push_back(fmt::format("seq {} where the checkpoint had {}", now.seq, was.seq));
  }
  if (was.seed != now.seed) {
    changes.push_back(fmt::format("--seed {} where the checkpoint had {}", now.seed, was.seed));
  }
  return changes;
}

std::map<std::string, std::string> EncodeCheckpointMetadata(const CheckpointMetadata& m) {
  std::map<std::string, std::string> meta = m.extra;
  meta["format"] = "pt";
  meta["gptc.step"] = std::to_string(m.step);
  meta["gptc.data.epoch"] = std::to_string(m.data.epoch);
  meta["gptc.data.shard"] = std::to_string(m.data.shard);
  meta["gptc.data.sequence"] = std::to_string(m.data.sequence);
  meta["gptc.vocab"] = std::to_string(m.vocab);
  if (m.wte_rows > 0) meta["gptc.wte_rows"] = std::to_string(m.wte_rows);
  if (!m.run_id.empty()) meta["gptc.run_id"] = m.run_id;
  if (m.val_loss) meta["gptc.val_loss"] = fmt::format("{}", *m.val_loss);  // exact
  const DataSource& d = m.data_source;
  if (!d.files.empty()) {
    meta["gptc.data.train"] = d.train;
    meta["gptc.data.files"] = EncodeFiles(d.files);
    meta["gptc.data.shards"] = d.NamesHash();  // for gptrun versions before shard identities
    meta["gptc.data.seq"] = std::to_string(d.seq);
    meta["gptc.data.seed"] = d.seed;
  }
  return meta;
}

StatusOr<CheckpointMetadata> DecodeCheckpointMetadata(
    const std::map<std::string, std::string>& metadata, const std::string& path) {
  const MetaReader in(metadata, path);
  CheckpointMetadata m;
  ASSIGN_OR_RETURN(m.step, in.Int("gptc.step", 0, kMaxCheckpointStep));
  ASSIGN_OR_RETURN(m.data.epoch, in.Int("gptc.data.epoch", 0, kMaxCheckpointStep));
  if (m.data.epoch > m.step) {
    return in.Bad("gptc.data.epoch", fmt::format("is {}, beyond the step {} (an epoch takes at "
                                                 "least one step)",
                                                 m.data.epoch, m.step));
  }
  ASSIGN_OR_RETURN(m.data.shard, in.Int("gptc.data.shard", 0, kMaxShards));
  ASSIGN_OR_RETURN(m.data.sequence, in.Int("gptc.data.sequence", 0, kMaxShardSequences));
  ASSIGN_OR_RETURN(m.wte_rows, in.Int("gptc.wte_rows", 1, kMaxRows, 0));
  ASSIGN_OR_RETURN(m.vocab, in.Int("gptc.vocab", 1, m.wte_rows > 0 ? m.wte_rows : kMaxRows));
  m.run_id = in.String("gptc.run_id");
  if (in.Has("gptc.run_id") && !IsHex16(m.run_id)) {
    return in.Bad("gptc.run_id", fmt::format("is {}, not 16 hex digits", Shown(m.run_id, 40)));
  }
  if (in.Has("gptc.val_loss")) {
    const std::string s = in.String("gptc.val_loss");
    double loss = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), loss);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(loss) ||
        loss < 0) {
      return in.Bad("gptc.val_loss",
                    fmt::format("is {}, not a finite loss (>= 0)", Shown(s, 40)));
    }
    m.val_loss = loss;
  }
  RETURN_IF_ERROR(in.TooLong("gptc.imported_from"));
  RETURN_IF_ERROR(DecodeDataSource(in, m));
  for (const auto& [k, v] : metadata) {
    if (!k.starts_with("gptc.") && k != "format") m.extra[k] = v;
  }
  return m;
}

namespace {

// FNV-1a-64 over the tensors of Note [checkpoint checksums].
uint64_t HashTensors(const SafeTensors& file) {
  uint64_t h = 0xcbf29ce484222325ull;
  std::vector<const SafeTensor*> sorted;
  for (const SafeTensor& t : file.tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const SafeTensor* a, const SafeTensor* b) { return a->name < b->name; });
  for (const SafeTensor* t : sorted) {
    h = Fnv(t->name, h);
    h = Fnv(t->dtype, h);
    for (int64_t d : t->shape) h = Fnv(std::to_string(d) + ",", h);
    h = Fnv(t->data, h);
  }
  return h;
}

// A checksum as a message shows it: as it is when it looks like one.
std::string ShownChecksum(const std::string& s) {
  const bool plain = s.size() <= 40 && std::all_of(s.begin(), s.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == ':';
                     });
  return plain ? s : Shown(s, 40);
}

}  // namespace

std::string CheckpointChecksum(const SafeTensors& file) {
  uint64_t h = HashTensors(file);
  for (const auto& [key, value] : file.metadata) {
    if (key == kChecksumKey) continue;
    h = Fnv(fmt::format("{}:{}{}:", key.size(), key, value.size()), h);
    h = Fnv(value, h);
  }
  return "fnv1a64m:" + Hex(h);
}

Status VerifyCheckpointChecksum(const SafeTensors& file, const std::string& path) {
  auto it = file.metadata.find(kChecksumKey);
  if (it == file.metadata.end()) return Status::Ok();  // written before checksums
  const std::string& said = it->second;
  std::string actual;
  if (said.starts_with("fnv1a64m:")) {
    actual = CheckpointChecksum(file);
  } else if (said.starts_with("fnv1a64:")) {  // written before the metadata was covered
    actual = "fnv1a64:" + Hex(HashTensors(file));
  } else {
    return Error("{}: __metadata__ '{}' is {}, not a checksum this gptrun knows", path,
                 kChecksumKey, ShownChecksum(said));
  }
  if (said != actual) {
    return Error(
        "{}: checksum mismatch: __metadata__ says {}, the tensors and metadata give {} (the file "
        "is corrupt; resume from another checkpoint)",
        path, ShownChecksum(said), actual);
  }
  return Status::Ok();
}

}  // namespace gptc::rt
