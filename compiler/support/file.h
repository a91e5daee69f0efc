// Whole-file reads and atomic writes (temp file, fsync, rename), so a tool
// that fails midway never leaves a half-written output.
#ifndef GPTC_COMPILER_SUPPORT_FILE_H_
#define GPTC_COMPILER_SUPPORT_FILE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "compiler/support/status.h"

namespace gptc {

// Note [input files]: inputs are regular files. A device (/dev/zero), a
// FIFO, a socket or a directory given where a file is read would read
// forever, block forever or fail later with a worse message, so every reader
// refuses them in one line naming the path and what it is. A regular file's
// size is known before anything is allocated for it.
//
// Reads `path` ("-" reads standard input): a regular file only, of its size
// when opened (a file that grows meanwhile is refused; one that reports size
// 0, as /proc files do, is read to its end up to 64 MiB).
StatusOr<std::string> ReadFile(std::string_view path);
// A regular file open for reading, closed when this goes; size() is its size
// when it was opened (the one fstat of Note [input files]).
class InputFile {
 public:
  InputFile(int fd, uint64_t size) : fd_(fd), size_(size) {}
  InputFile(InputFile&& other) noexcept : fd_(other.fd_), size_(other.size_) { other.fd_ = -1; }
  InputFile& operator=(InputFile&&) = delete;
  ~InputFile();
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};
// Opens `path` for reading (O_RDONLY | O_CLOEXEC) if it is a regular file,
// without blocking on a FIFO; errors name `path` ("x: is a FIFO, not a
// regular file").
StatusOr<InputFile> OpenInputFile(std::string_view path);
// "a directory", "a character device", "a FIFO", ... for `mode` (stat's
// st_mode), in messages.
const char* FileKindName(unsigned mode);
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
