// gptc inspect FILE.gptx [--manifest|--ir|--ptx|--plan|--params]: a summary of
// an artifact, or one of its sections verbatim (compiler/program/container.h reads it,
// so a bad file gets the reader's one-line error).
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>

#include "compiler/perf/step_model.h"
#include "compiler/program/container.h"
#include "compiler/program/manifest.h"
#include "compiler/program/param.h"
#include "compiler/program/plan.h"
#include "compiler/support/text.h"
#include "tools/common/flags.h"
#include "tools/common/progress.h"
#include "tools/gptc/commands.h"

namespace gptc::tools {

namespace {

std::string Counts(const std::map<std::string, int64_t>& counts) {
  std::string s;
  for (const auto& [key, n] : counts) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", n, key);
  return s.empty() ? "none" : s;
}

// What a user can run the artifact on.
std::string Completeness(const program::Manifest& m) {
  if (m.complete) return "complete";
  if (!m.flags.codegen)
    return "no GPU code (compiled with --no-codegen): runs on --device cpu only";
  return "incomplete (some fusions have no kernel emitter): runs on --device cpu only";
}

StatusOr<std::string> Summary(const program::Artifact& a) {
  const program::Manifest& m = a.manifest;
  const program::ModelConfig& model = m.model;
  std::string s;
  s += fmt::format("artifact: format {}, gptc {}, target {}, {}\n", a.format_version,
                   m.gptc_version, m.target, Completeness(m));
  s += fmt::format("model: {} ({} layers, {} heads, width {}, vocab {} padded to {})\n", model.name,
                   model.layers, model.heads, model.width, model.vocab, model.padded_vocab);
  // As the manifest spells them (its codec's keys, sorted).
  const nlohmann::json flags_json = program::ToJson(m.flags);
  std::string flags;
  for (const auto& [key, v] : flags_json.items()) {
    flags += fmt::format("{}{}={}", flags.empty() ? "" : " ", key,
                         v.is_string() ? v.get<std::string>() : v.dump());
  }
  s += fmt::format("flags: {}\n", flags);
  ASSIGN_OR_RETURN(std::vector<program::ParamSpec> params,
                   program::ParamsSectionFromJson(a.params));
  int64_t values = 0;
  for (const program::ParamSpec& p : params) values += p.shape.num_elements();
  s += fmt::format("parameters: {} tensors, {} values\n", params.size(), WithThousands(values));
  // The entries, their signatures and buckets: the plan, through its codec.
  ASSIGN_OR_RETURN(program::Plan plan, program::PlanFromJson(a.plan));
  // Note [epilogue fallback]: the plan marks the kernels that launch only
  // where cuBLASLt refuses an epilogue.
  int64_t fallbacks = 0;
  for (const program::EntryPlan& e : plan.entries) {
    for (const program::Thunk& t : e.thunks) {
      const auto* k = std::get_if<program::KernelThunk>(&t.body);
      if (k != nullptr && k->fallback) ++fallbacks;
    }
  }
  int64_t kernel_thunks = 0;
  for (const auto& [kind, n] : m.counts.kernels_by_kind) kernel_thunks += n;
  s += fmt::format("kernels: {} distinct, launched by {} kernel thunks of all entries ({}){}\n",
                   m.kernels.size(), kernel_thunks, Counts(m.counts.kernels_by_kind),
                   fallbacks > 0 ? fmt::format("; the {} gemm fallbacks run only where cuBLASLt "
                                               "refuses an epilogue",
                                               fallbacks)
                                 : "");
  auto gemms = m.counts.thunks.find("gemm");
  s += fmt::format("gemms: {} ({})\n", gemms == m.counts.thunks.end() ? 0 : gemms->second,
                   Counts(m.counts.gemm_epilogues));
  s += fmt::format("thunks: {}\n", Counts(m.counts.thunks));
  if (!m.counts.unsupported.empty()) {
    s += fmt::format("unsupported: {}\n", Counts(m.counts.unsupported));
  }
  for (const program::EntryPlan& e : plan.entries) {
    s += fmt::format(
        "entry {}: {} inputs -> {} outputs, {} donations, arena {}{}\n", e.name(), e.inputs.size(),
        e.outputs.size(), e.donations.size(), FormatBytes(e.arena_size),
        e.arena_host ? fmt::format(" (in {}'s)", program::EntryRoleName(*e.arena_host)) : "");
  }
  s += fmt::format("arenas: {} allocated at load\n",
                   FormatBytes(program::ArenaAllocationBytes(plan.entries)));
  // Data parallelism: the all-reduce buckets of each entry (docs/ARTIFACT.md).
  for (const program::EntryPlan& e : plan.entries) {
    if (e.buckets.empty()) continue;
    int64_t bytes = 0, largest = 0, members = 0;
    for (const program::AllReduceBucket& b : e.buckets) {
      bytes += b.bytes;
      largest = std::max(largest, b.bytes);
      members += static_cast<int64_t>(b.members.size());
    }
    s += fmt::format("entry {}: {} all-reduces in {} buckets, {} (largest {})\n", e.name(), members,
                     e.buckets.size(), FormatBytes(bytes), FormatBytes(largest));
  }
  return s;
}

// --estimate: Note [step model], with progress on stderr (a 124m step takes
// a second or two).
StatusOr<std::string> EstimateTable(const program::Artifact& a, int64_t rows, bool json) {
  ASSIGN_OR_RETURN(perf::StepProgram program, perf::StepProgramOf(a));
  ProgressLine line("gptc", TerminalProgress());
  auto progress = [&line](int64_t done, int64_t total) {
    line.Show(fmt::format("estimating kernels {}/{}", done, total));
  };
  ASSIGN_OR_RETURN(perf::StepEstimate estimate,
                   perf::EstimateStep(program, perf::H100(), progress));
  line.Clear();
  if (json) {
    nlohmann::json j = perf::StepEstimateJson(program, estimate);
    j["artifact_checksum"] = fmt::format("{:016x}", a.checksum);
    return j.dump(1) + "\n";
  }
  return perf::FormatStepEstimate(program, estimate, rows);
}

}  // namespace

int InspectCommand(int argc, char** argv) {
  Flags flags("gptc inspect",
              "FILE.gptx [--manifest|--ir|--ptx|--plan|--params]\n"
              "FILE.gptx --kernel-stats [--kernels SUBSTRING]\n"
              "FILE.gptx --cubins DIR [--kernels SUBSTRING]\n"
              "FILE.gptx --estimate [--rows N | --json]",
              "Summarizes an artifact (model, flags, parameters, entries, kernels, arena), or "
              "prints the sections asked for verbatim, in the order below, or a table of the "
              "kernels' static PTX statements by class (Note [counting PTX] in "
              "compiler/support/ptx_stats.h), or the step's H100 time by the model of "
              "docs/PERFORMANCE.md (Note [step model] in compiler/perf/step_model.h).");
  flags.Bool("manifest", "the manifest (JSON)")
      .Bool("ir", "the optimized IR of every entry")
      .Bool("ptx", "the kernels' PTX")
      .Bool("plan", "the thunk plans (JSON)")
      .Bool("params", "the parameter specs and init rules (JSON)")
      .Bool("kernel-stats",
            "per kernel: PTX statements by class and per mma (whole kernel, then each innermost "
            "mma loop), ptxas registers and spills, shared memory, H100 blocks per SM")
      .Value("cubins", "DIR",
             "write each kernel's ptxas object to DIR/ENTRY.KERNEL.cubin (for cuobjdump -sass)")
      .Value("kernels", "SUBSTRING",
             "with --kernel-stats or --cubins: only kernels whose name contains it")
      .Bool("estimate",
            "the train step's H100 time and tok/s by the latency-aware model, kernel by kernel "
            "and gemm by gemm, next to the plan's roofline")
      .Value("rows", "N", "with --estimate: the longest N launches (default 40)")
      .Bool("json",
            "with --estimate: every launch as JSON (gptc-estimate-1, for scripts/fit-gemm-table)");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  if (flags.positional().size() != 1) return Fail(UsageError("inspect takes one FILE.gptx"));
  StatusOr<program::Artifact> a = program::ReadArtifact(flags.positional()[0]);
  if (!a.ok()) return Fail(1, a.status());
  if (flags.Has("estimate")) {
    StatusOr<int64_t> rows = flags.GetInt("rows", 40);
    if (!rows.ok()) return Fail(rows.status().WithCode(StatusCode::kUsage));
    if (*rows < 1) return Fail(UsageError("--rows wants a positive number, got {}", *rows));
    StatusOr<std::string> table = EstimateTable(*a, *rows, flags.Has("json"));
    if (!table.ok()) return Fail(1, table.status().WithPrefix(flags.positional()[0]));
    std::fputs(table->c_str(), stdout);
    return 0;
  }
  if (flags.Has("rows") || flags.Has("json")) {
    return Fail(UsageError("--{} goes with --estimate", flags.Has("rows") ? "rows" : "json"));
  }
  if (flags.Has("kernel-stats")) {
    StatusOr<std::string> table = KernelStatsTable(*a, flags.Get("kernels", ""));
    if (!table.ok()) return Fail(1, table.status().WithPrefix(flags.positional()[0]));
    std::fputs(table->c_str(), stdout);
    return 0;
  }
  if (flags.Has("cubins")) {
    StatusOr<int64_t> written = WriteCubins(*a, flags.Get("kernels", ""), flags.Get("cubins"));
    if (!written.ok()) return Fail(1, written.status().WithPrefix(flags.positional()[0]));
    std::printf("%lld cubins in %s\n", static_cast<long long>(*written),
                flags.Get("cubins").c_str());
    return 0;
  }
  if (flags.Has("kernels")) {
    return Fail(UsageError("--kernels goes with --kernel-stats or --cubins"));
  }
  // Every section asked for, in this order (--ir --plan prints both).
  bool printed = false;
  for (const char* section : {"manifest", "ir", "ptx", "plan", "params"}) {
    if (!flags.Has(section)) continue;
    const std::string* bytes = a->Find(section);
    std::fwrite(bytes->data(), 1, bytes->size(), stdout);
    if (!bytes->empty() && bytes->back() != '\n') std::fputc('\n', stdout);
    printed = true;
  }
  if (printed) return 0;
  StatusOr<std::string> summary = Summary(*a);
  if (!summary.ok()) return Fail(1, summary.status().WithPrefix(flags.positional()[0]));
  std::fputs(summary->c_str(), stdout);
  return 0;
}

}  // namespace gptc::tools
