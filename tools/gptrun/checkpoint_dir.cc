#include "tools/gptrun/checkpoint_dir.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <system_error>

#include "runtime/safetensors.h"

namespace gptc::tools {
namespace {

namespace fs = std::filesystem;

constexpr char kValLossKey[] = "gptc.val_loss";
constexpr char kRunIdKey[] = "gptc.run_id";
constexpr char kLockFile[] = ".gptrun.lock";

// The step of a "step_NNNNNN" name (with `suffix` after it), or -1.
int64_t StepOf(const std::string& name, std::string_view suffix = "") {
  if (name.size() != 11 + suffix.size() || !name.starts_with("step_") || !name.ends_with(suffix)) {
    return -1;
  }
  int64_t step = -1;
  const char* begin = name.data() + 5;
  auto [end, ec] = std::from_chars(begin, begin + 6, step);
  return ec == std::errc() && end == begin + 6 ? step : -1;
}

// (step, path) of every step_NNNNNN directory (`suffix`: of step_NNNNNN.tmp).
StatusOr<std::vector<std::pair<int64_t, fs::path>>> StepDirs(const std::string& dir,
                                                             std::string_view suffix = "") {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return Error("--ckpt-dir {}: {}", dir, ec.message());
  std::vector<std::pair<int64_t, fs::path>> out;
  for (const fs::directory_entry& e : it) {
    const int64_t step = StepOf(e.path().filename().string(), suffix);
    if (step >= 0 && e.is_directory(ec)) out.emplace_back(step, e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string StepDirName(int64_t step) { return fmt::format("step_{:06d}", step); }

StatusOr<CheckpointDirLock> CheckpointDirLock::Acquire(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Error("--ckpt-dir {}: {}", dir, ec.message());
  const std::string path = (fs::path(dir) / kLockFile).string();
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Error("--ckpt-dir {}: cannot create {}: {}", dir, path, std::strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[256] = {};
    const ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
    std::string who(holder, n > 0 ? static_cast<size_t>(n) : 0);
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    close(fd);
    if (err != EWOULDBLOCK) {
      return Error("--ckpt-dir {}: cannot lock {}: {}", dir, path, std::strerror(err));
    }
    return Error(
        "--ckpt-dir {} is in use by another gptrun ({}; lock {}): wait for it to end, or "
        "choose another --ckpt-dir",
        dir, who.empty() ? "starting" : who, path);
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  const std::string who = fmt::format("pid {} on {}\n", getpid(), host);
  // Only for the message of a refused run: a failed write loses nothing.
  if (ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t written = pwrite(fd, who.data(), who.size(), 0);
  }
  return CheckpointDirLock(fd);
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) close(fd_);  // releases the lock; the file stays (Note [checkpoint ownership])
}

Status CheckCheckpointModel(const program::ModelConfig& ckpt,
                            const program::ModelConfig& artifact) {
  if (ckpt.layers == 0) return Status::Ok();
  auto describe = [](const program::ModelConfig& c) {
    return fmt::format("{} (layers {}, heads {}, width {}, positions {}, vocab {} padded to {})",
                       c.name, c.layers, c.heads, c.width, c.positions, c.vocab, c.padded_vocab);
  };
  program::ModelConfig a = artifact, b = ckpt;
  a.name = b.name = "";
  if (a == b) return Status::Ok();
  return Error("the checkpoint is of {}, the artifact of {}", describe(ckpt), describe(artifact));
}

Status CheckCheckpointDirLength(const std::string& dir) {
  // The deepest name a save writes: a step beyond six digits, the temporary
  // directory, and WriteFileAtomically's temporary file in it.
  constexpr std::string_view kDeepest = "/step_00000000.tmp/.model.safetensors.tmp.4294967295";
  if (dir.size() + kDeepest.size() < PATH_MAX) return Status::Ok();
  return Error(
      "--ckpt-dir {}...: a path of {} characters is too long for its checkpoints' files, which "
      "add up to {} more (the system's limit is {})",
      dir.substr(0, 40), dir.size(), kDeepest.size(), PATH_MAX);
}

std::string NewRunId() {
  std::random_device device;
  const uint64_t id = (static_cast<uint64_t>(device()) << 32) ^ device();
  return fmt::format("{:016x}", id);
}

StatusOr<std::vector<StepCheckpoint>> ListCheckpoints(const std::string& dir) {
  ASSIGN_OR_RETURN(auto dirs, StepDirs(dir));
  std::vector<StepCheckpoint> out;
  for (const auto& [step, path] : dirs) {
    StepCheckpoint c{.step = step, .path = path.string()};
    StatusOr<std::map<std::string, std::string>> meta =
        rt::ReadSafeTensorsMetadata((path / "model.safetensors").string());
    if (meta.ok()) {
      if (auto it = meta->find(kRunIdKey); it != meta->end()) c.run_id = it->second;
    }
    out.push_back(std::move(c));
  }
  return out;
}

StatusOr<std::vector<std::string>> RemoveCheckpoints(const std::vector<StepCheckpoint>& foreign) {
  std::vector<std::string> removed;
  for (const StepCheckpoint& c : foreign) {
    std::error_code ec;
    fs::remove_all(c.path, ec);
    if (ec) return Error("{}: cannot remove: {}", c.path, ec.message());
    removed.push_back(fs::path(c.path).filename().string());
  }
  return removed;
}

namespace {

// The newest of `all` (not empty), unless they are of several runs.
StatusOr<std::string> Newest(const std::vector<StepCheckpoint>& all, const std::string& dir,
                             std::string_view flag) {
  std::map<std::string, std::vector<std::string>> runs;
  for (const StepCheckpoint& c : all) {
    if (!c.run_id.empty()) runs[c.run_id].push_back(StepDirName(c.step));
  }
  if (runs.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [id, names] : runs) {
      parts.push_back(fmt::format("run {}: {}", id, fmt::join(names, " ")));
    }
    return Error(
        "{}: {} holds the checkpoints of {} runs ({}): name the one to continue with --resume "
        "DIR/step_NNNNNN",
        flag, dir, runs.size(), fmt::join(parts, "; "));
  }
  return all.back().path;
}

}  // namespace

StatusOr<std::string> LatestCheckpoint(const std::string& dir) {
  if (dir.empty()) return Error("--resume latest needs --ckpt-dir");
  ASSIGN_OR_RETURN(std::vector<StepCheckpoint> all, ListCheckpoints(dir));
  if (all.empty()) return Error("--resume latest: no step_NNNNNN checkpoint in {}", dir);
  return Newest(all, dir, "--resume latest");
}

StatusOr<std::optional<std::string>> LatestCheckpointIfAny(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return std::optional<std::string>();
  ASSIGN_OR_RETURN(std::vector<StepCheckpoint> all, ListCheckpoints(dir));
  if (all.empty()) return std::optional<std::string>();
  ASSIGN_OR_RETURN(std::string newest, Newest(all, dir, "--resume auto"));
  return std::optional<std::string>(std::move(newest));
}

Status SaveStepCheckpoint(const std::string& dir, int64_t step, rt::CheckpointData data,
                          std::optional<double> val_loss) {
  const fs::path final_path = fs::path(dir) / StepDirName(step);
  const fs::path tmp = fs::path(dir) / (StepDirName(step) + ".tmp");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Error("--ckpt-dir {}: {}", dir, ec.message());
  if (val_loss) data.extra_metadata[kValLossKey] = fmt::format("{:.9g}", *val_loss);
  fs::remove_all(tmp, ec);
  RETURN_IF_ERROR(rt::SaveCheckpoint(tmp.string(), data));
  fs::remove_all(final_path, ec);
  fs::rename(tmp, final_path, ec);
  if (ec) return Error("{}: {}", final_path.string(), ec.message());
  return Status::Ok();
}

StatusOr<std::vector<std::string>> RemoveStaleTemporaries(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return removed;
  ASSIGN_OR_RETURN(auto dirs, StepDirs(dir, ".tmp"));
  for (const auto& [step, path] : dirs) {
    fs::remove_all(path, ec);
    if (ec) return Error("{}: cannot remove a stale checkpoint: {}", path.string(), ec.message());
    removed.push_back(path.filename().string());
  }
  return removed;
}

StatusOr<std::vector<std::string>> PruneCheckpoints(const std::string& dir, int64_t keep) {
  std::vector<std::string> removed;
  if (keep <= 0) return removed;
  ASSIGN_OR_RETURN(auto dirs, StepDirs(dir));
  if (static_cast<int64_t>(dirs.size()) <= keep) return removed;
  // The best: the lowest recorded validation loss (the latest of equals).
  double best_loss = std::numeric_limits<double>::infinity();
  int64_t best_step = -1;
  std::vector<bool> readable(dirs.size(), false);
  for (size_t i = 0; i < dirs.size(); ++i) {
    StatusOr<std::map<std::string, std::string>> meta =
        rt::ReadSafeTensorsMetadata((dirs[i].second / "model.safetensors").string());
    if (!meta.ok()) continue;
    readable[i] = true;
    auto it = meta->find(kValLossKey);
    if (it == meta->end()) continue;
    double loss = 0;
    auto [end, ec] =
        std::from_chars(it->second.data(), it->second.data() + it->second.size(), loss);
    if (ec == std::errc() && loss <= best_loss) best_loss = loss, best_step = dirs[i].first;
  }
  const size_t first_kept = dirs.size() - static_cast<size_t>(keep);
  for (size_t i = 0; i < first_kept; ++i) {
    if (!readable[i] || dirs[i].first == best_step) continue;
    std::error_code ec;
    fs::remove_all(dirs[i].second, ec);
    if (ec) return Error("{}: cannot remove: {}", dirs[i].second.string(), ec.message());
    removed.push_back(dirs[i].second.filename().string());
  }
  return removed;
}

}  // namespace gptc::tools
