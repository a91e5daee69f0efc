#include "runtime/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "compiler/support/file.h"

namespace gptc::rt {

using nlohmann::json;

const SafeTensor* SafeTensors::Find(const std::string& name) const {
  for (const SafeTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

int64_t DTypeBytes(const std::string& dtype) {
  static const std::map<std::string, int64_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

namespace {

// Note [strict safetensors]: the reader is as strict as Hugging Face's
// (safetensors' Metadata::validate) and a little more, so that a damaged or
// crafted file is refused with one short line instead of being misread:
// - the header is at most kMaxHeaderBytes, starts with '{' and is a JSON
//   object in which no object repeats a key (a JSON parser would keep the
//   last of two "wte.weight" entries silently);
// - every tensor has a known dtype, a shape of at most kMaxRank non-negative
//   dimensions and data_offsets [begin, end] holding exactly its bytes;
// - sorted by offset, the tensors tile the data: the first begins at 0, each
//   begins where the previous ends (no overlap, no gap), the last ends at the
//   end of the file;
// - __metadata__ is an object of strings.
// Names, dtypes and values in messages are cut short (Shown), so a line stays
// one short line whatever the file holds.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // safetensors' own limit
constexpr size_t kMaxRank = 16;

StatusOr<int64_t> ElementCount(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 50) / d)) return Error("bad dimension {}", d);
    n *= d;
  }
  return n;
}

// One tensor's entry in the header, before its bytes are read.
struct Entry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

struct Header {
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
};

// The first key that an object of the JSON text repeats, found while parsing.
class DuplicateKeys {
 public:
  bool Event(json::parse_event_t event, const json& parsed) {
    if (event == json::parse_event_t::object_start) open_.emplace_back();
    if (event == json::parse_event_t::object_end && !open_.empty()) open_.pop_back();
    if (event == json::parse_event_t::key && !open_.empty() && first_.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!open_.back().insert(key).second) first_ = key.empty() ? "\"\"" : key;
    }
    return true;
  }
  const std::string& first() const { return first_; }

 private:
  std::vector<std::set<std::string>> open_;
  std::string first_;
};

StatusOr<Entry> ParseEntry(const std::string& key, const json& value, const std::string& name) {
  auto bad = [&](std::string_view what) {
    return Error("{}: tensor {}: {}", name, Shown(key), what);
  };
  if (!value.is_object() || !value.contains("dtype") || !value["dtype"].is_string() ||
      !value.contains("shape") || !value["shape"].is_array() || !value.contains("data_offsets") ||
      !value["data_offsets"].is_array() || value["data_offsets"].size() != 2) {
    return bad("needs dtype, shape and data_offsets [begin, end]");
  }
  Entry e;
  e.name = key;
  e.dtype = value["dtype"].get<std::string>();
  if (DTypeBytes(e.dtype) == 0) return bad(fmt::format("unknown dtype {}", Shown(e.dtype)));
  if (value["shape"].size() > kMaxRank) {
    return bad(fmt::format("shape of rank {}, above the limit of {}", value["shape"].size(),
                           kMaxRank));
  }
  for (const json& d : value["shape"]) {
    if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<uint64_t>() > INT64_MAX)) {
      return bad("shape holds a non-integer");
    }
    e.shape.push_back(d.get<int64_t>());
  }
  const json& offs = value["data_offsets"];
  if (!offs[0].is_number_unsigned() || !offs[1].is_number_unsigned()) {
    return bad("data_offsets are not unsigned integers");
  }
  e.begin = offs[0].get<uint64_t>();
  e.end = offs[1].get<uint64_t>();
  StatusOr<int64_t> n = ElementCount(e.shape);
  if (!n.ok()) return bad(n.status().message());
  if (e.begin > e.end || e.end - e.begin != static_cast<uint64_t>(*n * DTypeBytes(e.dtype))) {
    return bad(fmt::format("data_offsets [{}, {}] do not hold {} elements of {}", e.begin, e.end,
                           *n, e.dtype));
  }
  return e;
}

// Sorted by offset, the entries must tile [0, data_size) (Note [strict safetensors]).
Status CheckTiling(std::vector<Entry>& entries, uint64_t data_start, uint64_t data_size,
                   const std::string& name) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t at = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.end > data_size) {
      return Error("{}: truncated: tensor {} ends at offset {}, file has {} bytes", name,
                   Shown(e.name), data_start + e.end, data_start + data_size);
    }
    if (e.begin < at) {
      return Error(
          "{}: tensor {}: data_offsets [{}, {}] overlap those of tensor {}, which end at {}", name,
          Shown(e.name), e.begin, e.end, Shown(previous->name), at);
    }
    if (e.begin > at) {
      return Error("{}: tensor {}: data_offsets begin at {}, but the tensor before ends at {} "
                   "(bytes between belong to no tensor)",
                   name, Shown(e.name), e.begin, at);
    }
    at = e.end;
    previous = &e;
  }
  if (at != data_size) {
    return Error("{}: {} bytes after the last tensor's data (offset {}) belong to no tensor", name,
                 data_size - at, data_start + at);
  }
  return Status::Ok();
}

// The header's JSON `text`, followed by `data_size` bytes of tensor data.
StatusOr<Header> ParseHeader(std::string_view text, uint64_t data_size, const std::string& name) {
  if (text.empty() || text[0] != '{') {
    return Error("{}: offset 8: the header does not start with '{{'", name);
  }
  DuplicateKeys duplicates;
  json header = json::parse(
      text.begin(), text.end(),
      [&](int, json::parse_event_t event, json& parsed) { return duplicates.Event(event, parsed); },
      /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Error("{}: offset 8: header is not a JSON object", name);
  }
  if (!duplicates.first().empty()) {
    return Error("{}: the header names {} twice", name, Shown(duplicates.first()));
  }
  Header out;
  for (const auto& [key, value] : header.items()) {
    if (key != "__metadata__") {
      ASSIGN_OR_RETURN(Entry e, ParseEntry(key, value, name));
      out.entries.push_back(std::move(e));
      continue;
    }
    if (!value.is_object()) return Error("{}: __metadata__ is not an object", name);
    for (const auto& [k, v] : value.items()) {
      if (!v.is_string()) return Error("{}: __metadata__ {} is not a string", name, Shown(k));
      out.metadata[k] = v.get<std::string>();
    }
  }
  RETURN_IF_ERROR(CheckTiling(out.entries, 8 + text.size(), data_size, name));
  return out;
}

}  // namespace

StatusOr<std::string> SerializeSafeTensors(const SafeTensors& file) {
  json header = json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const SafeTensor& t : file.tensors) {
    if (t.name == "__metadata__" || !names.insert(t.name).second) {
      return Error("tensor {}: name used twice or reserved", Shown(t.name));
    }
    const int64_t elem = DTypeBytes(t.dtype);
    if (elem == 0) return Error("tensor {}: unknown dtype {}", Shown(t.name), Shown(t.dtype));
    if (t.shape.size() > kMaxRank) {
      return Error("tensor {}: shape of rank {}, above the limit of {}", Shown(t.name),
                   t.shape.size(), kMaxRank);
    }
    StatusOr<int64_t> n = ElementCount(t.shape);
    if (!n.ok()) return n.status().WithPrefix(fmt::format("tensor {}", Shown(t.name)));
    if (static_cast<uint64_t>(*n * elem) != t.data.size()) {
      return Error("tensor {}: {} bytes for {} elements of {}", Shown(t.name), t.data.size(), *n,
                   t.dtype);
    }
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  std::string bytes(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(bytes.data(), &n, 8);  // little-endian hosts
  bytes.reserve(8 + text.size() + offset);
  bytes += text;
  for (const SafeTensor& t : file.tensors) bytes += t.data;
  return bytes;
}

StatusOr<SafeTensors> ParseSafeTensors(const std::string& bytes, const std::string& name) {
  if (bytes.size() < 8) {
    return Error("{}: truncated: {} bytes, the header length needs 8", name, bytes.size());
  }
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > kMaxHeaderBytes) {
    return Error("{}: header of {} bytes exceeds {}", name, header_len, kMaxHeaderBytes);
  }
  if (header_len > bytes.size() - 8) {
    return Error("{}: truncated: header of {} bytes at offset 8, file has {} bytes", name,
                 header_len, bytes.size());
  }
  const uint64_t data_start = 8 + header_len;
  ASSIGN_OR_RETURN(Header header, ParseHeader(std::string_view(bytes).substr(8, header_len),
                                              bytes.size() - data_start, name));
  SafeTensors file;
  file.metadata = std::move(header.metadata);
  // In name order, as the header's JSON object lists them.
  std::sort(header.entries.begin(), header.entries.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  for (Entry& e : header.entries) {
    file.tensors.push_back(SafeTensor{std::move(e.name), std::move(e.dtype), std::move(e.shape),
                                      bytes.substr(data_start + e.begin, e.end - e.begin)});
  }
  return file;
}

Status WriteSafeTensors(const std::string& path, const SafeTensors& file) {
  StatusOr<std::string> bytes = SerializeSafeTensors(file);
  if (!bytes.ok()) return bytes.status().WithPrefix(path);
  return WriteFileAtomically(path, *bytes);
}

StatusOr<SafeTensors> ReadSafeTensors(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return ParseSafeTensors(bytes, path);
}

StatusOr<std::map<std::string, std::string>> ReadSafeTensorsMetadata(const std::string& path) {
  ASSIGN_OR_RETURN(const InputFile file, OpenInputFile(path));  // Note [input files]
  const int fd = file.fd();
  const uint64_t file_size = file.size();
  // Reads `n` bytes at `offset` into `out`, or says how many came.
  auto read_at = [fd](char* out, size_t n, off_t offset) -> size_t {
    size_t got = 0;
    while (got < n) {
      const ssize_t r = pread(fd, out + got, n - got, offset + static_cast<off_t>(got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  };
  uint64_t header_len = 0;
  if (file_size < 8 || read_at(reinterpret_cast<char*>(&header_len), 8, 0) != 8) {
    return Error("{}: truncated: {} bytes, the header length needs 8", path, file_size);
  }
  if (header_len > kMaxHeaderBytes) {
    return Error("{}: header of {} bytes exceeds {}", path, header_len, kMaxHeaderBytes);
  }
  if (header_len > file_size - 8) {
    return Error("{}: truncated: header of {} bytes at offset 8, file has {} bytes", path,
                 header_len, file_size);
  }
  std::string header_text(header_len, '\0');
  if (read_at(header_text.data(), header_len, 8) != header_len) {
    return Error("{}: truncated: header of {} bytes at offset 8", path, header_len);
  }
  ASSIGN_OR_RETURN(Header header, ParseHeader(header_text, file_size - 8 - header_len, path));
  return std::move(header.metadata);
}

SafeTensor F32Tensor(std::string name, std::vector<int64_t> shape, const std::vector<float>& v) {
  SafeTensor t{std::move(name), "F32", std::move(shape), std::string(v.size() * 4, '\0')};
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

std::vector<float> F32Values(const SafeTensor& t) {
  std::vector<float> v(t.data.size() / 4);
  std::memcpy(v.data(), t.data.data(), v.size() * 4);
  return v;
}

}  // namespace gptc::rt
