#include "tools/common/trusted_libraries.h"

#include <sys/stat.h>

#include <cstdlib>

#include "compiler/support/file.h"
#include "compiler/support/sha256.h"

namespace gptc::tools {

std::optional<std::string> GptcCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/gptc";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/gptc";
  }
  return std::nullopt;
}

std::optional<std::string> TrustRecordPath(std::string_view library) {
  std::optional<std::string> dir = GptcCacheDir();
  if (!dir) return std::nullopt;
  return fmt::format("{}/trusted-emu/{}", *dir, Sha256Hex(library));
}

Status RecordTrustedLibrary(std::string_view library) {
  std::optional<std::string> record = TrustRecordPath(library);
  if (!record) {
    return Error("no cache directory to record it in ($XDG_CACHE_HOME and $HOME are unset)");
  }
  const std::string dir = record->substr(0, record->rfind('/'));
  RETURN_IF_ERROR(CheckWritableDirectory(dir));
  return WriteFileAtomically(*record, "");
}

bool IsTrustedLibrary(std::string_view library) {
  std::optional<std::string> record = TrustRecordPath(library);
  struct stat st;
  return record && stat(record->c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace gptc::tools
