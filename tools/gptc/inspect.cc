// gptc inspect FILE.gptx [--manifest|--ir|--ptx|--plan|--params]: a summary of
// an artifact, or one of its sections verbatim (compiler/program/container.h reads it,
// so a bad file gets the reader's one-line error).
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "compiler/program/container.h"
#include "compiler/program/model_config.h"
#include "compiler/program/param.h"
#include "compiler/program/plan.h"
#include "compiler/support/text.h"
#include "tools/common/flags.h"
#include "tools/gptc/commands.h"

namespace gptc::tools {

namespace {

std::string Counts(const nlohmann::json& counts) {
  std::string s;
  for (const auto& [key, n] : counts.items()) {
    s += fmt::format("{}{} {}", s.empty() ? "" : ", ", n.get<int64_t>(), key);
  }
  return s.empty() ? "none" : s;
}

// What a user can run the artifact on.
std::string Completeness(const nlohmann::json& m) {
  if (m.value("complete", false)) return "complete";
  if (m.contains("flags") && !m["flags"].value("codegen", true)) {
    return "no GPU code (compiled with --no-codegen): runs on --device cpu only";
  }
  return "incomplete (some fusions have no kernel emitter): runs on --device cpu only";
}

StatusOr<std::string> Summary(const program::Artifact& a) {
  const nlohmann::json& m = a.manifest;
  std::string s;
  ASSIGN_OR_RETURN(program::ModelConfig model,
                   program::ReadModelConfig(m.value("model", nlohmann::json()), "manifest model"));
  s += fmt::format("artifact: format {}, gptc {}, target {}, {}\n", a.format_version,
                   m.value("gptc_version", "?"), m.value("target", "?"), Completeness(m));
  s += fmt::format("model: {} ({} layers, {} heads, width {}, vocab {} padded to {})\n",
                   model.name, model.layers, model.heads, model.width, model.vocab,
                   model.padded_vocab);
  std::string flags;
  for (const auto& [key, v] : m["flags"].items()) {
    flags += fmt::format("{}{}={}", flags.empty() ? "" : " ", key,
                         v.is_string() ? v.get<std::string>() : v.dump());
  }
  s += fmt::format("flags: {}\n", flags);
  ASSIGN_OR_RETURN(std::vector<program::ParamSpec> params,
                   program::ParamsSectionFromJson(a.params));
  int64_t values = 0;
  for (const program::ParamSpec& p : params) values += p.shape.num_elements();
  s += fmt::format("parameters: {} tensors, {} values\n", params.size(), WithThousands(values));
  int64_t launches = 0, fallbacks = 0;
  for (const auto& [kind, n] : m["kernels_by_kind"].items()) {
    (kind == "gemm fallback" ? fallbacks : launches) += n.get<int64_t>();
  }
  s += fmt::format("kernels: {} distinct, launched by {} kernel thunks of all entries ({}){}\n",
                   m["kernels"].size(), launches + fallbacks, Counts(m["kernels_by_kind"]),
                   fallbacks > 0 ? fmt::format("; the {} gemm fallbacks run only where cuBLASLt "
                                               "refuses an epilogue",
                                               fallbacks)
                                 : "");
  int64_t gemms = m["thunks"].value("gemm", 0);
  s += fmt::format("gemms: {} ({})\n", gemms, Counts(m["gemm_epilogues"]));
  s += fmt::format("thunks: {}\n", Counts(m["thunks"]));
  if (!m["unsupported"].empty()) s += fmt::format("unsupported: {}\n", Counts(m["unsupported"]));
  // The entries, their signatures and buckets: the plan, through its codec.
  ASSIGN_OR_RETURN(program::Plan plan, program::PlanFromJson(a.plan));
  for (const program::EntryPlan& e : plan.entries) {
    s += fmt::format("entry {}: {} inputs -> {} outputs, {} donations, arena {}\n", e.name,
                     e.inputs.size(), e.outputs.size(), e.donations.size(),
                     FormatBytes(e.arena_size));
  }
  // Data parallelism: the all-reduce buckets of each entry (docs/ARTIFACT.md).
  for (const program::EntryPlan& e : plan.entries) {
    if (e.buckets.empty()) continue;
    int64_t bytes = 0, largest = 0, members = 0;
    for (const program::AllReduceBucket& b : e.buckets) {
      bytes += b.bytes;
      largest = std::max(largest, b.bytes);
      members += static_cast<int64_t>(b.members.size());
    }
    s += fmt::format("entry {}: {} all-reduces in {} buckets, {} (largest {})\n", e.name, members,
                     e.buckets.size(), FormatBytes(bytes), FormatBytes(largest));
  }
  return s;
}

}  // namespace

int InspectCommand(int argc, char** argv) {
  Flags flags("gptc inspect", "FILE.gptx [--manifest|--ir|--ptx|--plan|--params]",
              "Summarizes an artifact (model, flags, parameters, entries, kernels, arena), or "
              "prints the sections asked for verbatim, in the order below.");
  flags.Bool("manifest", "the manifest (JSON)")
      .Bool("ir", "the optimized IR of every entry")
      .Bool("ptx", "the kernels' PTX")
      .Bool("plan", "the thunk plans (JSON)")
      .Bool("params", "the parameter specs and init rules (JSON)");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(2, s);
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  if (flags.positional().size() != 1) return Fail(2, Error("inspect takes one FILE.gptx"));
  StatusOr<program::Artifact> a = program::ReadArtifact(flags.positional()[0]);
  if (!a.ok()) return Fail(1, a.status());
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
