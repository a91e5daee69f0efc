#include "tools/gptrun/checkpoint_dir.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
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
constexpr char kTmpSuffix[] = ".tmp";
constexpr char kRemovingSuffix[] = ".removing";

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

// Note [whole step directories]: removes a step directory without ever
// showing it partly removed: renamed to NAME.removing first (one atomic
// step), then deleted. A run killed meanwhile leaves NAME.removing, which the
// next run's RemoveStaleTemporaries deletes.
Status RemoveStepDir(const fs::path& path) {
  fs::path aside = path;
  aside += kRemovingSuffix;
  std::error_code ec;
  fs::remove_all(aside, ec);  // an earlier run's, killed while removing it
  fs::rename(path, aside, ec);
  if (!ec) fs::remove_all(aside, ec);
  if (ec) return Error("{}: cannot remove: {}", path.string(), ec.message());
  return Status::Ok();
}

// Why the checkpoint in `dir` cannot be resumed as it is ("" when it can):
// one of its safetensors files is missing or its header does not read.
// Sets `run_id` from the model file.
std::string Incomplete(const fs::path& dir, std::string& run_id) {
  for (const std::string_view file : {"model.safetensors", "optim.safetensors"}) {
    std::error_code ec;
    if (!fs::exists(dir / file, ec)) return fmt::format("no {}", file);
    StatusOr<std::map<std::string, std::string>> meta =
        rt::ReadSafeTensorsMetadata((dir / file).string());
    if (!meta.ok()) return meta.status().message();
    auto it = meta->find(kRunIdKey);
    if (file == "model.safetensors" && it != meta->end()) run_id = it->second;
  }
  return "";
}

}  // namespace

std::string StepDirName(int64_t step) { return fmt::format("step_{:06d}", step); }

StatusOr<CheckpointDirLock> CheckpointDirLock::Acquire(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Error("--ckpt-dir {}: {}", dir, ec.message());
  const std::string path = (fs::path(dir) / kLockFile).string();
  // Note [lock file]: never through a symbolic link, and only a regular file.
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0 && errno == ELOOP) {
    return Error("--ckpt-dir {}: the lock {} is a symbolic link, which gptrun refuses to write "
                 "through: remove it",
                 dir, path);
  }
  if (fd < 0) return Error("--ckpt-dir {}: cannot create {}: {}", dir, path, std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Error("--ckpt-dir {}: the lock {} is not a regular file: remove it", dir, path);
  }
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
    c.incomplete = Incomplete(path, c.run_id);
    if (!c.incomplete.empty()) c.run_id.clear();
    out.push_back(std::move(c));
  }
  return out;
}

StatusOr<std::vector<std::string>> RemoveCheckpoints(const std::vector<StepCheckpoint>& foreign) {
  std::vector<std::string> removed;
  for (const StepCheckpoint& c : foreign) {
    RETURN_IF_ERROR(RemoveStepDir(c.path));
    removed.push_back(fs::path(c.path).filename().string());
  }
  return removed;
}

namespace {

// The newest complete checkpoint of `all`, unless they are of several runs;
// the incomplete ones are added to `skipped`, newest first. Nothing when
// none is complete.
StatusOr<std::optional<std::string>> Newest(const std::vector<StepCheckpoint>& all,
                                            const std::string& dir, std::string_view flag,
                                            std::vector<std::string>* skipped) {
  std::map<std::string, std::vector<std::string>> runs;
  std::optional<std::string> newest;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (!it->incomplete.empty()) {
      if (!newest && skipped != nullptr) {
        skipped->push_back(fmt::format("{} ({})", it->path, it->incomplete));
      }
      continue;
    }
    if (!newest) newest = it->path;
    if (!it->run_id.empty()) {
      std::vector<std::string>& names = runs[it->run_id];
      names.insert(names.begin(), StepDirName(it->step));
    }
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
  return newest;
}

}  // namespace

StatusOr<std::string> LatestCheckpoint(const std::string& dir, std::vector<std::string>* skipped) {
  if (dir.empty()) return Error("--resume latest needs --ckpt-dir");
  ASSIGN_OR_RETURN(std::vector<StepCheckpoint> all, ListCheckpoints(dir));
  std::vector<std::string> incomplete;
  ASSIGN_OR_RETURN(std::optional<std::string> newest,
                   Newest(all, dir, "--resume latest", &incomplete));
  if (!newest && all.empty()) {
    return Error("--resume latest: no step_NNNNNN checkpoint in {}", dir);
  }
  if (!newest) {
    return Error("--resume latest: no complete checkpoint in {} (skipped {})", dir,
                 fmt::join(incomplete, "; "));
  }
  if (skipped != nullptr) skipped->insert(skipped->end(), incomplete.begin(), incomplete.end());
  return *newest;
}

StatusOr<std::optional<std::string>> LatestCheckpointIfAny(const std::string& dir,
                                                           std::vector<std::string>* skipped) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return std::optional<std::string>();
  ASSIGN_OR_RETURN(std::vector<StepCheckpoint> all, ListCheckpoints(dir));
  return Newest(all, dir, "--resume auto", skipped);
}

Status SaveStepCheckpoint(const std::string& dir, int64_t step, rt::CheckpointData data,
                          std::optional<double> val_loss) {
  const fs::path final_path = fs::path(dir) / StepDirName(step);
  const fs::path tmp = fs::path(dir) / (StepDirName(step) + kTmpSuffix);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Error("--ckpt-dir {}: {}", dir, ec.message());
  if (val_loss) data.extra_metadata[kValLossKey] = fmt::format("{:.9g}", *val_loss);
  fs::remove_all(tmp, ec);
  RETURN_IF_ERROR(rt::SaveCheckpoint(tmp.string(), data));
  // Note [whole step directories]: a checkpoint of this step already there
  // (a run resumed from an earlier one) is swapped with the new one in one
  // step, then removed under the temporary name.
  if (fs::exists(final_path, ec)) {
    if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_path.c_str(), RENAME_EXCHANGE) == 0) {
      fs::remove_all(tmp, ec);
      if (ec) return Error("{}: cannot remove: {}", tmp.string(), ec.message());
      return Status::Ok();
    }
    RETURN_IF_ERROR(RemoveStepDir(final_path));  // a file system without the exchange
  }
  fs::rename(tmp, final_path, ec);
  if (ec) return Error("{}: {}", final_path.string(), ec.message());
  return Status::Ok();
}

StatusOr<std::vector<std::string>> RemoveStaleTemporaries(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return removed;
  for (const char* suffix : {kTmpSuffix, kRemovingSuffix}) {
    ASSIGN_OR_RETURN(auto dirs, StepDirs(dir, suffix));
    for (const auto& [step, path] : dirs) {
      fs::remove_all(path, ec);
      if (ec) {
        return Error("{}: cannot remove a stale checkpoint: {}", path.string(), ec.message());
      }
      removed.push_back(path.filename().string());
    }
  }
  return removed;
}

StatusOr<std::vector<std::string>> PruneCheckpoints(const std::string& dir, int64_t keep) {
  std::vector<std::string> removed;
  if (keep <= 0) return removed;
  ASSIGN_OR_RETURN(auto dirs, StepDirs(dir));
  // Only readable checkpoints count and go: the best, the lowest recorded
  // validation loss (the latest of equals), and the newest `keep` stay.
  double best_loss = std::numeric_limits<double>::infinity();
  int64_t best_step = -1;
  std::vector<std::pair<int64_t, fs::path>> readable;
  for (const auto& [step, path] : dirs) {
    StatusOr<std::map<std::string, std::string>> meta =
        rt::ReadSafeTensorsMetadata((path / "model.safetensors").string());
    if (!meta.ok()) continue;
    readable.emplace_back(step, path);
    auto it = meta->find(kValLossKey);
    if (it == meta->end()) continue;
    double loss = 0;
    auto [end, ec] =
        std::from_chars(it->second.data(), it->second.data() + it->second.size(), loss);
    if (ec == std::errc() && std::isfinite(loss) && loss <= best_loss) {
      best_loss = loss;
      best_step = step;
    }
  }
  if (static_cast<int64_t>(readable.size()) <= keep) return removed;
  const size_t first_kept = readable.size() - static_cast<size_t>(keep);
  for (size_t i = 0; i < first_kept; ++i) {
    if (readable[i].first == best_step) continue;
    RETURN_IF_ERROR(RemoveStepDir(readable[i].second));
    removed.push_back(readable[i].second.filename().string());
  }
  return removed;
}

}  // namespace gptc::tools
