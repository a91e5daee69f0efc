#include "compiler/program/model_config.h"

#include <utility>

#include "compiler/program/json_field.h"

namespace gptc::program {
namespace {

// The integer fields, in the order written.
constexpr std::pair<const char*, int64_t ModelConfig::*> kInts[] = {
    {"layers", &ModelConfig::layers},       {"heads", &ModelConfig::heads},
    {"width", &ModelConfig::width},         {"positions", &ModelConfig::positions},
    {"vocab", &ModelConfig::vocab},         {"padded_vocab", &ModelConfig::padded_vocab}};

}  // namespace

nlohmann::ordered_json ModelConfigJson(const ModelConfig& model) {
  nlohmann::ordered_json j;
  j["name"] = model.name;
  for (const auto& [key, field] : kInts) j[key] = model.*field;
  return j;
}

StatusOr<ModelConfig> ReadModelConfig(const nlohmann::json& j, std::string_view where) {
  ModelConfig model;
  ASSIGN_OR_RETURN(model.name, JsonField<std::string>(j, "name", where));
  for (const auto& [key, field] : kInts) {
    ASSIGN_OR_RETURN(model.*field, JsonField<int64_t>(j, key, where));
  }
  return model;
}

}  // namespace gptc::program
