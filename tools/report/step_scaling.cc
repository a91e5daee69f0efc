#include "tools/report/step_scaling.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <variant>

#include "compiler/perf/step_timeline.h"
#include "compiler/program/gpu_spec.h"
#include "compiler/program/param.h"
#include "compiler/program/precision.h"
#include "compiler/support/file.h"

namespace gptc::tools::report {
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

}  // namespace

std::string ThunkTimes::Described() const {
  return unmeasured > 0 ? fmt::format("{}; {} thunks unmeasured, timed 0", source, unmeasured)
                        : source;
}

Status CheckTimeable(const program::Artifact& artifact, std::string_view artifact_path,
                     const program::EntryPlan& entry) {
  // A fusion without a kernel has no launch and no recorded cost.
  for (const Thunk& t : entry.thunks) {
    if (const auto* u = std::get_if<program::UnsupportedThunk>(&t.body)) {
      return Error("{}: {} has no kernel ({}): nothing to time it by", artifact_path, t.Describe(),
                   artifact.manifest.flags.codegen ? u->reason : "compiled with --no-codegen");
    }
  }
  return Status::Ok();
}

ThunkTimes TimesFromModel(const ModelTimes& model, const program::EntryPlan& entry) {
  ThunkTimes out{.us = std::vector<double>(entry.thunks.size()), .source = "H100 model"};
  for (const Thunk& t : entry.thunks) {
    auto it = model.launch_us.find({std::string(entry.name()), t.index});
    if (it != model.launch_us.end() && DoesWork(t)) out.us[t.index] = it->second;
  }
  return out;
}

// A gptc-profile-1 object's µs per call of each (thunk kind, name).
ThunkTimes TimesFromProfile(const nlohmann::json& profile, std::string_view label,
                            const program::EntryPlan& entry) {
  std::map<std::pair<std::string, std::string>, double> us;
  for (const nlohmann::json& r : profile.value("rows", nlohmann::json::array())) {
    const double calls = r.value("calls_per_step", 0.0);
    if (r.value("entry", "") != entry.name() || calls <= 0) continue;
    us[{r.value("kind", ""), r.value("name", "")}] = r.value("ms_per_step", 0.0) * 1e3 / calls;
  }
  const int64_t steps = profile.value("steps", int64_t{0});
  ThunkTimes out{.us = std::vector<double>(entry.thunks.size()),
                 .source = fmt::format("measured ({}, {} step{} on {})", label, steps,
                                       steps == 1 ? "" : "s", profile.value("device", "?"))};
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

StatusOr<ThunkTimes> TimesOf(const program::Artifact& artifact, const std::string& artifact_path,
                             const program::EntryPlan& entry, const std::string& source) {
  RETURN_IF_ERROR(CheckTimeable(artifact, artifact_path, entry));
  if (source == "roofline") return Roofline(entry);
  if (source == "model") {
    StatusOr<ModelTimes> model = ModelTimesOf(artifact);
    if (!model.ok()) return model.status().WithPrefix("--times model");
    return TimesFromModel(*model, entry);
  }
  StatusOr<std::string> text = ReadFile(source);
  if (!text.ok()) return text.status().WithPrefix("--times");
  const nlohmann::json profile = nlohmann::json::parse(*text, nullptr, false);
  if (profile.is_discarded()) return Error("--times {}: not JSON", source);
  RETURN_IF_ERROR(CheckProfile(profile, artifact, source, artifact_path));
  return TimesFromProfile(profile, source, entry);
}

StatusOr<const program::EntryPlan*> TrainStepEntry(const program::Plan& plan,
                                                   const program::Artifact& artifact,
                                                   std::string_view artifact_path) {
  for (const program::EntryPlan& e : plan.entries) {
    if (e.role == program::EntryRole::kTrainStep) return &e;
  }
  return Error(
      "{}: compiled with --grad-accum {}: no train_step entry (compile with --grad-accum 1 "
      "and give --grad-accum K to gptc simulate)",
      artifact_path, artifact.manifest.flags.grad_accum);
}

Status CheckUnsharded(const program::Artifact& artifact, std::string_view artifact_path) {
  if (artifact.manifest.flags.zero_stage == 0) return Status::Ok();
  return Error(
      "{}: compiled with --zero {}: the scaling model predicts ZeRO-1 from the --zero 0 "
      "artifact of the same model and batch (its --zero 1 rows)",
      artifact_path, artifact.manifest.flags.zero_stage);
}

StatusOr<perf::StepTimeline> TrainStepTimeline(const program::Artifact& artifact,
                                               std::string_view artifact_path,
                                               const program::EntryPlan& entry,
                                               const ThunkTimes& times) {
  RETURN_IF_ERROR(CheckUnsharded(artifact, artifact_path));
  StatusOr<std::vector<program::ParamSpec>> params =
      program::ParamsSectionFromJson(artifact.params);
  if (!params.ok()) return params.status().WithPrefix(artifact_path);
  int64_t values = 0;
  for (const program::ParamSpec& p : *params) values += p.shape.num_elements();
  const std::optional<program::PrecisionPolicy> precision =
      program::ParsePrecisionPolicy(artifact.manifest.flags.precision);
  if (!precision) {
    return Error("{}: the manifest's precision '{}' is neither f32 nor bf16", artifact_path,
                 artifact.manifest.flags.precision);
  }
  const program::CompileFlags& f = artifact.manifest.flags;
  StatusOr<perf::StepTimeline> timeline = perf::StepTimelineOf(
      entry, times.us, values * program::ComputeDtypeBytes(*precision), f.batch * f.seq);
  if (!timeline.ok()) return timeline.status().WithPrefix(artifact_path);
  return timeline;
}

nlohmann::json ScalingRowJson(const perf::ScalingRow& r) {
  return {{"gpus", r.config.gpus},
          {"step_ms", r.step_us / 1e3},
          {"compute_ms", r.compute_us / 1e3},
          {"exposed_ms", r.exposed_us / 1e3},
          {"comm_ms", r.comm_us / 1e3},
          {"tokens_per_second", r.tokens_per_second},
          {"efficiency", r.efficiency},
          {"buckets", r.buckets}};
}

nlohmann::json LinkJson(const perf::LinkModel& link) {
  return {{"gpus_per_node", link.gpus_per_node},
          {"nvlink_bus_gbs", link.nvlink_bus_gbs},
          {"network_bus_gbs", link.network_bus_gbs},
          {"base_latency_us", link.base_latency_us},
          {"nvlink_step_us", link.nvlink_step_us},
          {"network_step_us", link.network_step_us},
          {"tree_nvlink_step_us", link.tree_nvlink_step_us},
          {"tree_network_step_us", link.tree_network_step_us},
          {"tree_bandwidth_share", link.tree_bandwidth_share}};
}

}  // namespace gptc::tools::report
