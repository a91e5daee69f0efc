#include "tools/gptc/compile_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <vector>

#include "compiler/support/file.h"
#include "tools/common/trusted_libraries.h"
#include "gptc_version.h"

namespace gptc::tools {
namespace {

namespace fs = std::filesystem;

uint64_t Fnv1a(const std::string& text, uint64_t hash) {
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// This executable, as its size and modification time: a rebuilt compiler
// never reuses what an older one compiled.
std::string CompilerIdentity() {
  std::string id = fmt::format("gptc {}", GPTC_VERSION);
  struct stat st;
  if (stat("/proc/self/exe", &st) == 0) {
    id += fmt::format(" exe {} {}.{}", static_cast<int64_t>(st.st_size),
                      static_cast<int64_t>(st.st_mtim.tv_sec),
                      static_cast<int64_t>(st.st_mtim.tv_nsec));
  }
  return id;
}

}  // namespace

std::optional<std::string> CompileCache::DefaultDir() { return GptcCacheDir(); }

std::string CompileCache::Key(const std::string& inputs) {
  const std::string text = CompilerIdentity() + "\n" + inputs;
  // Two 64-bit FNV-1a hashes from different bases: 128 bits, no collision
  // between the few artifacts a cache holds.
  return fmt::format("{:016x}{:016x}", Fnv1a(text, 0xcbf29ce484222325ull),
                     Fnv1a(text, 0x84222325cbf29ce4ull));
}

std::string CompileCache::ArtifactPath(const std::string& key) const {
  return fmt::format("{}/{}.gptx", dir_, key);
}

std::optional<CompileCache::Entry> CompileCache::Lookup(const std::string& key) const {
  Entry entry;
  entry.path = ArtifactPath(key);
  StatusOr<std::string> text = ReadFile(fmt::format("{}/{}.txt", dir_, key));
  std::error_code error;
  if (!text.ok() || !fs::is_regular_file(entry.path, error)) return std::nullopt;
  const size_t end = text->find('\n');
  entry.summary = text->substr(0, end);
  if (end != std::string::npos) {
    entry.note = text->substr(end + 1);
    while (!entry.note.empty() && entry.note.back() == '\n') entry.note.pop_back();
  }
  fs::last_write_time(entry.path, fs::file_time_type::clock::now(), error);  // recently used
  return entry;
}

Status CompileCache::Store(const std::string& key, const std::string& bytes,
                           const std::string& summary, const std::string& note) const {
  std::error_code error;
  fs::create_directories(dir_, error);
  if (error) return Error("compile cache {}: {}", dir_, error.message());
  // The summary first: a KEY.gptx without its KEY.txt is never looked up.
  RETURN_IF_ERROR(WriteFileAtomically(fmt::format("{}/{}.txt", dir_, key), summary + "\n" + note));
  RETURN_IF_ERROR(WriteFileAtomically(ArtifactPath(key), bytes));

  std::vector<std::pair<fs::file_time_type, fs::path>> entries;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, error)) {
    if (e.path().extension() != ".gptx") continue;
    entries.emplace_back(e.last_write_time(error), e.path());
  }
  if (entries.size() > static_cast<size_t>(kMaxEntries)) {
    std::sort(entries.begin(), entries.end());  // oldest first
    for (size_t i = 0; i + kMaxEntries < entries.size(); ++i) {
      fs::path p = entries[i].second;
      fs::remove(p, error);
      fs::remove(p.replace_extension(".txt"), error);
    }
  }
  return Status::Ok();
}

}  // namespace gptc::tools
