#include "compiler/program/model_config.h"

#include "compiler/program/json_field.h"

namespace gptc::program {
namespace {

constexpr int64_t kMaxModelInt = int64_t{1} << 24;

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

Status CheckModelConfig(const ModelConfig& model, std::string_view where) {
  for (const auto& [key, field] : kInts) {
    if (model.*field < 1) return Error("{}: '{}' is {}, not positive", where, key, model.*field);
    // Far beyond any GPT-2, and small enough that sizes made from them fit.
    if (model.*field > kMaxModelInt) {
      return Error("{}: '{}' is {}, more than {}", where, key, model.*field, kMaxModelInt);
    }
  }
  if (model.width % model.heads != 0) {
    return Error("{}: 'heads' {} does not divide 'width' {}", where, model.heads, model.width);
  }
  if (model.vocab > model.padded_vocab) {
    return Error("{}: 'vocab' {} exceeds 'padded_vocab' {}", where, model.vocab,
                 model.padded_vocab);
  }
  return Status::Ok();
}

}  // namespace gptc::program
