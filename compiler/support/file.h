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
// Makes `dir` a directory files can be written to: creates it and its
// parents, then writes and removes a probe file in it. Tools call it before
// long work whose outputs go there (gptrun --ckpt-dir), so that a path under
// a regular file, a regular file or a read-only directory fails at once.
// Errors name `dir`: "ckpt: cannot write there: Permission denied".
Status CheckWritableDirectory(std::string_view dir);

}  // namespace gptc

#endif  // GPTC_COMPILER_SUPPORT_FILE_H_
