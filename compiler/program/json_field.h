// Typed reads of the artifact's JSON (manifest, plan, params) for every
// reader of it: json[key] as T, its type checked first (no exceptions), and
// errors that name where the field is ("plan entry train_step.thunks[3] has
// no 'kernel'").
#ifndef GPTC_COMPILER_PROGRAM_JSON_FIELD_H_
#define GPTC_COMPILER_PROGRAM_JSON_FIELD_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "compiler/support/status.h"

namespace gptc::program {

// Whether `v` holds a T: bool, int64_t, uint32_t, double, std::string, a
// vector of int64_t, or a vector of int64_t pairs.
template <typename T>
bool JsonHolds(const nlohmann::json& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v.is_boolean();
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return v.is_number_integer();
  } else if constexpr (std::is_same_v<T, uint32_t>) {
    return v.is_number_unsigned() && v.get<uint64_t>() <= UINT32_MAX;
  } else if constexpr (std::is_same_v<T, double>) {
    return v.is_number();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v.is_string();
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    if (!v.is_array()) return false;
    for (const nlohmann::json& e : v) {
      if (!e.is_number_integer()) return false;
    }
    return true;
  } else {
    static_assert(std::is_same_v<T, std::vector<std::pair<int64_t, int64_t>>>);
    if (!v.is_array()) return false;
    for (const nlohmann::json& e : v) {
      if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer() ||
          !e[1].is_number_integer()) {
        return false;
      }
    }
    return true;
  }
}

// j[key] as T; `where` names j in errors.
template <typename T>
StatusOr<T> JsonField(const nlohmann::json& j, std::string_view key, std::string_view where) {
  if (!j.is_object()) return Error("{} is not an object", where);
  auto it = j.find(key);
  if (it == j.end()) return Error("{} has no '{}'", where, key);
  if (!JsonHolds<T>(*it)) return Error("{}.{} has the wrong type ({})", where, key, it->dump());
  return it->template get<T>();
}

// j[key] as T, or `fallback` when j has no `key`.
template <typename T>
StatusOr<T> JsonFieldOr(const nlohmann::json& j, std::string_view key, std::string_view where,
                        T fallback) {
  if (j.is_object() && !j.contains(key)) return fallback;
  return JsonField<T>(j, key, where);
}

}  // namespace gptc::program

#endif  // GPTC_COMPILER_PROGRAM_JSON_FIELD_H_
