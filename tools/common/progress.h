// One self-rewriting status line on stderr for long tool work ("gptc:
// codegen train_step 45/120 kernels, 12.3 s"), shown only on a terminal so
// that logs and pipes see nothing but the final summary.
#ifndef GPTC_TOOLS_COMMON_PROGRESS_H_
#define GPTC_TOOLS_COMMON_PROGRESS_H_

#include <chrono>
#include <mutex>
#include <string>

namespace gptc::tools {

class ProgressLine {
 public:
  // `enabled`: e.g. TerminalProgress(); when false every call does nothing.
  ProgressLine(std::string program, bool enabled);
  ~ProgressLine() { Clear(); }

  // Replaces the line with `status` and the seconds since construction;
  // at most ten redraws a second unless `force`. Safe from several threads.
  void Show(const std::string& status, bool force = false);
  // Erases the line (before printing anything else on stderr or stdout).
  void Clear();

 private:
  const std::string program_;
  const bool enabled_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;
  std::mutex mutex_;
  bool shown_ = false;
};

// Whether stderr is a terminal that can redraw a line (not TERM=dumb).
bool TerminalProgress();

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_COMMON_PROGRESS_H_
