#include "tools/common/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gptc::tools {

ProgressLine::ProgressLine(std::string program, bool enabled)
    : program_(std::move(program)),
      enabled_(enabled),
      start_(std::chrono::steady_clock::now()),
      last_(start_ - std::chrono::seconds(1)) {}

void ProgressLine::Show(const std::string& status, bool force) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  // \r and erase-to-end-of-line: a shorter status leaves no tail.
  std::fputs(fmt::format("\r{}: {}, {:.1f} s\x1b[K", program_, status, seconds).c_str(), stderr);
  std::fflush(stderr);
  shown_ = true;
}

void ProgressLine::Clear() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!shown_) return;
  std::fputs("\r\x1b[K", stderr);
  std::fflush(stderr);
  shown_ = false;
}

bool TerminalProgress() {
  const char* term = std::getenv("TERM");
  return isatty(STDERR_FILENO) && (term == nullptr || std::strcmp(term, "dumb") != 0);
}

}  // namespace gptc::tools
