#include "tools/common/compile_record.h"

#include <nlohmann/json.hpp>

#include "compiler/program/json_field.h"

namespace gptc::tools {

std::string_view CacheUseName(CacheUse use) {
  switch (use) {
    case CacheUse::kReused:
      return "reused";
    case CacheUse::kStored:
      return "stored";
    case CacheUse::kNone:
      return "none";
  }
  return "none";
}

std::optional<CacheUse> ParseCacheUse(std::string_view name) {
  for (CacheUse use : {CacheUse::kReused, CacheUse::kStored, CacheUse::kNone}) {
    if (CacheUseName(use) == name) return use;
  }
  return std::nullopt;
}

std::string FormatCompileRecord(const CompileRecord& r) {
  const nlohmann::json j = {{"format", kCompileRecordFormat},
                            {"artifact", r.artifact},
                            {"cache", CacheUseName(r.cache)},
                            {"temporary", r.temporary},
                            {"output", r.output},
                            {"target", r.target},
                            {"flags", program::ToJson(r.flags)},
                            {"summary", r.summary},
                            {"note", r.note},
                            {"seconds", r.seconds},
                            {"warnings", r.warnings}};
  return j.dump();
}

StatusOr<CompileRecord> ParseCompileRecord(std::string_view text) {
  constexpr std::string_view kWhere = "gptc compile record";
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error("{}: not JSON", kWhere);
  ASSIGN_OR_RETURN(std::string format, program::JsonField<std::string>(j, "format", kWhere));
  if (format != kCompileRecordFormat) {
    return Error("{}: format '{}', expected '{}'", kWhere, format, kCompileRecordFormat);
  }
  CompileRecord r;
  ASSIGN_OR_RETURN(r.artifact, program::JsonField<std::string>(j, "artifact", kWhere));
  ASSIGN_OR_RETURN(std::string cache, program::JsonField<std::string>(j, "cache", kWhere));
  std::optional<CacheUse> use = ParseCacheUse(cache);
  if (!use) return Error("{}: cache '{}' is not reused, stored or none", kWhere, cache);
  r.cache = *use;
  ASSIGN_OR_RETURN(r.temporary, program::JsonField<bool>(j, "temporary", kWhere));
  ASSIGN_OR_RETURN(r.output, program::JsonField<std::string>(j, "output", kWhere));
  ASSIGN_OR_RETURN(r.target, program::JsonField<std::string>(j, "target", kWhere));
  ASSIGN_OR_RETURN(r.flags,
                   program::ObjectField(j, "flags", kWhere, program::CompileFlagsFromJson));
  ASSIGN_OR_RETURN(r.summary, program::JsonField<std::string>(j, "summary", kWhere));
  ASSIGN_OR_RETURN(r.note, program::JsonField<std::string>(j, "note", kWhere));
  ASSIGN_OR_RETURN(r.seconds, program::JsonField<double>(j, "seconds", kWhere));
  const auto warnings = j.find("warnings");
  if (warnings == j.end() || !warnings->is_array()) {
    return Error("{}: 'warnings' is not a list", kWhere);
  }
  for (const nlohmann::json& w : *warnings) {
    if (!w.is_string()) return Error("{}: a warning is not a string ({})", kWhere, w.dump());
    r.warnings.push_back(w.get<std::string>());
  }
  return r;
}

}  // namespace gptc::tools
