#include "compiler/program/container.h"

#include <algorithm>
#include <cstring>

#include "compiler/support/file.h"

namespace gptc::program {

namespace {

constexpr size_t kHeaderBytes = 4 + 4 + 8 + 4;
constexpr size_t kTrailerBytes = 8;

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetLE(std::string_view bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

int SectionRank(std::string_view name) {
  auto it = std::find(std::begin(kSectionOrder), std::end(kSectionOrder), name);
  return it == std::end(kSectionOrder) ? -1 : static_cast<int>(it - std::begin(kSectionOrder));
}

// The sections of a container whose header and size are checked: views
// into `bytes`, each in bounds and in kSectionOrder order, covering the body
// up to the trailer exactly. Errors start with `path`.
StatusOr<std::vector<std::pair<std::string_view, std::string_view>>> SplitSections(
    std::string_view bytes, std::string_view path) {
  const std::string_view body = bytes.substr(0, bytes.size() - kTrailerBytes);
  std::vector<std::pair<std::string_view, std::string_view>> out;
  uint32_t count = static_cast<uint32_t>(GetLE(bytes, 16, 4));
  size_t at = kHeaderBytes;
  int last = -1;
  for (uint32_t i = 0; i < count; ++i) {
    if (at + 4 > body.size()) return Error("{}: section {} header past the end", path, i);
    size_t name_size = GetLE(bytes, at, 4);
    at += 4;
    if (name_size > body.size() - at || body.size() - at - name_size < 8) {
      return Error("{}: section {} name past the end", path, i);
    }
    std::string_view name = body.substr(at, name_size);
    at += name_size;
    uint64_t length = GetLE(bytes, at, 8);
    at += 8;
    if (length > body.size() - at) return Error("{}: section '{}' past the end", path, name);
    int rank = SectionRank(name);
    if (rank <= last) return Error("{}: section '{}' unknown or out of order", path, name);
    last = rank;
    out.emplace_back(name, body.substr(at, length));
    at += length;
  }
  if (at != body.size()) return Error("{}: {} stray bytes after the sections", path, body.size() - at);
  return out;
}

}  // namespace

uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

StatusOr<std::string> EncodeArtifact(
    const std::vector<std::pair<std::string, std::string>>& sections) {
  int last = -1;
  size_t size = kHeaderBytes + kTrailerBytes;
  for (const auto& [name, bytes] : sections) {
    int rank = SectionRank(name);
    if (rank < 0) return Error("artifact section '{}' is unknown", name);
    if (rank <= last) return Error("artifact section '{}' is out of order", name);
    last = rank;
    size += 4 + name.size() + 8 + bytes.size();
  }
  std::string out;
  out.reserve(size);
  out.append(kArtifactMagic, 4);
  PutU32(out, kArtifactFormatVersion);
  PutU64(out, size);
  PutU32(out, static_cast<uint32_t>(sections.size()));
  for (const auto& [name, bytes] : sections) {
    PutU32(out, static_cast<uint32_t>(name.size()));
    out += name;
    PutU64(out, bytes.size());
    out += bytes;
  }
  PutU64(out, Fnv1a64(out));
  return out;
}

const std::string* Artifact::Find(std::string_view name) const {
  for (const auto& [n, bytes] : sections) {
    if (n == name) return &bytes;
  }
  return nullptr;
}

StatusOr<Artifact> DecodeArtifact(std::string_view bytes, std::string_view path,
                                  const ReadOptions& options) {
  // Order of the checks: magic, version (a newer format may change all the
  // rest), size (truncation), checksum, then the sections themselves.
  if (bytes.size() < 4 || std::memcmp(bytes.data(), kArtifactMagic, 4) != 0) {
    return CorruptError("{}: not a gptx artifact (bad magic)", path);
  }
  if (bytes.size() < kHeaderBytes + kTrailerBytes) {
    return CorruptError("{}: truncated ({} bytes, less than a header and trailer)", path,
                        bytes.size());
  }
  Artifact a;
  a.format_version = static_cast<uint32_t>(GetLE(bytes, 4, 4));
  if (a.format_version > kArtifactFormatVersion) {
    return Error("{}: format version {}; this build of gptc reads version {} (update gptc)", path,
                 a.format_version, kArtifactFormatVersion);
  }
  if (a.format_version == 0) return CorruptError("{}: format version 0 is invalid", path);
  if (a.format_version < kArtifactFormatVersion) {
    return Error(
        "{}: format version {}; this build of gptc reads version {} (recompile it with gptc "
        "compile)",
        path, a.format_version, kArtifactFormatVersion);
  }
  uint64_t size = GetLE(bytes, 8, 8);
  if (size != bytes.size()) {
    return CorruptError("{}: truncated ({} bytes, the header says {})", path, bytes.size(), size);
  }
  std::string_view body = bytes.substr(0, bytes.size() - kTrailerBytes);
  a.checksum = GetLE(bytes, body.size(), 8);
  if (Fnv1a64(body) != a.checksum) {
    return CorruptError("{}: checksum mismatch (file is corrupt)", path);
  }
  StatusOr<std::vector<std::pair<std::string_view, std::string_view>>> sections =
      SplitSections(bytes, path);
  if (!sections.ok()) return sections.status().WithCode(StatusCode::kCorrupt);
  for (auto [name, contents] : *sections) a.sections.emplace_back(name, contents);
  for (std::string_view required : kRequiredSections) {
    if (a.Find(required) == nullptr) {
      return CorruptError("{}: missing section '{}'", path, required);
    }
  }
  nlohmann::json manifest;
  for (auto [name, json] : {std::pair{"manifest", &manifest}, std::pair{"plan", &a.plan},
                            std::pair{"params", &a.params}}) {
    *json = nlohmann::json::parse(*a.Find(name), nullptr, /*allow_exceptions=*/false);
    if (json->is_discarded()) {
      return CorruptError("{}: section '{}' is not valid JSON", path, name);
    }
  }
  StatusOr<Manifest> decoded = ManifestFromJson(manifest);
  if (!decoded.ok()) return decoded.status().WithPrefix(path).WithCode(StatusCode::kCorrupt);
  a.manifest = std::move(*decoded);
  if (!options.expected_target.empty() && a.manifest.target != options.expected_target) {
    return Error("{}: compiled for {}, this device is {}", path, a.manifest.target,
                 options.expected_target);
  }
  return a;
}

std::optional<std::string_view> FindSection(std::string_view bytes, std::string_view name) {
  if (bytes.size() < kHeaderBytes + kTrailerBytes ||
      std::memcmp(bytes.data(), kArtifactMagic, 4) != 0 || GetLE(bytes, 8, 8) != bytes.size()) {
    return std::nullopt;
  }
  StatusOr<std::vector<std::pair<std::string_view, std::string_view>>> sections =
      SplitSections(bytes, "");
  if (!sections.ok()) return std::nullopt;
  for (auto [n, contents] : *sections) {
    if (n == name) return contents;
  }
  return std::nullopt;
}

StatusOr<Artifact> ReadArtifact(const std::string& path, const ReadOptions& options) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return DecodeArtifact(bytes, path, options);
}

}  // namespace gptc::program
