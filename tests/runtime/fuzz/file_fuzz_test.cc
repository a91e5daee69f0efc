// Robustness of the readers of files gptrun takes from others: safetensors
// files, a checkpoint's metadata (through its checksum), token shards and
// eval files (HellaSwag).
//
// Valid files and the crafted cases that once got through (a step of 2^63-1
// or -5, repeated keys, overlapping offsets, a 100,000-dimension shape) are
// mutated at random with a fixed seed: bytes flipped, overwritten, inserted,
// deleted, the file cut or extended, numbers in the JSON header replaced by
// edge values, header entries repeated, the header length field left stale
// or set to an edge value. Every mutant must be accepted or refused with one
// short line naming the file, and what is accepted must hold what the reader
// promises (offsets tiling the data, metadata within its ranges, tokens below
// the vocabulary) and survive a write and a read unchanged. No libFuzzer: g++
// builds it, and scripts/test runs it under AddressSanitizer + UBSan, where a
// memory error, a leak or undefined behaviour fails it too. Each test stops
// at kBudget whatever its case count, so a slow sanitizer build stays bounded.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/checkpoint_metadata.h"
#include "runtime/data_loader.h"
#include "runtime/eval_file.h"
#include "runtime/safetensors.h"

namespace gptc::rt {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kBudget = std::chrono::seconds(45);
constexpr size_t kMaxErrorChars = 400;

// A small deterministic generator (std distributions differ across standard libraries).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {  // splitmix64
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  size_t Below(size_t n) { return static_cast<size_t>(Next() % n); }

 private:
  uint64_t state_;
};

constexpr std::string_view kEdgeNumbers[] = {
    "0", "-1", "1", "2", "-5", "7", "255", "256", "1023", "1024", "65535", "65536",
    "2147483647", "2147483648", "4294967295", "1099511627776", "1099511627777",
    "9223372036854775807", "-9223372036854775808", "18446744073709551615",
    "99999999999999999999", "1e400", "-0", "0.5", "nan", "true", "null", "\"7\""};
constexpr std::string_view kInteresting = "{}[],:\"\\0123456789-e ";

// Byte-level mutations of `s`.
void MutateBytes(std::string& s, Rng& rng) {
  switch (rng.Below(7)) {
    case 0:
      if (!s.empty()) s.resize(rng.Below(s.size()));
      break;
    case 1:
      if (!s.empty()) s[rng.Below(s.size())] ^= static_cast<char>(1 << rng.Below(8));
      break;
    case 2:
      if (!s.empty()) s[rng.Below(s.size())] = static_cast<char>(rng.Below(256));
      break;
    case 3:
      s.insert(s.begin() + static_cast<std::ptrdiff_t>(rng.Below(s.size() + 1)),
               kInteresting[rng.Below(kInteresting.size())]);
      break;
    case 4:
      if (!s.empty()) s.erase(rng.Below(s.size()), 1 + rng.Below(8));
      break;
    case 5:
      s.append(1 + rng.Below(16), static_cast<char>(rng.Below(256)));
      break;
    case 6: {  // copy a stretch over another place
      if (s.size() < 2) break;
      const size_t from = rng.Below(s.size()), to = rng.Below(s.size());
      const size_t n = std::min({s.size() - from, s.size() - to, 1 + rng.Below(32)});
      s.replace(to, n, s.substr(from, n));
      break;
    }
  }
}

// JSON-aware mutations of a header's text: numbers, strings and entries.
void MutateJson(std::string& text, Rng& rng) {
  auto digits_at = [&](size_t at) {
    size_t end = at;
    while (end < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '-')) {
      ++end;
    }
    return end;
  };
  switch (rng.Below(4)) {
    case 0: {  // a number replaced by an edge value
      std::vector<size_t> starts;
      for (size_t i = 0; i < text.size(); ++i) {
        if (std::isdigit(static_cast<unsigned char>(text[i])) &&
            (i == 0 || !std::isdigit(static_cast<unsigned char>(text[i - 1])))) {
          starts.push_back(i);
        }
      }
      if (starts.empty()) break;
      const size_t at = starts[rng.Below(starts.size())];
      text.replace(at, digits_at(at) - at,
                   std::string(kEdgeNumbers[rng.Below(std::size(kEdgeNumbers))]));
      break;
    }
    case 1: {  // an entry `"key":{...}` repeated after itself
      const size_t open = text.find("\":{", rng.Below(text.size() + 1));
      if (open == std::string::npos) break;
      const size_t key = text.rfind('"', open - 1);
      const size_t close = text.find('}', open);
      if (key == std::string::npos || close == std::string::npos) break;
      text.insert(close + 1, "," + text.substr(key, close + 1 - key));
      break;
    }
    case 2: {  // a string's contents replaced by another's
      std::vector<size_t> quotes;
      for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '"') quotes.push_back(i);
      }
      if (quotes.size() < 4) break;
      const size_t a = rng.Below(quotes.size() / 2) * 2, b = rng.Below(quotes.size() / 2) * 2;
      const std::string with = text.substr(quotes[b], quotes[b + 1] - quotes[b] + 1);
      text.replace(quotes[a], quotes[a + 1] - quotes[a] + 1, with);
      break;
    }
    case 3:
      MutateBytes(text, rng);
      break;
  }
}

// A safetensors file's bytes from its header text and data: the length field
// right, or (sometimes) stale or an edge value.
std::string Assemble(const std::string& header, const std::string& data, uint64_t length,
                     Rng& rng) {
  uint64_t n = header.size();
  const size_t pick = rng.Below(20);
  if (pick == 0) n = length;  // as before the mutation
  if (pick == 1) n = UINT64_MAX - rng.Below(16);
  if (pick == 2) n = header.size() + data.size() + rng.Below(3);
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  return bytes + header + data;
}

// A safetensors file mutated: its header as JSON or bytes, its data, or the whole.
std::string MutateSafeTensors(const std::string& file, Rng& rng) {
  uint64_t length = 0;
  if (file.size() >= 8) std::memcpy(&length, file.data(), 8);
  if (file.size() < 8 || length > file.size() - 8 || rng.Below(8) == 0) {
    std::string bytes = file;
    MutateBytes(bytes, rng);
    return bytes;
  }
  std::string header = file.substr(8, length), data = file.substr(8 + length);
  const int mutations = rng.Below(4) == 0 ? 2 + static_cast<int>(rng.Below(3)) : 1;
  for (int k = 0; k < mutations; ++k) {
    if (rng.Below(5) == 0) {
      MutateBytes(data, rng);
    } else {
      MutateJson(header, rng);
    }
  }
  return Assemble(header, data, length, rng);
}

// The broken promise of an error message, or "".
std::string CheckError(const Status& s, const std::string& name) {
  const std::string& m = s.message();
  if (m.find('\n') != std::string::npos) return "an error of several lines: " + m;
  if (m.size() > kMaxErrorChars) return fmt::format("an error of {} characters", m.size());
  if (!m.starts_with(name + ": ")) return "an error that does not name the file: " + m;
  return "";
}

struct Tally {
  int cases = 0, accepted = 0, refused = 0, failures = 0;
};

// Mutates each seed until kBudget or `cases_per_seed` mutants, checking each with `check`.
Tally Fuzz(const std::vector<std::string>& seeds, int cases_per_seed, uint64_t seed,
           const std::function<std::string(const std::string&)>& mutate,
           const std::function<std::string(const std::string&, Tally&)>& check) {
  Tally tally;
  Rng rng(seed);
  const auto start = Clock::now();
  for (const std::string& s : seeds) {
    for (int i = 0; i < cases_per_seed && Clock::now() - start < kBudget; ++i) {
      std::string mutant = s;
      const int mutations = rng.Below(3) == 0 ? 2 : 1;
      for (int k = 0; k < mutations; ++k) mutant = mutate(mutant);
      ++tally.cases;
      const std::string broken = check(mutant, tally);
      if (!broken.empty() && ++tally.failures <= 5) {
        ADD_FAILURE() << broken << "\n--- mutant " << i << " (" << mutant.size()
                      << " bytes):\n" << mutant.substr(0, 2000);
      }
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("fuzz: %d cases in %.2f s: %d accepted, %d refused\n", tally.cases, seconds,
              tally.accepted, tally.refused);
  return tally;
}

// --- safetensors -----------------------------------------------------------

std::string RawFile(const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  return bytes + header + data;
}

std::vector<std::string> SafeTensorsSeeds() {
  SafeTensors file;
  file.tensors.push_back(F32Tensor("h.0.attn.c_attn.weight", {2, 3}, {1, 2, 3, 4, 5, 6}));
  file.tensors.push_back(SafeTensor{"step", "I64", {}, std::string(8, '\x01')});
  file.tensors.push_back(SafeTensor{"half", "BF16", {2}, std::string("\x80\x3f\x00\x40", 4)});
  file.tensors.push_back(SafeTensor{"empty", "F32", {0, 4}, ""});
  file.metadata = {{"format", "pt"}, {"gptc.step", "42"}};
  std::vector<std::string> seeds = {*SerializeSafeTensors(file)};
  const std::string data(24, '\x11');
  seeds.push_back(RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("a":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                          data));
  seeds.push_back(RawFile(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                          R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                          data));
  seeds.push_back(RawFile(R"({"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,)"
                          R"(1,1,1,1,1,1,1,24],"data_offsets":[0,24]}})",
                          data));
  return seeds;
}

std::string CheckSafeTensors(const std::string& bytes, Tally& tally) {
  const std::string name = "fuzz.safetensors";
  StatusOr<SafeTensors> parsed = ParseSafeTensors(bytes, name);
  if (!parsed.ok()) {
    ++tally.refused;
    return CheckError(parsed.status(), name);
  }
  ++tally.accepted;
  StatusOr<std::string> again = SerializeSafeTensors(*parsed);
  if (!again.ok()) return "an accepted file does not write: " + again.status().message();
  StatusOr<SafeTensors> back = ParseSafeTensors(*again, name);
  if (!back.ok()) return "a written file does not read: " + back.status().message();
  if (back->metadata != parsed->metadata || back->tensors.size() != parsed->tensors.size()) {
    return "a write and a read change the file";
  }
  for (size_t i = 0; i < back->tensors.size(); ++i) {
    const SafeTensor &a = parsed->tensors[i], &b = back->tensors[i];
    if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || a.data != b.data) {
      return "a write and a read change tensor " + a.name;
    }
  }
  return "";
}

TEST(FileFuzzTest, SafeTensorsReaderRefusesEveryBadFileInOneLine) {
  const std::vector<std::string> seeds = SafeTensorsSeeds();
  Rng rng(0x73616665);  // "safe"
  Tally tally = Fuzz(seeds, 8000, 0x73616665,
                     [&](const std::string& s) { return MutateSafeTensors(s, rng); },
                     CheckSafeTensors);
  EXPECT_EQ(tally.failures, 0);
  EXPECT_GE(tally.cases, 2000);
  EXPECT_GT(tally.accepted, tally.cases / 50);
  EXPECT_GT(tally.refused, tally.cases / 2);
}

// The crafted files of the defects, each refused in one short line.
TEST(FileFuzzTest, CraftedSafeTensorsAreRefused) {
  std::string shape = "[";
  for (int i = 0; i < 100000; ++i) shape += i ? ",1" : "1";
  shape += "]";
  const std::string data(24, '\x11');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("a":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
               data),
       "the header names 'a' twice"},
      {RawFile(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
               R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
               data),
       "overlap those of tensor 'a', which end at 16"},
      {RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data),
       "begin at 8, but the tensor before ends at 0"},
      {RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data),
       "16 bytes after the last tensor's data"},
      {RawFile(R"({"a":{"dtype":"U8","shape":)" + shape + R"(,"data_offsets":[0,1]}})", "x"),
       "shape of rank 100000, above the limit of 16"},
      {RawFile(R"({"__metadata__":{"k":"1","k":"2"}})", ""), "the header names 'k' twice"},
      {RawFile(" {}", ""), "does not start with '{'"},
  };
  Tally tally;
  for (const auto& [bytes, want] : cases) {
    StatusOr<SafeTensors> r = ParseSafeTensors(bytes, "fuzz.safetensors");
    ASSERT_FALSE(r.ok()) << want;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
    EXPECT_EQ(CheckError(r.status(), "fuzz.safetensors"), "");
  }
}

// --- checkpoint metadata ---------------------------------------------------

// A checkpoint model file of tiny tensors with every metadata field, with or
// without its checksum, and the crafted steps of the defects.
std::vector<std::string> CheckpointSeeds() {
  CheckpointMetadata meta{.step = 40,
                          .data = {.epoch = 1, .shard = 1, .sequence = 12},
                          .vocab = 300,
                          .wte_rows = 320,
                          .run_id = "0123456789abcdef",
                          .val_loss = 3.25};
  meta.data_source =
      DataSource{.train = "data/train_*.bin",
                 .files = {{"train_000.bin", 4096, 0x1234}, {"train_001.bin", 2048, 7}},
                 .seq = 64,
                 .seed = "5"};
  SafeTensors file;
  file.tensors.push_back(F32Tensor("wte.weight", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}));
  file.tensors.push_back(F32Tensor("wpe.weight", {2}, {0.5f, 0.25f}));
  std::vector<std::string> seeds;
  for (const char* step : {"40", "9223372036854775807", "-5"}) {
    file.metadata = EncodeCheckpointMetadata(meta);
    file.metadata["gptc.step"] = step;
    file.metadata.erase(kChecksumKey);
    seeds.push_back(*SerializeSafeTensors(file));
    file.metadata[kChecksumKey] = CheckpointChecksum(file);
    seeds.push_back(*SerializeSafeTensors(file));
  }
  return seeds;
}

std::string CheckCheckpoint(const std::string& bytes, Tally& tally) {
  const std::string name = "ckpt/model.safetensors";
  StatusOr<SafeTensors> parsed = ParseSafeTensors(bytes, name);
  Status s = parsed.ok() ? VerifyCheckpointChecksum(*parsed, name) : parsed.status();
  StatusOr<CheckpointMetadata> m =
      s.ok() ? DecodeCheckpointMetadata(parsed->metadata, name) : StatusOr<CheckpointMetadata>(s);
  if (!m.ok()) {
    ++tally.refused;
    return CheckError(m.status(), name);
  }
  ++tally.accepted;
  if (m->step < 0 || m->step > kMaxCheckpointStep || m->data.epoch < 0 ||
      m->data.epoch > m->step || m->data.shard < 0 || m->data.sequence < 0 || m->vocab < 1 ||
      (m->wte_rows > 0 && m->vocab > m->wte_rows) ||
      (m->val_loss && !(*m->val_loss >= 0 && std::isfinite(*m->val_loss)))) {
    return fmt::format("accepted out of range: step {} epoch {} shard {} sequence {} vocab {}",
                       m->step, m->data.epoch, m->data.shard, m->data.sequence, m->vocab);
  }
  const DataSource& d = m->data_source;
  if (!d.files.empty() && m->data.shard > static_cast<int64_t>(d.files.size())) {
    return "accepted a shard index beyond the recorded shards";
  }
  StatusOr<CheckpointMetadata> again =
      DecodeCheckpointMetadata(EncodeCheckpointMetadata(*m), name);
  if (!again.ok()) return "accepted metadata does not read back: " + again.status().message();
  if (again->step != m->step || !(again->data == m->data) || again->run_id != m->run_id ||
      again->data_source.files != d.files || again->val_loss != m->val_loss) {
    return "accepted metadata changes when written and read";
  }
  return "";
}

TEST(FileFuzzTest, CheckpointMetadataReaderKeepsEveryFieldInRange) {
  const std::vector<std::string> seeds = CheckpointSeeds();
  Rng rng(0x636b7074);  // "ckpt"
  Tally tally = Fuzz(seeds, 3000, 0x636b7074,
                     [&](const std::string& s) { return MutateSafeTensors(s, rng); },
                     CheckCheckpoint);
  EXPECT_EQ(tally.failures, 0);
  EXPECT_GE(tally.cases, 2000);
  EXPECT_GT(tally.accepted, tally.cases / 100);
  EXPECT_GT(tally.refused, tally.cases / 2);
}

// --- token shards ----------------------------------------------------------

std::vector<std::string> ShardSeeds() {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 300; ++i) tokens.push_back((i * 37) % 300);
  return {EncodeShard(tokens), EncodeShard({}), EncodeShard({299, 0, 1})};
}

std::string MutateShard(std::string s, Rng& rng) {
  if (s.size() >= 12 && rng.Below(3) == 0) {  // a header int set to an edge value
    constexpr int32_t kEdges[] = {0, -1, 1, 2, 20240520, 20240521, INT32_MAX, INT32_MIN, 150, 151};
    const int32_t v = kEdges[rng.Below(std::size(kEdges))];
    std::memcpy(s.data() + 4 * rng.Below(3), &v, 4);
    return s;
  }
  MutateBytes(s, rng);
  return s;
}

std::string CheckShard(const std::string& bytes, Tally& tally) {
  const std::string name = "fuzz/train_000.bin";
  constexpr int64_t kVocab = 300;
  StatusOr<std::vector<uint16_t>> tokens = ParseShard(bytes, name, kVocab);
  if (!tokens.ok()) {
    ++tally.refused;
    return CheckError(tokens.status(), name);
  }
  ++tally.accepted;
  if (bytes.size() != static_cast<size_t>(kShardHeaderBytes) + 2 * tokens->size()) {
    return "accepted a shard whose size is not its header's count";
  }
  for (uint16_t t : *tokens) {
    if (t >= kVocab) return fmt::format("accepted token {} of a vocabulary of {}", t, kVocab);
  }
  return "";
}

TEST(FileFuzzTest, ShardReaderRefusesEveryBadShardInOneLine) {
  const std::vector<std::string> seeds = ShardSeeds();
  Rng rng(0x73686172);  // "shar"
  Tally tally = Fuzz(seeds, 20000, 0x73686172,
                     [&](const std::string& s) { return MutateShard(s, rng); }, CheckShard);
  EXPECT_EQ(tally.failures, 0);
  EXPECT_GE(tally.cases, 2000);
  EXPECT_GT(tally.accepted, tally.cases / 50);
  EXPECT_GT(tally.refused, tally.cases / 2);
}

// --- eval files ------------------------------------------------------------

std::vector<std::string> EvalSeeds() {
  std::vector<EvalExample> set;
  for (int64_t i = 0; i < 4; ++i) {
    EvalExample e{.index = i, .label = i % 3, .context = {}, .completions = {}};
    for (int64_t t = 0; t < 2 + i; ++t) e.context.push_back(static_cast<int32_t>((37 * t) % 300));
    for (int64_t k = 0; k < 3 + i % 2; ++k) {
      e.completions.push_back(std::vector<int32_t>(1 + (i + k) % 3, static_cast<int32_t>(299 - k)));
    }
    set.push_back(e);
  }
  const std::vector<EvalExample> one = {
      {.index = 0, .label = 0, .context = {}, .completions = {{}}}};
  return {*EncodeEvalFile(set), *EncodeEvalFile(one)};
}

std::string MutateEval(std::string s, Rng& rng) {
  if (s.size() >= 16 && rng.Below(3) == 0) {  // a header int set to an edge value
    constexpr int32_t kEdges[] = {0, -1, 1, 2, 3, 4, 5, 14, 20240522, INT32_MAX, INT32_MIN, 65535};
    const int32_t v = kEdges[rng.Below(std::size(kEdges))];
    std::memcpy(s.data() + 4 * rng.Below(4), &v, 4);
    return s;
  }
  if (s.size() > static_cast<size_t>(kEvalHeaderBytes) + 2 && rng.Below(2) == 0) {
    constexpr uint16_t kEdges[] = {0, 1, 2, 3, 4, 5, 12, 14, 299, 300, 65534, 65535};
    const size_t at = kEvalHeaderBytes + 2 * rng.Below((s.size() - kEvalHeaderBytes) / 2);
    const uint16_t v = kEdges[rng.Below(std::size(kEdges))];
    std::memcpy(s.data() + at, &v, 2);  // an example's uint16 field set to an edge value
    return s;
  }
  MutateBytes(s, rng);
  return s;
}

std::string CheckEval(const std::string& bytes, Tally& tally) {
  const std::string name = "fuzz/hellaswag_val.bin";
  constexpr int64_t kVocab = 300;
  StatusOr<EvalSet> set = ParseEvalFile(bytes, name, kVocab);
  if (!set.ok()) {
    ++tally.refused;
    return CheckError(set.status(), name);
  }
  ++tally.accepted;
  for (const EvalExample& e : set->examples) {
    if (e.label < 0 || e.label >= static_cast<int64_t>(e.completions.size())) {
      return fmt::format("accepted label {} of {} completions", e.label, e.completions.size());
    }
    std::vector<int32_t> ids = e.context;
    for (const std::vector<int32_t>& c : e.completions) ids.insert(ids.end(), c.begin(), c.end());
    for (int32_t t : ids) {
      if (t >= kVocab) return fmt::format("accepted token {} of a vocabulary of {}", t, kVocab);
    }
  }
  // What was accepted writes back to the same bytes (the reserved header ints aside).
  StatusOr<std::string> again = EncodeEvalFile(set->examples);
  if (!again.ok()) return "accepted a file its writer refuses: " + again.status().message();
  if (again->size() != bytes.size() || again->compare(0, 16, bytes, 0, 16) != 0 ||
      again->compare(kEvalHeaderBytes, std::string::npos, bytes, kEvalHeaderBytes) != 0) {
    return "accepted a file that does not write back the same";
  }
  return "";
}

TEST(FileFuzzTest, EvalFileReaderRefusesEveryBadFileInOneLine) {
  const std::vector<std::string> seeds = EvalSeeds();
  Rng rng(0x6576616c);  // "eval"
  Tally tally = Fuzz(
      seeds, 20000, 0x6576616c, [&](const std::string& s) { return MutateEval(s, rng); },
      CheckEval);
  EXPECT_EQ(tally.failures, 0);
  EXPECT_GE(tally.cases, 2000);
  EXPECT_GT(tally.accepted, tally.cases / 50);
  EXPECT_GT(tally.refused, tally.cases / 2);
}

}  // namespace
}  // namespace gptc::rt
