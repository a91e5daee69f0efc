#include "tools/gptrun/run_report.h"

#include <optional>
#include <utility>

#include "tools/gptrun/devices.h"
#include "tools/report/report_html.h"

namespace gptc::tools {

namespace {

// The rooflines of the card the run is on; an H100's elsewhere (the CPU
// device, the emulator), as gptc compile's fusion report assumes.
program::GpuSpec RooflineGpu(std::string_view device_name) {
  return program::GpuSpecOfDevice(device_name).value_or(program::GpuSpec::H100());
}

}  // namespace

RunReport::RunReport(std::string path, std::string run_name) : path_(std::move(path)) {
  run_.name = std::move(run_name);
}

void RunReport::Record(const nlohmann::json& event) {
  if (enabled()) report::AddLogEvent(run_, event);
}

Status RunReport::Write(const program::Artifact& artifact, std::string_view artifact_path,
                        rt::Trainer& trainer, std::string_view device_name) const {
  if (!enabled()) return Status::Ok();
  report::ReportInput input{.artifact = &artifact,
                            .artifact_path = std::string(artifact_path),
                            .runs = {run_},
                            .gpu = RooflineGpu(device_name),
                            .generated_by = "gptrun --report"};
  if (!model_tried_ && artifact.manifest.flags.codegen) {
    StatusOr<report::ModelTimes> times = report::ModelTimesOf(artifact);
    model_ = times.ok() ? std::optional(std::move(times).value()) : std::nullopt;
    model_tried_ = true;
  }
  if (model_) input.model = &*model_;
  std::optional<nlohmann::json> profile;
  if (std::string text = ProfileJson(trainer); !text.empty()) {
    profile = nlohmann::json::parse(text, nullptr, false);
    // Without --profile the table is empty: a page of roofline times only.
    if (profile->is_object() && !profile->value("rows", nlohmann::json::array()).empty()) {
      input.profile = &*profile;
    }
  }
  return report::WriteReport(path_, input).WithPrefix("--report");
}

}  // namespace gptc::tools
