#include "tools/gptc/simulate_times.h"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <variant>

#include "compiler/program/gpu_spec.h"
#include "compiler/support/file.h"
#include "tools/report/report_data.h"

namespace gptc::tools {
namespace {

using program::Thunk;
using program::ThunkKind;

// Whether the step spends time on `t`: not on a fallback kernel (it runs
// only where cuBLASLt refuses an epilogue), a constant, or an all-reduce
// (the scaling model times communication itself).
bool DoesWork(const Thunk& t) {
  const auto* k = std::get_if<program::KernelThunk>(&t.body);
  return !(k != nullptr && k->fallback) && t.kind() != ThunkKind::kConstant &&
         t.kind() != ThunkKind::kAllReduce;
}

ThunkTimes Roofline(const program::EntryPlan& entry) {
  const program::GpuSpec h100 = program::GpuSpec::H100();
  ThunkTimes out{.us = std::vector<double>(entry.thunks.size()), .source = "H100 roofline"};
  for (const Thunk& t : entry.thunks) {
    if (!DoesWork(t)) continue;
    if (t.cost) {
      out.us[t.index] = h100.RooflineUs(
          t.cost->flops, static_cast<double>(t.cost->bytes_read + t.cost->bytes_written));
    } else if (const auto* c = std::get_if<program::CopyThunk>(&t.body)) {
      out.us[t.index] = h100.RooflineUs(0, 2.0 * static_cast<double>(c->bytes));
    }
  }
  return out;
}

StatusOr<ThunkTimes> Model(const program::Artifact& artifact, const program::EntryPlan& entry) {
  StatusOr<report::ModelTimes> model = report::ModelTimesOf(artifact);
  if (!model.ok()) return model.status().WithPrefix("--times model");
  ThunkTimes out{.us = std::vector<double>(entry.thunks.size()), .source = "H100 model"};
  for (const Thunk& t : entry.thunks) {
    auto it = model->launch_us.find({std::string(entry.name()), t.index});
    if (it != model->launch_us.end() && DoesWork(t)) out.us[t.index] = it->second;
  }
  return out;
}

// A gptc-profile-1 file's µs per call of each (thunk kind, name).
StatusOr<ThunkTimes> Measured(const program::Artifact& artifact, const std::string& artifact_path,
                              const program::EntryPlan& entry, const std::string& path) {
  StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status().WithPrefix("--times");
  const nlohmann::json profile = nlohmann::json::parse(*text, nullptr, false);
  if (profile.is_discarded()) return Error("--times {}: not JSON", path);
  RETURN_IF_ERROR(report::CheckProfile(profile, artifact, path, artifact_path));
  std::map<std::pair<std::string, std::string>, double> us;
  for (const nlohmann::json& r : profile.value("rows", nlohmann::json::array())) {
    const double calls = r.value("calls_per_step", 0.0);
    if (r.value("entry", "") != entry.name() || calls <= 0) continue;
    us[{r.value("kind", ""), r.value("name", "")}] = r.value("ms_per_step", 0.0) * 1e3 / calls;
  }
  ThunkTimes out{.us = std::vector<double>(entry.thunks.size()),
                 .source = fmt::format("measured ({}, {} steps on {})", path,
                                       profile.value("steps", 0), profile.value("device", "?"))};
  for (const Thunk& t : entry.thunks) {
    if (!DoesWork(t)) continue;
    auto it = us.find({std::string(program::ThunkKindName(t.kind())), t.name});
    if (it == us.end()) {
      ++out.unmeasured;
    } else {
      out.us[t.index] = it->second;
    }
  }
  return out;
}

}  // namespace

StatusOr<ThunkTimes> TimesOf(const program::Artifact& artifact, const std::string& artifact_path,
                             const program::EntryPlan& entry, const std::string& source) {
  // A fusion without a kernel has no launch and no recorded cost.
  for (const Thunk& t : entry.thunks) {
    if (const auto* u = std::get_if<program::UnsupportedThunk>(&t.body)) {
      return Error("{}: {} has no kernel ({}): nothing to time it by", artifact_path, t.Describe(),
                   artifact.manifest.flags.codegen ? u->reason : "compiled with --no-codegen");
    }
  }
  if (source == "roofline") return Roofline(entry);
  if (source == "model") return Model(artifact, entry);
  return Measured(artifact, artifact_path, entry, source);
}

}  // namespace gptc::tools
