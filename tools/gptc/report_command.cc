// gptc report: the HTML report of a compiled step and of training runs
// (docs/REPORTS.md).
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <optional>

#include "compiler/program/container.h"
#include "compiler/support/file.h"
#include "tools/common/flags.h"
#include "tools/gptc/commands.h"
#include "tools/report/report_html.h"

namespace gptc::tools {

namespace {

Flags ReportFlags() {
  Flags flags("gptc report", "[ARTIFACT.gptx] [--profile FILE.json] [--log RUN.jsonl ...] -o FILE",
              "Writes one self-contained HTML page (no network, no file beside it): the step's "
              "kernels and gemms in schedule order with their roofline times (and measured ones "
              "with --profile), per-layer totals, the arena over the schedule with what is live "
              "at its peak, the remat and fusion decisions per layer, and the loss, validation "
              "loss, tok/s, MFU, learning rate and grad norm of each --log, overlaid.");
  flags
      .Value("profile", "FILE.json",
             "measured times: gptrun --profile --profile-json FILE on this artifact")
      .Value("log", "RUN.jsonl", "a gptrun --log file; repeat for several runs")
      .Value("gpu", "h100|h200|a100", "the GPU whose peaks give the rooflines", "h100")
      .Value("output", "FILE", "the page to write")
      .Short('o');
  return flags;
}

StatusOr<nlohmann::json> ReadProfile(const std::string& path) {
  StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status().WithPrefix("--profile");
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) return Error("--profile {}: not JSON", path);
  return j;
}

}  // namespace

int ReportCommand(int argc, char** argv) {
  Flags flags = ReportFlags();
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  if (flags.positional().size() > 1) {
    return Fail(UsageError("report: one artifact at most, got '{}' and '{}'", flags.positional()[0],
                           flags.positional()[1]));
  }
  const std::string out = flags.Get("output");
  if (out.empty()) return Fail(UsageError("report: -o FILE is required"));
  // Before reading anything: a device, FIFO or directory is refused now.
  if (Status s = CheckOutputTarget(out); !s.ok()) return Fail(1, s);
  const std::vector<std::string> logs = flags.GetAll("log");
  if (flags.positional().empty() && logs.empty()) {
    return Fail(UsageError("report: give an artifact, a --log, or both"));
  }
  if (flags.Has("profile") && flags.positional().empty()) {
    return Fail(UsageError("report: --profile needs the artifact it measured"));
  }
  std::optional<program::GpuSpec> gpu = program::FindGpuSpec(flags.Get("gpu"));
  if (!gpu) return Fail(UsageError("--gpu must be h100, h200 or a100, got '{}'", flags.Get("gpu")));

  report::ReportInput input{.gpu = *gpu, .generated_by = "gptc report"};
  std::optional<program::Artifact> artifact;
  if (!flags.positional().empty()) {
    input.artifact_path = flags.positional()[0];
    StatusOr<program::Artifact> read = program::ReadArtifact(input.artifact_path);
    if (!read.ok()) return Fail(1, read.status());
    artifact.emplace(std::move(read).value());
    input.artifact = &*artifact;
  }
  // The H100 model's step (a second or two for gpt2-124m); an artifact it
  // cannot time (no kernels) gets a page without it and a note.
  std::optional<report::ModelTimes> model;
  if (artifact && artifact->manifest.flags.codegen) {
    StatusOr<report::ModelTimes> times = report::ModelTimesOf(*artifact);
    if (times.ok()) {
      model = std::move(times).value();
      input.model = &*model;
    } else {
      input.notes.push_back("no H100 model estimate: " + times.status().message());
    }
  }
  std::optional<nlohmann::json> profile;
  if (flags.Has("profile")) {
    const std::string path = flags.Get("profile");
    StatusOr<nlohmann::json> read = ReadProfile(path);
    if (!read.ok()) return Fail(1, read.status());
    profile = std::move(read).value();
    Status matches = report::CheckProfile(*profile, *artifact, path, input.artifact_path);
    if (!matches.ok()) return Fail(1, matches);
    input.profile = &*profile;
    input.profile_label = path;
  }
  for (const std::string& path : logs) {
    StatusOr<report::RunLog> log = report::ReadRunLog(path, input.notes);
    if (!log.ok()) return Fail(1, log.status().WithPrefix("--log"));
    log->name = std::filesystem::path(path).filename().string();
    input.runs.push_back(std::move(log).value());
  }
  for (const std::string& note : input.notes)
    std::fprintf(stderr, "gptc: warning: %s\n", note.c_str());
  // WriteFileAtomically's errors name `out`; the data's name the plan.
  if (Status s = report::WriteReport(out, input); !s.ok()) return Fail(1, s);
  std::printf("report -> %s\n", out.c_str());
  return 0;
}

}  // namespace gptc::tools
