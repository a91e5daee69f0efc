#include "tools/gptrun/checkpoint_dir.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <limits>
#include <system_error>

#include "runtime/safetensors.h"

namespace gptc::tools {
namespace {

namespace fs = std::filesystem;

constexpr char kValLossKey[] = "gptc.val_loss";

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

StatusOr<std::string> LatestCheckpoint(const std::string& dir) {
  if (dir.empty()) return Error("--resume latest needs --ckpt-dir");
  ASSIGN_OR_RETURN(auto dirs, StepDirs(dir));
  if (dirs.empty()) return Error("--resume latest: no step_NNNNNN checkpoint in {}", dir);
  return dirs.back().second.string();
}

StatusOr<std::optional<std::string>> LatestCheckpointIfAny(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return std::optional<std::string>();
  ASSIGN_OR_RETURN(auto dirs, StepDirs(dir));
  if (dirs.empty()) return std::optional<std::string>();
  return std::optional<std::string>(dirs.back().second.string());
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
