// The data of the HTML report (docs/REPORTS.md): what `gptc report` and
// `gptrun --report` show of a compiled step (its thunks with their roofline
// and measured times, the arena over the schedule, the remat and fusion
// decisions per layer) and of training runs (their JSONL logs). The data is
// one JSON object ("gptc-report-1"), which report_html.h embeds in the page
// and the page's script draws; its schema is the comment at the top of
// tools/report/report.js.
//
// Nothing here links the compiler's passes: gptrun builds the same page from
// the artifact it runs, whose plan records each thunk's cost
// (program::ThunkCost).
#ifndef GPTC_TOOLS_REPORT_REPORT_DATA_H_
#define GPTC_TOOLS_REPORT_REPORT_DATA_H_

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/program/container.h"
#include "compiler/program/gpu_spec.h"
#include "compiler/support/status.h"

namespace gptc::tools::report {

// One training run: the `step`, `val` and `hellaswag` events of a gptrun --log file.
struct RunLog {
  std::string name;                                // the legend: the log's file name
  nlohmann::json steps = nlohmann::json::array();  // {step, loss, lr, norm, ms, tok_s, mfu}
  nlohmann::json val = nlohmann::json::array();    // {step, val_loss}
  nlohmann::json hellaswag = nlohmann::json::array();  // {step, acc, acc_norm, examples}
};

// Adds one gptrun --log event to `log` (step, val and hellaswag events;
// others are ignored). gptrun --report records its own run with it.
void AddLogEvent(RunLog& log, const nlohmann::json& event);

// Parses the text of a gptrun --log file named `name`. A last line cut short
// (a run still writing, or killed mid-line) is skipped with a warning, as
// is an empty log; a malformed line before the last is an error naming the
// line ("run.jsonl:3: not a JSON object"). Events other than step and val
// are ignored.
StatusOr<RunLog> ParseRunLog(std::string_view text, std::string_view name,
                             std::vector<std::string>& warnings);
StatusOr<RunLog> ReadRunLog(const std::string& path, std::vector<std::string>& warnings);

// Refuses a `gptrun --profile-json` file (`profile`, read from `path`) that
// is not one or was measured on another artifact than `artifact` (their
// checksums differ): one line naming both.
Status CheckProfile(const nlohmann::json& profile, const program::Artifact& artifact,
                    std::string_view path, std::string_view artifact_path);

// The H100 model's times of an artifact's step (Note [step model] in
// compiler/perf/step_model.h), by launch.
struct ModelTimes {
  std::map<std::pair<std::string, int64_t>, double> launch_us;  // by (entry, thunk index)
  double step_us = 0, roofline_us = 0, tokens_per_second = 0;
};
// Fails on an artifact the model cannot time (no kernels, an unsupported thunk).
StatusOr<ModelTimes> ModelTimesOf(const program::Artifact& artifact);

struct ReportInput {
  const program::Artifact* artifact = nullptr;  // none: runs only
  std::string artifact_path;
  const nlohmann::json* profile = nullptr;  // checked by CheckProfile
  std::string profile_label = "this run";   // what the scaling view calls it: its file
  std::vector<RunLog> runs;
  program::GpuSpec gpu = program::GpuSpec::H100();  // the rooflines'
  std::string generated_by;                         // "gptc report", "gptrun --report"
  std::vector<std::string> notes;                   // warnings shown at the top
  const ModelTimes* model = nullptr;                // the H100 model's, when available
};

// The report's data object. Fails only on a plan its codec refuses. Its
// "scaling" view predicts the train step on N GPUs (Note [scaling model] in
// compiler/perf/scaling_model.h) from the profile's times, else the H100
// model's; without either, or on a step it cannot time, it is null and
// "scaling_note" says why.
StatusOr<nlohmann::json> ReportData(const ReportInput& input);

}  // namespace gptc::tools::report

#endif  // GPTC_TOOLS_REPORT_REPORT_DATA_H_
