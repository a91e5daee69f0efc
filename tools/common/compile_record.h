// Note [compile record]: what `gptc compile --json` did, as one typed record
// that gptc writes and gptrun --model (tools/gptrun/jit.cc) reads, through
// the one codec below: the artifact to load, how the compile cache served it,
// the flags that shaped it (the manifest's, program::CompileFlags: what
// --batch auto and --remat auto chose included), the summary gptc would have
// printed, and its warnings. gptrun never reads gptc's human output.
//
//   {"format": "gptc-compile-1", "artifact": PATH, "cache": "reused" |
//    "stored" | "none", "temporary": bool, "output": PATH or "",
//    "target": "sm_90a", "flags": {...}, "summary": "compiled ...",
//    "note": "", "seconds": 1.5, "warnings": ["not cached: ..."]}
#ifndef GPTC_TOOLS_COMMON_COMPILE_RECORD_H_
#define GPTC_TOOLS_COMMON_COMPILE_RECORD_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/program/manifest.h"
#include "compiler/support/status.h"

namespace gptc::tools {

inline constexpr std::string_view kCompileRecordFormat = "gptc-compile-1";

// How the compile cache served a compile (Note [compile cache] in
// tools/gptc/compile_cache.h).
enum class CacheUse {
  kReused,  // the artifact was the cache's
  kStored,  // compiled, and stored in the cache
  kNone,    // compiled, not in the cache (no usable cache: a warning says why)
};
std::string_view CacheUseName(CacheUse use);  // "reused", "stored", "none"
std::optional<CacheUse> ParseCacheUse(std::string_view name);

struct CompileRecord {
  std::string artifact;  // the file to load: the cache's, else -o or a temporary file
  CacheUse cache = CacheUse::kNone;
  // `artifact` is a temporary file (Note [temporary artifact] in
  // tools/gptc/compile.cc) that the reader removes when done.
  bool temporary = false;
  std::string output;  // -o, or empty
  std::string target;  // the manifest's target ("sm_90a")
  program::CompileFlags flags;
  std::string summary;  // the summary line, without its seconds and path
  std::string note;     // the line after it, or empty
  double seconds = 0;
  std::vector<std::string> warnings;  // each without its "gptc: warning: "
};

// One line of JSON; ParseCompileRecord reads it back. Errors name the
// field ("gptc compile record has no 'artifact'").
std::string FormatCompileRecord(const CompileRecord& record);
StatusOr<CompileRecord> ParseCompileRecord(std::string_view json);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_COMMON_COMPILE_RECORD_H_
