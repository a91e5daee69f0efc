#include "runtime/safetensors.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

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

StatusOr<int64_t> ElementCount(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 50) / d)) return Error("bad dimension {}", d);
    n *= d;
  }
  return n;
}

}  // namespace

StatusOr<std::string> SerializeSafeTensors(const SafeTensors& file) {
  json header = json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const SafeTensor& t : file.tensors) {
    if (t.name == "__metadata__" || !names.insert(t.name).second) {
      return Error("tensor '{}': name used twice or reserved", t.name);
    }
    const int64_t elem = DTypeBytes(t.dtype);
    if (elem == 0) return Error("tensor '{}': unknown dtype '{}'", t.name, t.dtype);
    StatusOr<int64_t> n = ElementCount(t.shape);
    if (!n.ok()) return n.status().WithPrefix(fmt::format("tensor '{}'", t.name));
    if (static_cast<uint64_t>(*n * elem) != t.data.size()) {
      return Error("tensor '{}': {} bytes for {} elements of {}", t.name, t.data.size(), *n,
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
  if (header_len > bytes.size() - 8) {
    return Error("{}: truncated: header of {} bytes at offset 8, file has {} bytes", name,
                 header_len, bytes.size());
  }
  json header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + header_len, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Error("{}: offset 8: header is not a JSON object", name);
  }
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = bytes.size() - data_start;
  SafeTensors file;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return Error("{}: __metadata__ is not an object", name);
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) return Error("{}: __metadata__ '{}' is not a string", name, k);
        file.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    auto bad = [&](std::string_view what) { return Error("{}: tensor '{}': {}", name, key, what); };
    if (!value.is_object() || !value.contains("dtype") || !value["dtype"].is_string() ||
        !value.contains("shape") || !value["shape"].is_array() || !value.contains("data_offsets") ||
        !value["data_offsets"].is_array() || value["data_offsets"].size() != 2) {
      return bad("needs dtype, shape and data_offsets [begin, end]");
    }
    SafeTensor t;
    t.name = key;
    t.dtype = value["dtype"].get<std::string>();
    if (DTypeBytes(t.dtype) == 0) return bad(fmt::format("unknown dtype '{}'", t.dtype));
    for (const json& d : value["shape"]) {
      if (!d.is_number_integer()) return bad("shape holds a non-integer");
      t.shape.push_back(d.get<int64_t>());
    }
    const json& offs = value["data_offsets"];
    if (!offs[0].is_number_unsigned() || !offs[1].is_number_unsigned()) {
      return bad("data_offsets are not unsigned integers");
    }
    const uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
    StatusOr<int64_t> n = ElementCount(t.shape);
    if (!n.ok()) return bad(n.status().message());
    if (begin > end || end - begin != static_cast<uint64_t>(*n * DTypeBytes(t.dtype))) {
      return bad(fmt::format("data_offsets [{}, {}] do not hold {} elements of {}", begin, end, *n,
                             t.dtype));
    }
    if (end > data_size) {
      return Error("{}: truncated: tensor '{}' ends at offset {}, file has {} bytes", name, key,
                   data_start + end, bytes.size());
    }
    t.data = bytes.substr(data_start + begin, end - begin);
    file.tensors.push_back(std::move(t));
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
  ASSIGN_OR_RETURN(const int fd, OpenInputFile(path));  // Note [input files]
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
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
  if (read_at(reinterpret_cast<char*>(&header_len), 8, 0) != 8) {
    return Error("{}: truncated: the header length needs 8 bytes", path);
  }
  constexpr uint64_t kMaxHeader = 100 << 20;  // safetensors' own limit
  if (header_len > kMaxHeader) {
    return Error("{}: header of {} bytes exceeds {}", path, header_len, kMaxHeader);
  }
  std::string header_text(header_len, '\0');
  if (read_at(header_text.data(), header_len, 8) != header_len) {
    return Error("{}: truncated: header of {} bytes at offset 8", path, header_len);
  }
  json header = json::parse(header_text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Error("{}: offset 8: header is not a JSON object", path);
  }
  std::map<std::string, std::string> metadata;
  if (header.contains("__metadata__") && header["__metadata__"].is_object()) {
    for (const auto& [k, v] : header["__metadata__"].items()) {
      if (v.is_string()) metadata[k] = v.get<std::string>();
    }
  }
  return metadata;
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
