#include "runtime/eval_file.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "compiler/support/file.h"

namespace gptc::rt {
namespace {

// The smallest example: its six fields and one completion's length.
constexpr int64_t kMinExampleBytes = 2 * (kEvalExampleFields + 1);
constexpr int64_t kMaxU16 = std::numeric_limits<uint16_t>::max();

void AppendU16(std::string& out, int64_t v) {
  const auto u = static_cast<uint16_t>(v);
  out.append(reinterpret_cast<const char*>(&u), 2);  // little-endian hosts only, as llm.c
}

int32_t ReadInt32(std::string_view bytes, int64_t offset) {
  int32_t v;
  std::memcpy(&v, bytes.data() + offset, 4);
  return v;
}

// Checks one example's fields before writing them.
Status CheckExample(const EvalExample& e, int64_t position) {
  const int64_t n = static_cast<int64_t>(e.completions.size());
  if (n == 0) return Error("example {}: no completions", position);
  if (e.label < 0 || e.label >= n) {
    return Error("example {}: label {} is not one of its {} completions", position, e.label, n);
  }
  if (e.index < 0 || e.index > kMaxU16) {
    return Error("example {}: index {} does not fit the format's uint16", position, e.index);
  }
  auto bad_token = [](const std::vector<int32_t>& ids) {
    return std::find_if(ids.begin(), ids.end(), [](int32_t t) { return t < 0 || t >= kMaxU16; });
  };
  if (auto it = bad_token(e.context); it != e.context.end()) {
    return Error("example {}: context token id {} does not fit below 65535", position, *it);
  }
  for (const std::vector<int32_t>& c : e.completions) {
    if (auto it = bad_token(c); it != c.end()) {
      return Error("example {}: completion token id {} does not fit below 65535", position, *it);
    }
  }
  return Status::Ok();
}

// One example's uint16 stream.
StatusOr<std::string> EncodeExample(const EvalExample& e, int64_t position) {
  RETURN_IF_ERROR(CheckExample(e, position));
  std::string out;
  AppendU16(out, kEvalStartMarker);
  AppendU16(out, 0);  // the size, below
  AppendU16(out, e.index);
  AppendU16(out, e.label);
  AppendU16(out, static_cast<int64_t>(e.completions.size()));
  AppendU16(out, static_cast<int64_t>(e.context.size()));
  for (int32_t t : e.context) AppendU16(out, t);
  for (const std::vector<int32_t>& c : e.completions) {
    AppendU16(out, static_cast<int64_t>(c.size()));
    for (int32_t t : c) AppendU16(out, t);
  }
  if (static_cast<int64_t>(out.size()) > kMaxU16 - 1) {
    return Error("example {}: {} bytes, more than the format's 65534", position, out.size());
  }
  const auto size = static_cast<uint16_t>(out.size());
  std::memcpy(out.data() + 2, &size, 2);
  return out;
}

// Reads an example's uint16 fields in order, bounded by the example's end.
class ExampleReader {
 public:
  ExampleReader(std::string_view bytes, int64_t begin, int64_t end)
      : bytes_(bytes), at_(begin), end_(end) {}
  bool Has(int64_t count) const { return count >= 0 && at_ + 2 * count <= end_; }
  int64_t Next() {
    uint16_t v;
    std::memcpy(&v, bytes_.data() + at_, 2);
    at_ += 2;
    return v;
  }
  int64_t at() const { return at_; }

 private:
  std::string_view bytes_;
  int64_t at_, end_;
};

// Reads `count` token ids (the caller checked they fit) below `vocab`.
Status ReadTokens(ExampleReader& r, int64_t count, int64_t vocab, const std::string& where,
                  const char* field, std::vector<int32_t>* out) {
  out->reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = r.Next();
    if (t >= vocab) {
      return CorruptError("{}: {} token {} is id {}, not below the vocabulary size {}", where,
                          field, i, t, vocab);
    }
    out->push_back(static_cast<int32_t>(t));
  }
  return Status::Ok();
}

// Reads the completions of example `e` from `r`, each length inside the example.
Status ReadCompletions(ExampleReader& r, int64_t count, int64_t vocab, const std::string& where,
                       EvalExample* e) {
  e->completions.resize(count);
  for (int64_t k = 0; k < count; ++k) {
    if (!r.Has(1)) {
      return CorruptError("{}: completion {} of {} starts past the example's end", where, k, count);
    }
    const int64_t length = r.Next();
    if (!r.Has(length)) {
      return CorruptError("{}: completion {} length {} runs past the example's end", where, k,
                          length);
    }
    const std::string field = fmt::format("completion {}", k);
    RETURN_IF_ERROR(ReadTokens(r, length, vocab, where, field.c_str(), &e->completions[k]));
  }
  return Status::Ok();
}

// Parses the example at byte `offset` (position `position`), which the
// header bounds by `longest`; returns its size in bytes.
StatusOr<int64_t> ParseExample(std::string_view bytes, const std::string& name, int64_t position,
                               int64_t offset, int64_t longest, int64_t vocab, EvalExample* e) {
  const int64_t size = static_cast<int64_t>(bytes.size());
  std::string where = fmt::format("{}: example {} (byte offset {})", name, position, offset);
  if (offset + 2 * kEvalExampleFields > size) {
    return CorruptError("{}: truncated: the file ends {} bytes into the example's fields", where,
                        size - offset);
  }
  ExampleReader head(bytes, offset, offset + 2 * kEvalExampleFields);
  if (const int64_t marker = head.Next(); marker != kEvalStartMarker) {
    return CorruptError("{}: start marker is {}, expected {}", where, marker, kEvalStartMarker);
  }
  const int64_t example_bytes = head.Next();
  e->index = head.Next();
  where =
      fmt::format("{}: example {} (index {}, byte offset {})", name, position, e->index, offset);
  if (example_bytes < kMinExampleBytes || example_bytes % 2 != 0 || example_bytes > longest) {
    return CorruptError("{}: byte count {} is not an even size in [{}, {}] (the header's longest)",
                        where, example_bytes, kMinExampleBytes, longest);
  }
  if (offset + example_bytes > size) {
    return CorruptError("{}: truncated: byte count {} runs past the end of the file ({} bytes)",
                        where, example_bytes, size);
  }
  e->label = head.Next();
  const int64_t completions = head.Next();
  const int64_t context = head.Next();
  if (completions < 1) return CorruptError("{}: completion count is 0", where);
  if (e->label >= completions) {
    return CorruptError("{}: label {} is not one of its {} completions", where, e->label,
                        completions);
  }
  ExampleReader r(bytes, head.at(), offset + example_bytes);
  if (!r.Has(context)) {
    return CorruptError("{}: context length {} runs past the example's end", where, context);
  }
  RETURN_IF_ERROR(ReadTokens(r, context, vocab, where, "context", &e->context));
  RETURN_IF_ERROR(ReadCompletions(r, completions, vocab, where, e));
  if (r.at() != offset + example_bytes) {
    return CorruptError("{}: byte count {} but its fields fill {}", where, example_bytes,
                        r.at() - offset);
  }
  return example_bytes;
}

// Checks the header; returns the example count.
StatusOr<int64_t> CheckEvalHeader(std::string_view bytes, const std::string& name) {
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size < kEvalHeaderBytes) {
    return CorruptError("{}: short file: {} bytes, the eval file header needs {}", name, size,
                        kEvalHeaderBytes);
  }
  if (const int32_t magic = ReadInt32(bytes, 0); magic != kEvalMagic) {
    return CorruptError("{}: offset 0: bad magic {}, expected {} (not an eval file)", name, magic,
                        kEvalMagic);
  }
  if (const int32_t version = ReadInt32(bytes, 4); version != kEvalVersion) {
    return CorruptError("{}: offset 4: unsupported version {}, expected {}", name, version,
                        kEvalVersion);
  }
  const int64_t count = ReadInt32(bytes, 8);
  const int64_t fits = (size - kEvalHeaderBytes) / kMinExampleBytes;
  if (count < 1 || count > fits) {
    return CorruptError(
        "{}: offset 8: example count {} is not in [1, {}] (what the {} bytes after the header "
        "can hold)",
        name, count, fits, size - kEvalHeaderBytes);
  }
  const int64_t longest = ReadInt32(bytes, 12);
  if (longest < kMinExampleBytes || longest > kMaxU16) {
    return CorruptError("{}: offset 12: longest example {} bytes is not in [{}, {}]", name, longest,
                        kMinExampleBytes, kMaxU16);
  }
  return count;
}

}  // namespace

StatusOr<std::string> EncodeEvalFile(const std::vector<EvalExample>& examples) {
  const int64_t count = static_cast<int64_t>(examples.size());
  if (count == 0 || count >= kMaxU16 + 1) {
    return Error("{} examples: an eval file holds 1 to {}", count, kMaxU16);
  }
  std::string body;
  int64_t longest = 0;
  for (int64_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(std::string stream, EncodeExample(examples[i], i));
    longest = std::max<int64_t>(longest, stream.size());
    body += stream;
  }
  std::string out(kEvalHeaderBytes, '\0');
  const int32_t header[4] = {kEvalMagic, kEvalVersion, static_cast<int32_t>(count),
                             static_cast<int32_t>(longest)};
  std::memcpy(out.data(), header, sizeof(header));
  return out + body;
}

StatusOr<EvalSet> ParseEvalFile(std::string_view bytes, const std::string& name, int64_t vocab) {
  ASSIGN_OR_RETURN(const int64_t count, CheckEvalHeader(bytes, name));
  EvalSet set;
  set.longest_example_bytes = ReadInt32(bytes, 12);
  // Examples grow as they are read: what a count allocates is what the file holds.
  int64_t offset = kEvalHeaderBytes, longest_seen = 0;
  for (int64_t i = 0; i < count; ++i) {
    set.examples.emplace_back();
    ASSIGN_OR_RETURN(const int64_t n,
                     ParseExample(bytes, name, i, offset, set.longest_example_bytes, vocab,
                                  &set.examples.back()));
    offset += n;
    longest_seen = std::max(longest_seen, n);
  }
  if (offset != static_cast<int64_t>(bytes.size())) {
    return CorruptError("{}: {} trailing bytes after the last of {} examples (byte offset {})",
                        name, static_cast<int64_t>(bytes.size()) - offset, count, offset);
  }
  if (longest_seen != set.longest_example_bytes) {
    return CorruptError("{}: offset 12: longest example {} bytes, but the longest is {}", name,
                        set.longest_example_bytes, longest_seen);
  }
  return set;
}

StatusOr<EvalSet> ReadEvalFile(const std::string& path, int64_t vocab) {
  ASSIGN_OR_RETURN(const std::string bytes, ReadFile(path));
  return ParseEvalFile(bytes, path, vocab);
}

}  // namespace gptc::rt
