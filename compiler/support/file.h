// Whole-file reads and atomic writes (temp file, fsync, rename), so a tool
// that fails midway never leaves a half-written output.
#ifndef GPTC_COMPILER_SUPPORT_FILE_H_
#define GPTC_COMPILER_SUPPORT_FILE_H_

#include <string>
#include <string_view>

#include "compiler/support/status.h"

namespace gptc {

// Reads `path` ("-" reads standard input).
StatusOr<std::string> ReadFile(std::string_view path);
Status WriteFileAtomically(std::string_view path, std::string_view contents);
// Whether `path` may be written by WriteFileAtomically: absent or a regular
// file ("-", devices, FIFOs, directories are refused, naming `path`). Tools
// call it before long work, so a bad output fails at once.
Status CheckOutputTarget(std::string_view path);

}  // namespace gptc

#endif  // GPTC_COMPILER_SUPPORT_FILE_H_
