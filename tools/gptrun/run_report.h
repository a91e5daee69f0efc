// gptrun --report FILE.html: the HTML report (tools/report/) of the run in
// progress: the step of the artifact it runs, the profile when it profiles,
// and its own loss curves, rewritten at each checkpoint and at the end, so
// that a long run can be watched by reloading the file.
#ifndef GPTC_TOOLS_GPTRUN_RUN_REPORT_H_
#define GPTC_TOOLS_GPTRUN_RUN_REPORT_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "compiler/program/container.h"
#include "compiler/support/status.h"
#include "tools/report/report_data.h"

namespace gptc::rt {
class Trainer;
}  // namespace gptc::rt

namespace gptc::tools {

class RunReport {
 public:
  // `path` empty: records nothing, writes nothing. `run_name` is the legend.
  RunReport(std::string path, std::string run_name);

  bool enabled() const { return !path_.empty(); }
  // One event of the run's log (the step and val events are kept).
  void Record(const nlohmann::json& event);
  // Writes the page whole or not at all; errors name --report.
  Status Write(const program::Artifact& artifact, std::string_view artifact_path,
               rt::Trainer& trainer, std::string_view device_name) const;

 private:
  std::string path_;
  report::RunLog run_;
  // The H100 model's times of the artifact, computed at the first write.
  mutable std::optional<report::ModelTimes> model_;
  mutable bool model_tried_ = false;
};

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_RUN_REPORT_H_
