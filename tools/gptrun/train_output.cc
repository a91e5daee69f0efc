#include "tools/gptrun/train_output.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace gptc::tools {

Console::Console() : tty_(isatty(STDOUT_FILENO) == 1) {}

void Console::Line(const std::string& text) {
  if (quiet_) return;
  Clear();
  std::fputs(text.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void Console::Bar(int64_t step, int64_t total, double eta_s) {
  if (!tty_ || quiet_) return;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * step / std::max<int64_t>(total, 1));
  std::string bar(filled, '#');
  bar.resize(kWidth, '.');
  std::printf("\r[%s] %lld/%lld eta %.0f s", bar.c_str(), static_cast<long long>(step),
              static_cast<long long>(total), eta_s);
  std::fflush(stdout);
  shown_ = true;
}

void Console::Clear() {
  if (shown_) std::fputs("\r\033[K", stdout);
  shown_ = false;
}

StatusOr<JsonLog> JsonLog::Open(const std::string& path) {
  JsonLog log;
  if (path.empty()) return log;
  log.path_ = path;
  log.file_ = std::fopen(path.c_str(), "a");
  if (log.file_ == nullptr) return Error("--log {}: cannot open for writing", path);
  return log;
}

JsonLog::JsonLog(JsonLog&& o) noexcept
    : file_(o.file_), path_(std::move(o.path_)), mirrors_(std::move(o.mirrors_)) {
  o.file_ = nullptr;
}

JsonLog::~JsonLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void JsonLog::Write(const nlohmann::json& event) {
  for (const auto& to : mirrors_) to(event);
  if (file_ == nullptr || !status_.ok()) return;
  std::string line = event.dump() + "\n";
  errno = 0;
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    status_ = Error("--log {}: {}", path_, errno != 0 ? std::strerror(errno) : "write error");
  }
}

}  // namespace gptc::tools
