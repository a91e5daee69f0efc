#include "compiler/program/param.h"

#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "compiler/program/json_field.h"

namespace gptc::program {

using nlohmann::json;

json ToJson(const InitRule& rule) {
  switch (rule.kind) {
    case InitRule::Kind::kNormal:
      return json{{"kind", "normal"}, {"std", rule.std}};
    case InitRule::Kind::kZeros:
      return json{{"kind", "zeros"}};
    case InitRule::Kind::kOnes:
      return json{{"kind", "ones"}};
  }
  return json{};
}

StatusOr<InitRule> InitRuleFromJson(const json& j, std::string_view where) {
  ASSIGN_OR_RETURN(std::string kind, JsonField<std::string>(j, "kind", where));
  if (kind == "zeros") return InitRule::Zeros();
  if (kind == "ones") return InitRule::Ones();
  if (kind == "normal") {
    ASSIGN_OR_RETURN(double std, JsonField<double>(j, "std", where));
    return InitRule::Normal(std);
  }
  return Error("{}: unknown init kind '{}'", where, kind);
}

json ParamsSectionJson(const std::vector<ParamSpec>& params) {
  json list = json::array();
  for (const ParamSpec& p : params) {
    list.push_back(json{{"name", p.name},
                        {"shape", p.shape.dims()},
                        {"dtype", ir::DTypeName(p.shape.dtype())},
                        {"init", ToJson(p.init)}});
  }
  return json{{"params", std::move(list)}};
}

StatusOr<std::vector<ParamSpec>> ParamsSectionFromJson(const json& section) {
  if (!section.contains("params") || !section["params"].is_array()) {
    return Error("section 'params' has no 'params' array");
  }
  std::vector<ParamSpec> out;
  for (const json& p : section["params"]) {
    const std::string where = fmt::format("params[{}]", out.size());
    ASSIGN_OR_RETURN(std::string name, JsonField<std::string>(p, "name", where));
    ASSIGN_OR_RETURN(std::vector<int64_t> dims, JsonField<std::vector<int64_t>>(p, "shape", where));
    // As the IR parser's shapes: no negative dim, at most 2^48 elements, so
    // that sizes computed from them cannot overflow.
    int64_t elements = 1;
    for (int64_t d : dims) {
      if (d < 0 || (d > 0 && elements > (int64_t{1} << 48) / d)) {
        return Error("param {}: shape [{}] is negative or too large", name, fmt::join(dims, ","));
      }
      elements *= d;
    }
    ASSIGN_OR_RETURN(std::string dtype, JsonField<std::string>(p, "dtype", where));
    // Parameters are f32 masters; the step converts them (mixed precision).
    if (dtype != "f32") return Error("param {}: dtype {}, expected f32", name, dtype);
    if (!p.contains("init")) return Error("param {} has no init rule", name);
    ASSIGN_OR_RETURN(InitRule init, InitRuleFromJson(p["init"], "param " + name + " init"));
    out.push_back({name, ir::Shape(ir::DType::kF32, dims), init});
  }
  return out;
}

}  // namespace gptc::program
