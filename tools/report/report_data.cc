#include "tools/report/report_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>
#include <tuple>

#include "compiler/perf/scaling_model.h"
#include "compiler/perf/step_model.h"
#include "compiler/program/param.h"
#include "compiler/program/plan.h"
#include "compiler/support/file.h"
#include "tools/report/step_scaling.h"

namespace gptc::tools::report {

namespace {

using nlohmann::json;
using program::EntryPlan;
using program::Thunk;
using program::ThunkKind;

// A finite number of `j[key]`, else null (gptrun logs a diverged loss as
// null, and the page skips it).
json NumberOrNull(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return nullptr;
  const double v = it->get<double>();
  return std::isfinite(v) ? json(v) : json(nullptr);
}

// Where a thunk belongs, as the page shows it: its group ("layer 3",
// "embed", "parameters", "head", "optimizer", "other"), layer and phase
// (forward, backward, recompute, optimizer), read from the role the
// compiler recorded (Note [plan roles] in compiler/program/plan_role.h); a
// plan written before roles were recorded gives "unknown".
struct Placement {
  std::string group = "unknown";
  int64_t layer = -1;
  std::string phase = "unknown";
  bool recomputed = false;  // phase remat
};

std::string PhaseShown(ir::Phase phase) {
  switch (phase) {
    case ir::Phase::kGradient:
      return "backward";
    case ir::Phase::kRemat:
      return "recompute";
    case ir::Phase::kUpdate:
    case ir::Phase::kOptimizer:
      return "optimizer";
    case ir::Phase::kNone:
    case ir::Phase::kForward:
    case ir::Phase::kParamCast:
      break;
  }
  return "forward";
}

std::string GroupShown(const program::ThunkRole& role) {
  switch (role.group) {
    case program::ThunkGroup::kBlock:
      return fmt::format("layer {}", role.layer);
    case program::ThunkGroup::kEmbedding:
      return "embed";
    case program::ThunkGroup::kHead:
      return "head";
    case program::ThunkGroup::kParamCast:
      return "parameters";  // the bf16 copies of the weights the forward reads
    case program::ThunkGroup::kOptimizer:
      return "optimizer";
    case program::ThunkGroup::kOther:
      break;
  }
  return "other";
}

Placement Place(const std::optional<program::ThunkRole>& role) {
  if (!role) return {};
  return {.group = GroupShown(*role),
          .layer = role->group == program::ThunkGroup::kBlock ? role->layer : -1,
          .phase = PhaseShown(role->phase),
          .recomputed = role->phase == ir::Phase::kRemat};
}

// Measured µs per call of each (kind, name) of a gptc-profile-1 file.
std::map<std::pair<std::string, std::string>, double> MeasuredUs(const json* profile) {
  std::map<std::pair<std::string, std::string>, double> us;
  if (profile == nullptr || !profile->contains("rows")) return us;
  for (const json& r : (*profile)["rows"]) {
    const double calls = r.value("calls_per_step", 0.0);
    if (calls <= 0) continue;
    us[{r.value("kind", ""), r.value("name", "")}] = r.value("ms_per_step", 0.0) * 1e3 / calls;
  }
  return us;
}

// The entries that run every step: train_step, or accumulate and apply.
std::vector<const EntryPlan*> StepEntries(const program::Plan& plan) {
  std::vector<const EntryPlan*> entries;
  for (const EntryPlan& e : plan.entries) {
    if (!program::RunsBetweenSteps(e.role)) entries.push_back(&e);
  }
  return entries;
}

// One row of the thunk table: the typed facts the groups and the remat
// view add up, and the row as the page gets it.
struct Row {
  ThunkKind kind = ThunkKind::kKernel;
  Placement place;
  std::string name;  // the instruction
  double roofline_us = 0;
  std::optional<double> measured_us;
  json page;
};

// One row per thunk that does work (fallback kernels, which run only when
// cuBLASLt refuses an epilogue, and constants left out).
std::vector<Row> ThunkRows(const std::vector<const EntryPlan*>& entries,
                           const program::GpuSpec& gpu, const json* profile,
                           const ModelTimes* model) {
  const auto measured = MeasuredUs(profile);
  std::vector<Row> rows;
  for (const EntryPlan* e : entries) {
    for (const Thunk& t : e->thunks) {
      const auto* k = std::get_if<program::KernelThunk>(&t.body);
      if ((k != nullptr && k->fallback) || t.kind() == ThunkKind::kConstant) continue;
      const std::string kind(program::ThunkKindName(t.kind()));
      Row row{.kind = t.kind(), .place = Place(t.role), .name = t.instruction()};
      double flops = 0, bytes = 0;
      if (t.cost) {
        flops = t.cost->flops;
        bytes = static_cast<double>(t.cost->bytes_read + t.cost->bytes_written);
      } else if (const auto* c = std::get_if<program::CopyThunk>(&t.body)) {
        bytes = 2.0 * static_cast<double>(c->bytes);
      }
      row.roofline_us = gpu.RooflineUs(flops, bytes);
      if (auto it = measured.find({kind, t.name}); it != measured.end()) {
        row.measured_us = it->second;
      }
      std::optional<double> model_us;
      if (model != nullptr) {
        auto it = model->launch_us.find({std::string(e->name()), t.index});
        if (it != model->launch_us.end()) model_us = it->second;
      }
      row.page = {{"entry", e->name()},
                  {"i", t.index},
                  {"name", row.name},
                  {"kernel", t.name},
                  {"kind", kind},
                  {"fusion_kind", k != nullptr                   ? k->fusion_kind
                                  : t.kind() == ThunkKind::kGemm ? "gemm"
                                                                 : ""},
                  {"group", row.place.group},
                  {"layer", row.place.layer},
                  {"phase", row.place.phase},
                  {"meta", t.meta},
                  {"flops", flops},
                  {"bytes", bytes},
                  {"roofline_us", row.roofline_us},
                  {"compute_bound", gpu.ComputeBound(flops, bytes)},
                  {"measured_us", row.measured_us ? json(*row.measured_us) : json(nullptr)},
                  {"model_us", model_us ? json(*model_us) : json(nullptr)}};
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

// Per-group totals of `rows`, in order of first appearance.
json GroupRows(const std::vector<Row>& rows) {
  json groups = json::array();
  std::map<std::string, size_t> index;
  for (const Row& r : rows) {
    auto [it, added] = index.emplace(r.place.group, groups.size());
    if (added) {
      groups.push_back({{"name", r.place.group},
                        {"kernels", 0},
                        {"gemms", 0},
                        {"recomputed", 0},
                        {"roofline_us", 0.0},
                        {"measured_us", nullptr}});
    }
    json& g = groups[it->second];
    if (r.kind == ThunkKind::kKernel) g["kernels"] = g["kernels"].get<int64_t>() + 1;
    if (r.kind == ThunkKind::kGemm) g["gemms"] = g["gemms"].get<int64_t>() + 1;
    if (r.place.recomputed) g["recomputed"] = g["recomputed"].get<int64_t>() + 1;
    g["roofline_us"] = g["roofline_us"].get<double>() + r.roofline_us;
    if (r.measured_us) {
      const double before = g["measured_us"].is_number() ? g["measured_us"].get<double>() : 0.0;
      g["measured_us"] = before + *r.measured_us;
    }
  }
  return groups;
}

// Note [arena categories]: what a buffer of the arena holds, for the
// arena view, as the plan records it (program::BufferCategory, Note [plan
// roles]); "unknown" in plans written before it was recorded.
constexpr const char* kCategories[] = {"parameters", "optimizer state", "gradients", "activations",
                                       "data",       "unknown"};
constexpr int kUnknownCategory = program::kBufferCategories;

int CategoryIndex(const std::optional<program::BufferCategory>& c) {
  switch (c.value_or(program::BufferCategory::kData)) {
    case program::BufferCategory::kParameter:
      return 0;
    case program::BufferCategory::kOptimizerState:
      return 1;
    case program::BufferCategory::kGradient:
      return 2;
    case program::BufferCategory::kActivation:
      return 3;
    case program::BufferCategory::kData:
      break;
  }
  return c ? 4 : kUnknownCategory;
}

struct BufferLife {
  const program::PlanBuffer* buffer = nullptr;
  int64_t first = -1, last = -1;
  int category = kUnknownCategory;
  std::string source;  // the slot's name, or the scope of its first thunk
  int64_t layer = -1;  // the block of its first thunk, -1: none
};

// Each buffer's live range over the entry's thunks: from its first to its
// last use; inputs from the start, outputs to the end.
std::map<int64_t, BufferLife> BufferLives(const EntryPlan& e) {
  std::map<int64_t, BufferLife> lives;
  for (const program::PlanBuffer& b : e.buffers) {
    lives[b.id] = {.buffer = &b, .category = CategoryIndex(b.category)};
  }
  const int64_t end = std::max<int64_t>(static_cast<int64_t>(e.thunks.size()) - 1, 0);
  for (const Thunk& t : e.thunks) {
    for (const program::ArenaSlice* s : program::ThunkSlices(t)) {
      auto it = lives.find(s->buffer);
      if (it == lives.end()) continue;
      BufferLife& l = it->second;
      if (l.first < 0) {
        l.first = t.index;
        l.source = t.meta.empty() ? t.instruction() : t.meta;
        l.layer = Place(t.role).layer;
      }
      l.last = std::max(l.last, t.index);
    }
  }
  for (const program::PlanSlot& s : e.inputs) {
    auto it = lives.find(s.slice.buffer);
    if (it == lives.end()) continue;
    it->second.first = 0;
    it->second.source = s.name;
    if (it->second.last < 0) it->second.last = end;
  }
  for (const program::PlanSlot& s : e.outputs) {
    auto it = lives.find(s.slice.buffer);
    if (it == lives.end()) continue;
    if (it->second.first < 0) it->second.first = 0;
    it->second.last = end;
  }
  return lives;
}

// The arena of `e` over its schedule: bytes live per category at each
// thunk, and what is live at the peak, largest first.
json ArenaData(const EntryPlan& e, const std::map<int64_t, BufferLife>& lives) {
  const size_t n = e.thunks.size();
  constexpr size_t kShown = std::size(kCategories);
  std::vector<std::array<int64_t, kShown>> live(n, std::array<int64_t, kShown>{});
  for (const auto& [id, l] : lives) {
    if (l.first < 0) continue;
    for (int64_t i = l.first; i <= l.last && i < static_cast<int64_t>(n); ++i) {
      live[i][l.category] += l.buffer->slice.size;
    }
  }
  size_t peak = 0;
  int64_t peak_bytes = 0;
  json live_json = json::array(), positions = json::array();
  for (size_t i = 0; i < n; ++i) {
    int64_t total = 0;
    for (int64_t b : live[i]) total += b;
    if (total > peak_bytes) peak = i, peak_bytes = total;
    live_json.push_back(live[i]);
    positions.push_back(e.thunks[i].name);
  }
  std::vector<std::pair<int64_t, int64_t>> at_peak;  // (bytes, id)
  for (const auto& [id, l] : lives) {
    if (l.first >= 0 && l.first <= static_cast<int64_t>(peak) &&
        static_cast<int64_t>(peak) <= l.last) {
      at_peak.emplace_back(l.buffer->slice.size, id);
    }
  }
  std::sort(at_peak.begin(), at_peak.end(), std::greater<>());
  json buffers = json::array();
  for (const auto& [bytes, id] : at_peak) {
    const BufferLife& l = lives.at(id);
    const program::PlanBuffer& b = *l.buffer;
    buffers.push_back({{"name", b.name},
                       {"shape", b.shape},
                       {"category", kCategories[l.category]},
                       {"bytes", bytes},
                       {"source", l.source}});
  }
  return {{"entry", e.name()},
          {"size", e.arena_size},
          {"categories", kCategories},
          {"live", std::move(live_json)},
          {"positions", std::move(positions)},
          {"peak", {{"position", peak}, {"bytes", peak_bytes}, {"buffers", std::move(buffers)}}}};
}

json RematData(const program::Manifest& m, const std::vector<Row>& rows) {
  json layers = json::array();
  // The manifest's record of each block's policy; "unknown" in artifacts
  // written before it was recorded.
  const std::vector<std::string>& policies = m.flags.remat_layers;
  for (int64_t l = 0; l < m.model.layers; ++l) {
    layers.push_back(
        {{"layer", l},
         {"policy", l < static_cast<int64_t>(policies.size()) ? policies[l] : "unknown"},
         {"kernels", 0},
         {"recomputed", 0},
         {"recomputed_names", json::array()}});
  }
  for (const Row& r : rows) {
    const int64_t l = r.place.layer;
    if (l < 0 || l >= m.model.layers) continue;
    json& layer = layers[l];
    layer["kernels"] = layer["kernels"].get<int64_t>() + 1;
    if (r.place.recomputed) {
      layer["recomputed"] = layer["recomputed"].get<int64_t>() + 1;
      layer["recomputed_names"].push_back(r.name);
    }
  }
  return {{"plan", m.flags.remat}, {"layers", std::move(layers)}};
}

// What each layer keeps for its backward: the activations of layer N's
// forward still live when the backward starts (the first thunk of the
// gradient phase), largest first. Remat trades these bytes for
// recomputation.
void AddKeptActivations(const EntryPlan& e, const std::map<int64_t, BufferLife>& lives,
                        json& layers) {
  int64_t boundary = -1;
  for (const Thunk& t : e.thunks) {
    if (t.role && t.role->phase == ir::Phase::kGradient) {
      boundary = t.index;
      break;
    }
  }
  for (json& layer : layers) {
    layer["kept_bytes"] = 0;
    layer["kept"] = json::array();
  }
  if (boundary < 0) return;
  std::vector<std::tuple<int64_t, int64_t, std::string, std::string>> kept;  // bytes, layer, ...
  for (const auto& [id, l] : lives) {
    if (l.category != 3 || l.first < 0 || l.first >= boundary || l.last < boundary) continue;
    if (l.layer < 0 || l.layer >= static_cast<int64_t>(layers.size())) continue;
    kept.emplace_back(l.buffer->slice.size, l.layer, l.buffer->name, l.buffer->shape);
  }
  std::sort(kept.begin(), kept.end(), std::greater<>());
  for (const auto& [bytes, l, name, shape] : kept) {
    json& layer = layers[l];
    layer["kept_bytes"] = layer["kept_bytes"].get<int64_t>() + bytes;
    layer["kept"].push_back({{"name", name}, {"shape", shape}, {"bytes", bytes}});
  }
}

// The scaling view's data, or null and why.
struct ScalingView {
  json data;
  std::string note;
};

// The train step on perf::kScalingGpuCounts GPUs at the default link and
// bucket cap, ZeRO-0 and ZeRO-1 (gathering after the optimizer), from the
// profile's times, else the H100 model's: what `gptc simulate` prints by
// default.
ScalingView ScalingData(const ReportInput& in, const program::Plan& plan) {
  const program::Artifact& a = *in.artifact;
  StatusOr<const EntryPlan*> entry = TrainStepEntry(plan, a, in.artifact_path);
  if (!entry.ok()) return {nullptr, entry.status().message()};
  if (Status s = CheckTimeable(a, in.artifact_path, **entry); !s.ok()) {
    return {nullptr, s.message()};
  }
  ThunkTimes times;
  if (in.profile != nullptr) {
    times = TimesFromProfile(*in.profile, in.profile_label, **entry);
  } else if (in.model != nullptr) {
    times = TimesFromModel(*in.model, **entry);
  } else {
    return {nullptr, "no times for the step: no profile, and no H100 model estimate"};
  }
  StatusOr<perf::StepTimeline> step = TrainStepTimeline(a, in.artifact_path, **entry, times);
  if (!step.ok()) return {nullptr, step.status().message()};
  const perf::LinkModel link;
  json tables = json::array();
  for (int zero : {0, 1}) {
    const perf::ScalingConfig config{.zero = zero};
    json rows = json::array();
    int64_t buckets = 0;
    for (const perf::ScalingRow& r :
         perf::SimulateSteps(*step, link, config, perf::kScalingGpuCounts)) {
      rows.push_back(ScalingRowJson(r));
      buckets = r.buckets;
    }
    tables.push_back({{"zero", zero},
                      {"config", perf::DescribeConfig(config)},
                      {"bucket_bytes", config.bucket_bytes},
                      {"buckets", buckets},
                      {"rows", std::move(rows)}});
  }
  return {json{{"times", times.Described()},
               {"tokens", step->tokens},
               {"one_gpu",
                {{"step_ms", step->compute_us() / 1e3},
                 {"forward_ms", step->forward_us / 1e3},
                 {"backward_ms", (step->backward_end_us - step->forward_us) / 1e3},
                 {"optimizer_ms", step->optimizer_us / 1e3}}},
               {"link", LinkJson(link)},
               {"tables", std::move(tables)}},
          ""};
}

StatusOr<json> ArtifactData(const ReportInput& in) {
  const program::Artifact& a = *in.artifact;
  const program::Manifest& m = a.manifest;
  int64_t parameters = 0;
  if (StatusOr<std::vector<program::ParamSpec>> params = program::ParamsSectionFromJson(a.params);
      params.ok()) {
    for (const program::ParamSpec& p : *params) parameters += p.shape.num_elements();
  }
  json data{
      {"path", in.artifact_path},
      {"model",
       {{"name", m.model.name},
        {"layers", m.model.layers},
        {"heads", m.model.heads},
        {"width", m.model.width},
        {"vocab", m.model.vocab},
        {"context", m.model.positions},
        {"parameters", parameters}}},
      {"flags",
       {{"batch", m.flags.batch},
        {"seq", m.flags.seq},
        {"grad_accum", m.flags.grad_accum},
        {"precision", m.flags.precision},
        {"remat", m.flags.remat},
        {"world_size", m.flags.world_size}}},
      {"gpu",
       {{"name", in.gpu.name}, {"peak_tflops", in.gpu.peak_tflops}, {"hbm_gbps", in.gpu.hbm_gbps}}},
      {"has_plan", m.flags.codegen},
      {"note", m.flags.codegen ? "" : "compiled with --no-codegen: no kernels, no plan"},
      {"profile", nullptr},
      {"h100_model", nullptr},
      {"thunks", json::array()},
      {"groups", json::array()},
      {"arena", nullptr},
      {"remat", RematData(m, {})},
      {"scaling", nullptr},
      {"scaling_note", m.flags.codegen ? "" : "compiled with --no-codegen: no kernels to time"}};
  if (in.profile != nullptr) {
    data["profile"] = {{"steps", in.profile->value("steps", 0)},
                       {"device", in.profile->value("device", "")},
                       {"emulated", in.profile->value("emulated", false)}};
  }
  if (!m.flags.codegen) return data;
  ASSIGN_OR_RETURN(program::Plan plan, program::PlanFromJson(a.plan));
  const std::vector<const EntryPlan*> entries = StepEntries(plan);
  const std::vector<Row> rows = ThunkRows(entries, in.gpu, in.profile, in.model);
  for (const Row& r : rows) data["thunks"].push_back(r.page);
  if (in.model != nullptr) {
    data["h100_model"] = {{"step_us", in.model->step_us},
                          {"tokens_per_second", in.model->tokens_per_second},
                          {"roofline_us", in.model->roofline_us}};
  }
  ScalingView scaling = ScalingData(in, plan);
  data["scaling"] = std::move(scaling.data);
  data["scaling_note"] = scaling.note;
  data["groups"] = GroupRows(rows);
  data["remat"] = RematData(m, rows);
  if (!entries.empty()) {
    const std::map<int64_t, BufferLife> lives = BufferLives(*entries.front());
    data["arena"] = ArenaData(*entries.front(), lives);
    AddKeptActivations(*entries.front(), lives, data["remat"]["layers"]);
  }
  return data;
}

}  // namespace

void AddLogEvent(RunLog& log, const json& event) {
  const std::string kind = event.value("event", "");
  if (!event.contains("step") || !event["step"].is_number()) return;
  if (kind == "step") {
    log.steps.push_back({{"step", event["step"]},
                         {"loss", NumberOrNull(event, "loss")},
                         {"lr", NumberOrNull(event, "lr")},
                         {"norm", NumberOrNull(event, "norm")},
                         {"ms", NumberOrNull(event, "ms")},
                         {"tok_s", NumberOrNull(event, "tok_s")},
                         {"mfu", NumberOrNull(event, "mfu")}});
  } else if (kind == "val") {
    log.val.push_back({{"step", event["step"]}, {"val_loss", NumberOrNull(event, "val_loss")}});
  } else if (kind == "hellaswag") {
    log.hellaswag.push_back({{"step", event["step"]},
                             {"acc", NumberOrNull(event, "acc")},
                             {"acc_norm", NumberOrNull(event, "acc_norm")},
                             {"examples", NumberOrNull(event, "examples")}});
  }
}

StatusOr<RunLog> ParseRunLog(std::string_view text, std::string_view name,
                             std::vector<std::string>& warnings) {
  RunLog log;
  log.name = std::string(name);
  int64_t line_number = 0, records = 0;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    const bool last = end == std::string_view::npos;
    if (last) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    json event = json::parse(line, nullptr, false);
    if (event.is_discarded() || !event.is_object()) {
      if (last) {
        warnings.push_back(fmt::format("{}:{}: last line cut short (a run still writing?): skipped",
                                       name, line_number));
        break;
      }
      return Error("{}:{}: not a JSON object (is it a gptrun --log file?)", name, line_number);
    }
    ++records;
    AddLogEvent(log, event);
  }
  if (records == 0) warnings.push_back(fmt::format("{}: empty log: no steps to draw", name));
  return log;
}

StatusOr<RunLog> ReadRunLog(const std::string& path, std::vector<std::string>& warnings) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseRunLog(text, path, warnings);
}

Status CheckProfile(const json& profile, const program::Artifact& artifact, std::string_view path,
                    std::string_view artifact_path) {
  if (!profile.is_object() || profile.value("format", "") != "gptc-profile-1") {
    return Error("{}: not a gptrun --profile-json file (no format gptc-profile-1)", path);
  }
  const std::string want = fmt::format("{:016x}", artifact.checksum);
  const std::string got = profile.value("artifact_checksum", "");
  if (got.empty()) {
    return Error("{}: records no artifact checksum (written by an older gptrun): profile again",
                 path);
  }
  if (got != want) {
    return Error("{}: measured on another artifact ({}, checksum {}), not {} (checksum {})", path,
                 profile.value("artifact", "?"), got, artifact_path, want);
  }
  return Status::Ok();
}

StatusOr<ModelTimes> ModelTimesOf(const program::Artifact& artifact) {
  ASSIGN_OR_RETURN(perf::StepProgram program, perf::StepProgramOf(artifact));
  ASSIGN_OR_RETURN(perf::StepEstimate estimate, perf::EstimateStep(program, perf::H100()));
  ModelTimes times;
  for (size_t i = 0; i < program.launches.size(); ++i) {
    const perf::StepLaunch& l = program.launches[i];
    times.launch_us[{l.entry, l.thunk}] = estimate.launches[i].us;
  }
  times.step_us = estimate.us();
  times.roofline_us = estimate.roofline_us;
  times.tokens_per_second = estimate.TokensPerSecond(program.tokens);
  return times;
}

StatusOr<json> ReportData(const ReportInput& in) {
  json data{{"format", "gptc-report-1"},
            {"generated_by", in.generated_by},
            {"notes", in.notes},
            {"artifact", nullptr},
            {"runs", json::array()}};
  std::string title = "gptc report";
  if (in.artifact != nullptr) {
    ASSIGN_OR_RETURN(data["artifact"], ArtifactData(in));
    const program::Manifest& m = in.artifact->manifest;
    title = fmt::format("{} · batch {} · seq {}", m.model.name, m.flags.batch, m.flags.seq);
  }
  data["title"] = title;
  for (const RunLog& r : in.runs) {
    data["runs"].push_back(
        {{"name", r.name}, {"steps", r.steps}, {"val", r.val}, {"hellaswag", r.hellaswag}});
  }
  return data;
}

}  // namespace gptc::tools::report
