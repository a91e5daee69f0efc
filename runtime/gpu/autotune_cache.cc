#include "runtime/gpu/autotune_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "compiler/support/file.h"

namespace gptc::rt::gpu {

namespace {

constexpr std::string_view kFormat = "gptc-autotune-1";

// The file's devices object, or an error saying what is wrong with it.
StatusOr<nlohmann::json> ParseDevices(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error("not JSON (a truncated write?)");
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat) {
    return Error("not a {} file", kFormat);
  }
  if (!j.contains("devices") || !j["devices"].is_object()) return Error("no 'devices' object");
  return j["devices"];
}

StatusOr<std::map<std::string, CachedGemm>> ParseEntries(const nlohmann::json& device) {
  if (!device.is_object()) return Error("a device entry is not an object");
  std::map<std::string, CachedGemm> out;
  for (const auto& [key, v] : device.items()) {
    if (!v.is_object() || !v.contains("path") || !v["path"].is_string() ||
        !v.contains("algorithm") || !v["algorithm"].is_string() || !v.contains("us") ||
        !v["us"].is_number() || !v.contains("candidates") || !v["candidates"].is_number_integer()) {
      return Error("the entry of '{}' lacks path, algorithm, us or candidates", key);
    }
    out[key] = CachedGemm{.path = v["path"].get<std::string>(),
                          .algorithm = v["algorithm"].get<std::string>(),
                          .us = v["us"].get<double>(),
                          .candidates = v["candidates"].get<int>()};
  }
  return out;
}

nlohmann::json ToJson(const CachedGemm& g) {
  return {{"path", g.path}, {"algorithm", g.algorithm}, {"us", g.us}, {"candidates", g.candidates}};
}

// An exclusive flock on `path`, released when the object goes.
class FileLock {
 public:
  static StatusOr<FileLock> Take(const std::string& path) {
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Error("{}: {}", path, std::strerror(errno));
    while (flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      close(fd);
      return Error("{}: flock: {}", path, std::strerror(e));
    }
    return FileLock(fd);
  }
  FileLock(FileLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  FileLock& operator=(FileLock&&) = delete;
  ~FileLock() {
    if (fd_ >= 0) close(fd_);  // closing drops the lock
  }

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace

std::vector<std::string> AutotuneCache::Load(bool retune) {
  entries_.clear();
  added_.clear();
  other_devices_ = 0;
  if (path_.empty() || !std::filesystem::exists(path_)) return {};
  StatusOr<std::string> text = ReadFile(path_);
  StatusOr<nlohmann::json> devices =
      text.ok() ? ParseDevices(*text) : StatusOr<nlohmann::json>(text.status());
  StatusOr<std::map<std::string, CachedGemm>> mine = std::map<std::string, CachedGemm>{};
  if (devices.ok()) {
    for (const auto& [key, device] : devices->items()) {
      if (key == device_key_) {
        mine = ParseEntries(device);
      } else {
        ++other_devices_;
      }
    }
  }
  Status bad = !devices.ok() ? devices.status() : mine.status();
  if (!bad.ok()) {
    other_devices_ = 0;
    return {fmt::format("the autotune cache {} is unusable ({}): {}", path_, bad.message(),
                        retune ? "the gemms are tuned again and the file is replaced"
                               : "the heuristic's first answers are used and the file is left "
                                 "as it is (--autotune on tunes them and replaces it)")};
  }
  entries_ = std::move(mine).value();
  return {};
}

const CachedGemm* AutotuneCache::Find(const std::string& descriptor) const {
  auto it = entries_.find(descriptor);
  return it == entries_.end() ? nullptr : &it->second;
}

void AutotuneCache::Put(const std::string& descriptor, CachedGemm gemm) {
  entries_[descriptor] = gemm;
  added_[descriptor] = std::move(gemm);
}

Status AutotuneCache::Save() {
  if (path_.empty() || added_.empty()) return Status::Ok();
  const std::filesystem::path file(path_);
  if (file.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path(), ec);
    if (ec) return Error("{}: {}", file.parent_path().string(), ec.message());
  }
  ASSIGN_OR_RETURN(FileLock lock, FileLock::Take(path_ + ".lock"));
  // What other processes saved since Load stays; a corrupt file is replaced.
  nlohmann::json devices = nlohmann::json::object();
  if (std::filesystem::exists(file)) {
    StatusOr<std::string> text = ReadFile(path_);
    if (text.ok()) {
      if (StatusOr<nlohmann::json> d = ParseDevices(*text); d.ok()) devices = std::move(d).value();
    }
  }
  nlohmann::json& mine = devices[device_key_];
  if (!mine.is_object()) mine = nlohmann::json::object();
  for (const auto& [key, gemm] : added_) mine[key] = ToJson(gemm);
  const nlohmann::json out = {{"format", kFormat}, {"devices", devices}};
  RETURN_IF_ERROR(WriteFileAtomically(path_, out.dump(1) + "\n"));
  added_.clear();
  return Status::Ok();
}

std::string DefaultAutotuneCachePath() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg != '\0') return std::string(xdg) + "/gptc/autotune.json";
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0') return std::string(home) + "/.cache/gptc/autotune.json";
  return "";
}

}  // namespace gptc::rt::gpu
