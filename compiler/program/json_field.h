// Typed reads of the artifact's JSON (manifest, plan, params) for every
// reader of it: json[key] as T, its type checked first (no exceptions), and
// errors that name where the field is ("plan entry train_step.thunks[3] has
// no 'kernel'").
#ifndef GPTC_COMPILER_PROGRAM_JSON_FIELD_H_
#define GPTC_COMPILER_PROGRAM_JSON_FIELD_H_

#include <fmt/format.h>

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

// j[key], an object read by `from_json(object, where)`; `where.key` names it.
template <typename F>
auto ObjectField(const nlohmann::json& j, std::string_view key, std::string_view where, F from_json)
    -> decltype(from_json(j, where)) {
  if (!j.is_object()) return Error("{} is not an object", where);
  auto it = j.find(key);
  if (it == j.end()) return Error("{} has no '{}'", where, key);
  return from_json(*it, fmt::format("{}.{}", where, key));
}

// How errors name element i of array `key`: "manifest kernels[2]", but
// "plan entry e thunk 3", as the runtime's messages do.
inline std::string ElementWhere(std::string_view where, std::string_view key, size_t i) {
  if (key == "thunks") return fmt::format("{} thunk {}", where, i);
  return fmt::format("{} {}[{}]", where, key, i);
}

// j[key], an array of objects read by `from_json(element, where)`;
// ElementWhere names one.
template <typename T, typename F>
StatusOr<std::vector<T>> ArrayField(const nlohmann::json& j, std::string_view key,
                                    std::string_view where, F from_json) {
  if (!j.is_object()) return Error("{} is not an object", where);
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return Error("{} has no '{}' array", where, key);
  std::vector<T> out;
  for (size_t i = 0; i < it->size(); ++i) {
    ASSIGN_OR_RETURN(T v, from_json((*it)[i], ElementWhere(where, key, i)));
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace gptc::program

#endif  // GPTC_COMPILER_PROGRAM_JSON_FIELD_H_
