// gptc inspect FILE.gptx [--manifest|--ir|--ptx|--plan|--params]: a summary of
// an artifact, or one of its sections verbatim (runtime/artifact.h reads it,
// so a bad file gets the reader's one-line error).
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "runtime/artifact.h"
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

std::string Summary(const rt::Artifact& a) {
  const nlohmann::json& m = a.manifest;
  std::string s;
  const nlohmann::json& model = m["model"];
  s += fmt::format("artifact: format {}, gptc {}, target {}, {}\n", a.format_version,
                   m.value("gptc_version", "?"), m.value("target", "?"),
                   m.value("complete", false) ? "complete" : "INCOMPLETE (gptrun refuses it)");
  s += fmt::format("model: {} ({} layers, {} heads, width {}, vocab {} padded to {})\n",
                   model.value("name", "?"), model.value("layers", 0), model.value("heads", 0),
                   model.value("width", 0), model.value("vocab", 0),
                   model.value("padded_vocab", 0));
  std::string flags;
  for (const auto& [key, v] : m["flags"].items()) {
    flags += fmt::format("{}{}={}", flags.empty() ? "" : " ", key,
                         v.is_string() ? v.get<std::string>() : v.dump());
  }
  s += fmt::format("flags: {}\n", flags);
  int64_t values = 0;
  for (const auto& p : a.params["params"]) {
    int64_t n = 1;
    for (const auto& d : p["shape"]) n *= d.get<int64_t>();
    values += n;
  }
  s += fmt::format("parameters: {} tensors, {} values\n", a.params["params"].size(),
                   WithThousands(values));
  s += fmt::format("kernels: {} ({})\n", m["kernels"].size(), Counts(m["kernels_by_kind"]));
  int64_t gemms = m["thunks"].value("gemm", 0);
  s += fmt::format("gemms: {} ({})\n", gemms, Counts(m["gemm_epilogues"]));
  s += fmt::format("thunks: {}\n", Counts(m["thunks"]));
  if (!m["unsupported"].empty()) s += fmt::format("unsupported: {}\n", Counts(m["unsupported"]));
  for (const auto& e : m["entries"]) {
    s += fmt::format("entry {}: {} inputs -> {} outputs, {} donations, arena {} bytes\n",
                     e.value("name", "?"), e["inputs"].size(), e["outputs"].size(),
                     e["donations"].size(), WithThousands(e.value("arena_size", int64_t{0})));
  }
  // Data parallelism: the all-reduce buckets of each entry's plan (docs/ARTIFACT.md).
  if (a.plan.contains("entries")) {
    for (const auto& e : a.plan["entries"]) {
      if (!e.contains("buckets") || e["buckets"].empty()) continue;
      int64_t bytes = 0, largest = 0, members = 0;
      for (const auto& b : e["buckets"]) {
        bytes += b["bytes"].get<int64_t>();
        largest = std::max(largest, b["bytes"].get<int64_t>());
        members += static_cast<int64_t>(b["members"].size());
      }
      s += fmt::format("entry {}: {} all-reduces in {} buckets, {} bytes (largest {})\n",
                       e.value("name", "?"), members, e["buckets"].size(), WithThousands(bytes),
                       WithThousands(largest));
    }
  }
  return s;
}

}  // namespace

int InspectCommand(int argc, char** argv) {
  Flags flags("gptc inspect", "FILE.gptx [--manifest|--ir|--ptx|--plan|--params]",
              "Summarizes an artifact (model, flags, parameters, entries, kernels, arena), or "
              "prints one of its sections verbatim.");
  flags.Bool("manifest", "the manifest (JSON)")
      .Bool("ir", "the optimized IR of every entry")
      .Bool("ptx", "the kernels' PTX")
      .Bool("plan", "the thunk plans (JSON)")
      .Bool("params", "the parameter specs and init rules (JSON)");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(2, s);
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  if (flags.positional().size() != 1) return Fail(2, Error("inspect takes one FILE.gptx"));
  StatusOr<rt::Artifact> a = rt::ReadArtifact(flags.positional()[0]);
  if (!a.ok()) return Fail(1, a.status());
  for (const char* section : {"manifest", "ir", "ptx", "plan", "params"}) {
    if (!flags.Has(section)) continue;
    const std::string* bytes = a->Find(section);
    std::fwrite(bytes->data(), 1, bytes->size(), stdout);
    return 0;
  }
  std::fputs(Summary(*a).c_str(), stdout);
  return 0;
}

}  // namespace gptc::tools
