#include "compiler/program/model_config.h"


#include "compiler/program/json_field.h"

namespace gptc::program {
namespace {

constexpr ModelConfigInt kInts[] = {
    {"layers", &ModelConfig::layers},       {"heads", &ModelConfig::heads},
    {"width", &ModelConfig::width},         {"positions", &ModelConfig::positions},
    {"vocab", &ModelConfig::vocab},         {"padded_vocab", &ModelConfig::padded_vocab}};

}  // namespace

std::span<const ModelConfigInt> ModelConfigInts() { return kInts; }

nlohmann::ordered_json ModelConfigJson(const ModelConfig& model) {
  nlohmann::ordered_json j;
  j["name"] = model.name;
  for (const auto& [key, field] : kInts) j[key] = model.*field;
  return j;
}

StatusOr<ModelConfig> ReadModelConfig(const nlohmann::json& j, std::string_view where) {
  if (!j.is_object()) return Error("{}: not a JSON object", where);
  ModelConfig model;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string()) return Error("{}: no string 'name'", where);
  model.name = name->get<std::string>();
  for (const auto& [key, field] : kInts) {
    auto it = j.find(key);
    if (it == j.end()) return Error("{}: no '{}'", where, key);
    if (!JsonHolds<int64_t>(*it)) {
      return Error("{}: '{}' is {}, not an integer", where, key, it->dump());
    }
    model.*field = it->get<int64_t>();
  }
  return model;
}

}  // namespace gptc::program
