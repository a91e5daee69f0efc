#include "compiler/program/plan_role.h"

#include <array>
#include <string>
#include <utility>

#include "compiler/program/json_field.h"

namespace gptc::program {

namespace {

using nlohmann::json;

constexpr std::array<std::pair<ThunkGroup, std::string_view>, 6> kGroupNames = {{
    {ThunkGroup::kOther, "other"},
    {ThunkGroup::kEmbedding, "embedding"},
    {ThunkGroup::kBlock, "block"},
    {ThunkGroup::kHead, "head"},
    {ThunkGroup::kOptimizer, "optimizer"},
    {ThunkGroup::kParamCast, "param_cast"},
}};

constexpr std::array<std::pair<BufferCategory, std::string_view>, kBufferCategories>
    kCategoryNames = {{
        {BufferCategory::kParameter, "parameter"},
        {BufferCategory::kOptimizerState, "optimizer_state"},
        {BufferCategory::kGradient, "gradient"},
        {BufferCategory::kActivation, "activation"},
        {BufferCategory::kData, "data"},
    }};

template <typename E, size_t N>
std::string_view NameIn(E value, const std::array<std::pair<E, std::string_view>, N>& table) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "?";
}

// j[key] as one of `table`'s names.
template <typename E, size_t N>
StatusOr<E> NamedField(const json& j, std::string_view key, std::string_view where,
                       const std::array<std::pair<E, std::string_view>, N>& table) {
  ASSIGN_OR_RETURN(std::string name, JsonField<std::string>(j, key, where));
  for (const auto& [v, n] : table) {
    if (n == name) return v;
  }
  return Error("{}.{}: '{}' is not a value this reader knows", where, key, name);
}

}  // namespace

std::string_view ThunkGroupName(ThunkGroup g) { return NameIn(g, kGroupNames); }
std::string_view BufferCategoryName(BufferCategory c) { return NameIn(c, kCategoryNames); }

json ToJson(const ThunkRole& r) {
  return json{
      {"phase", ir::PhaseName(r.phase)}, {"layer", r.layer}, {"group", ThunkGroupName(r.group)}};
}

StatusOr<ThunkRole> ThunkRoleFromJson(const json& j, std::string_view where) {
  ThunkRole r;
  ASSIGN_OR_RETURN(std::string phase, JsonField<std::string>(j, "phase", where));
  if (phase != ir::PhaseName(ir::Phase::kNone)) {
    std::optional<ir::Phase> p = ir::ParsePhase(phase);
    if (!p) return Error("{}.phase: '{}' is not a value this reader knows", where, phase);
    r.phase = *p;
  }
  ASSIGN_OR_RETURN(int64_t layer, JsonField<int64_t>(j, "layer", where));
  if (layer < -1 || layer > ir::kMaxLayer) {
    return Error("{}.layer: {} is not a block index or -1", where, layer);
  }
  r.layer = static_cast<int32_t>(layer);
  ASSIGN_OR_RETURN(r.group, NamedField(j, "group", where, kGroupNames));
  return r;
}

StatusOr<std::optional<BufferCategory>> OptionalBufferCategory(const json& j, std::string_view key,
                                                               std::string_view where) {
  if (!j.contains(key)) return std::optional<BufferCategory>();
  ASSIGN_OR_RETURN(BufferCategory c, NamedField(j, key, where, kCategoryNames));
  return std::optional<BufferCategory>(c);
}

}  // namespace gptc::program
