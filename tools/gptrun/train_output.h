// What a gptrun run writes as it goes: the console lines (with a progress
// bar on a terminal) and the --log file of JSON events, which also feeds
// --report and --tensorboard. The phases of the train loop
// (tools/gptrun/train_loop.cc) all write through these.
#ifndef GPTC_TOOLS_GPTRUN_TRAIN_OUTPUT_H_
#define GPTC_TOOLS_GPTRUN_TRAIN_OUTPUT_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/support/status.h"

namespace gptc::tools {

// stdout, with a progress bar under the log when it is a terminal.
class Console {
 public:
  Console();
  // Ranks other than 0 print nothing (their errors still go to stderr).
  void set_quiet(bool quiet) { quiet_ = quiet; }
  void Line(const std::string& text);
  void Bar(int64_t step, int64_t total, double eta_s);
  void Clear();

 private:
  bool tty_;
  bool quiet_ = false;
  bool shown_ = false;
};

// The --log file: one JSON object a line; no-op without a path. A line that
// could not be written (a full disk) is kept as
// the log's error, which the loop turns into the run's: a log is never left
// cut mid-line while the run reports success (Note [checked stdout] in
// tools/common/flags.h is the same for what gptrun prints).
class JsonLog {
 public:
  static StatusOr<JsonLog> Open(const std::string& path);
  JsonLog() = default;
  JsonLog(JsonLog&& o) noexcept;
  JsonLog& operator=(JsonLog&&) = delete;
  ~JsonLog();
  // Every event also goes to `to` (gptrun --report, --tensorboard), with or
  // without a file.
  void Mirror(std::function<void(const nlohmann::json&)> to) { mirrors_.push_back(std::move(to)); }
  void Write(const nlohmann::json& event);
  // The first write that failed, if any.
  const Status& status() const { return status_; }

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  std::vector<std::function<void(const nlohmann::json&)>> mirrors_;
  Status status_;
};

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_TRAIN_OUTPUT_H_
