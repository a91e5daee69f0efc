#include "compiler/program/manifest.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "compiler/program/json_field.h"

namespace gptc::program {

namespace {

using nlohmann::json;

// The AdamW options, written flat among the flags.
struct AdamWField {
  const char* key;
  double AdamWOptions::*field;
};
constexpr AdamWField kAdamWFields[] = {{"beta1", &AdamWOptions::beta1},
                                       {"beta2", &AdamWOptions::beta2},
                                       {"eps", &AdamWOptions::eps},
                                       {"weight_decay", &AdamWOptions::weight_decay},
                                       {"clip_norm", &AdamWOptions::clip_norm}};

// The plan's counts, written at the manifest's top level.
struct CountsField {
  const char* key;
  std::map<std::string, int64_t> ArtifactCounts::*field;
};
constexpr CountsField kCountsFields[] = {{"thunks", &ArtifactCounts::thunks},
                                         {"kernels_by_kind", &ArtifactCounts::kernels_by_kind},
                                         {"gemm_epilogues", &ArtifactCounts::gemm_epilogues},
                                         {"unsupported", &ArtifactCounts::unsupported}};

// j[key], an object of integers.
StatusOr<std::map<std::string, int64_t>> CountsFromJson(const json& j, std::string_view key,
                                                        std::string_view where) {
  auto it = j.find(key);
  if (it == j.end()) return Error("{} has no '{}'", where, key);
  if (!it->is_object()) return Error("{}.{} has the wrong type ({})", where, key, it->dump());
  std::map<std::string, int64_t> out;
  for (const auto& [name, n] : it->items()) {
    if (!JsonHolds<int64_t>(n)) {
      return Error("{}.{}.{} has the wrong type ({})", where, key, name, n.dump());
    }
    out[name] = n.get<int64_t>();
  }
  return out;
}

// j["remat_layers"], an array of policy names; empty when j has none.
StatusOr<std::vector<std::string>> RematLayersFromJson(const json& j, std::string_view where) {
  std::vector<std::string> layers;
  auto it = j.find("remat_layers");
  if (it == j.end()) return layers;
  if (!it->is_array()) return Error("{}.remat_layers has the wrong type ({})", where, it->dump());
  for (const json& policy : *it) {
    if (!policy.is_string()) {
      return Error("{}.remat_layers[{}] has the wrong type ({})", where, layers.size(),
                   policy.dump());
    }
    layers.push_back(policy.get<std::string>());
  }
  return layers;
}

}  // namespace

json ToJson(const CompileFlags& f) {
  json j{{"batch", f.batch},           {"seq", f.seq},
         {"grad_accum", f.grad_accum}, {"world_size", f.world_size},
         {"precision", f.precision},   {"remat", f.remat},
         {"codegen", f.codegen},       {"attention_mma", f.attention_mma}};
  for (const auto& [key, field] : kAdamWFields) j[key] = f.adamw.*field;
  if (!f.remat_layers.empty()) j["remat_layers"] = f.remat_layers;
  if (f.zero_stage != 0) j["zero_stage"] = f.zero_stage;
  return j;
}

StatusOr<CompileFlags> CompileFlagsFromJson(const json& j, std::string_view where) {
  CompileFlags f;
  for (auto [key, field] :
       {std::pair{"batch", &f.batch}, std::pair{"seq", &f.seq},
        std::pair{"grad_accum", &f.grad_accum}, std::pair{"world_size", &f.world_size}}) {
    ASSIGN_OR_RETURN(*field, JsonField<int64_t>(j, key, where));
  }
  ASSIGN_OR_RETURN(f.zero_stage, JsonFieldOr<int64_t>(j, "zero_stage", where, 0));
  ASSIGN_OR_RETURN(f.precision, JsonField<std::string>(j, "precision", where));
  ASSIGN_OR_RETURN(f.remat, JsonField<std::string>(j, "remat", where));
  ASSIGN_OR_RETURN(f.codegen, JsonField<bool>(j, "codegen", where));
  ASSIGN_OR_RETURN(f.remat_layers, RematLayersFromJson(j, where));
  ASSIGN_OR_RETURN(f.attention_mma,
                   JsonFieldOr<std::string>(j, "attention_mma", where, "mma.sync"));
  for (const auto& [key, field] : kAdamWFields) {
    ASSIGN_OR_RETURN(f.adamw.*field, JsonField<double>(j, key, where));
  }
  return f;
}

json ToJson(const EmuIndex& e) {
  json kernels = json::array();
  for (const HostKernelRecord& k : e.kernels) kernels.push_back(ToJson(k));
  return json{{"abi", e.abi}, {"kernels", std::move(kernels)}};
}

StatusOr<EmuIndex> EmuIndexFromJson(const json& j, std::string_view where) {
  EmuIndex e;
  ASSIGN_OR_RETURN(e.abi, JsonField<int64_t>(j, "abi", where));
  ASSIGN_OR_RETURN(e.kernels,
                   ArrayField<HostKernelRecord>(j, "kernels", where, HostKernelRecordFromJson));
  return e;
}

json ToJson(const Manifest& m) {
  json kernels = json::array();
  for (const KernelRecord& k : m.kernels) kernels.push_back(ToJson(k));
  json j{{"format_version", m.format_version},
         {"gptc_version", m.gptc_version},
         {"target", m.target},
         {"complete", m.complete},
         {"model", ModelConfigJson(m.model)},
         {"flags", ToJson(m.flags)},
         {"kernels", std::move(kernels)}};
  for (const auto& [key, field] : kCountsFields) j[key] = m.counts.*field;
  if (m.emu) j["emu"] = ToJson(*m.emu);
  return j;
}

StatusOr<Manifest> ManifestFromJson(const json& j) {
  constexpr std::string_view where = "manifest";
  if (!j.is_object()) return Error("{} is not an object", where);
  Manifest m;
  ASSIGN_OR_RETURN(m.format_version, JsonField<int64_t>(j, "format_version", where));
  ASSIGN_OR_RETURN(m.gptc_version, JsonField<std::string>(j, "gptc_version", where));
  ASSIGN_OR_RETURN(m.target, JsonField<std::string>(j, "target", where));
  ASSIGN_OR_RETURN(m.complete, JsonField<bool>(j, "complete", where));
  ASSIGN_OR_RETURN(m.model, ObjectField(j, "model", where, ReadModelConfig));
  ASSIGN_OR_RETURN(m.flags, ObjectField(j, "flags", where, CompileFlagsFromJson));
  ASSIGN_OR_RETURN(m.kernels, ArrayField<KernelRecord>(j, "kernels", where, KernelRecordFromJson));
  for (const auto& [key, field] : kCountsFields) {
    ASSIGN_OR_RETURN(m.counts.*field, CountsFromJson(j, key, where));
  }
  if (j.contains("emu")) {
    ASSIGN_OR_RETURN(EmuIndex emu, ObjectField(j, "emu", "manifest", EmuIndexFromJson));
    m.emu = std::move(emu);
  }
  return m;
}

}  // namespace gptc::program
