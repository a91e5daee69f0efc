#include "compiler/support/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>

namespace gptc {

namespace {

// A file that says it is empty (procfs) is read to its end, up to this.
constexpr size_t kUnsizedFileLimit = size_t{64} << 20;

}  // namespace

const char* FileKindName(unsigned mode) {
  return S_ISREG(mode)    ? "a regular file"
         : S_ISDIR(mode)  ? "a directory"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISSOCK(mode) ? "a socket"
                          : "not a regular file";
}

InputFile::~InputFile() {
  if (fd_ >= 0) close(fd_);
}

StatusOr<InputFile> OpenInputFile(std::string_view path) {
  const std::string p(path);
  // O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one.
  const int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    return Status::Error(fmt::format("{}: {}", path, std::strerror(err)),
                         err == ENOENT ? StatusCode::kNotFound : StatusCode::kUnknown);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return Error("{}: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return Error("{}: is {}, not a regular file", path, FileKindName(st.st_mode));
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return InputFile(fd, static_cast<uint64_t>(st.st_size));
}

StatusOr<std::string> ReadFile(std::string_view path) {
  if (path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  ASSIGN_OR_RETURN(const InputFile file, OpenInputFile(path));
  const size_t size = static_cast<size_t>(file.size());
  const size_t limit = size > 0 ? size : kUnsizedFileLimit;
  std::string contents;
  contents.reserve(size);
  char buf[1 << 16];
  while (true) {
    // One byte past the limit tells a file that grew from one that ended.
    const size_t want = std::min(sizeof(buf), limit + 1 - contents.size());
    ssize_t n = read(file.fd(), buf, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error("{}: {}", path, std::strerror(errno));
    }
    if (n == 0) break;
    contents.append(buf, n);
    if (contents.size() > limit) {
      return size > 0 ? Error("{}: grew while being read (it had {} bytes)", path, size)
                      : Error("{}: reports no size and holds more than {} bytes", path, limit);
    }
  }
  return contents;
}


Status CheckOutputTarget(std::string_view path) {
  // WriteFileAtomically's rename would replace whatever is there: a device node, a FIFO,
  // a directory entry of another kind. Only regular files are replaced.
  if (path == "-") {
    return Error("-: writing to standard output is not supported here: name a file");
  }
  struct stat st;
  const std::string target(path);
  if (stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return Error("{}: is {}; the output must be a regular file (it would be replaced)", path,
                 FileKindName(st.st_mode));
  }
  return Status::Ok();
}

Status CheckWritableDirectory(std::string_view dir) {
  const std::filesystem::path path(dir);
  // Level by level, so that the error names the one at fault
  // (std::filesystem::create_directories says only "Not a directory").
  std::filesystem::path level;
  for (const std::filesystem::path& part : path) {
    level /= part;
    const std::string at = level == path ? "it" : level.string();
    struct stat st;
    if (stat(level.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) continue;
      const char* kind = FileKindName(st.st_mode);
      return level == path ? Error("{}: is {}, not a directory", dir, kind)
                           : Error("{}: cannot create it: {} is {}", dir, at, kind);
    }
    if (errno != ENOENT) return Error("{}: cannot create {}: {}", dir, at, std::strerror(errno));
    if (mkdir(level.c_str(), 0777) != 0 && errno != EEXIST) {
      return Error("{}: cannot create {}: {}", dir, at, std::strerror(errno));
    }
  }
  const std::string probe = (path / fmt::format(".write_probe.{}", getpid())).string();
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Error("{}: cannot write there: {}", dir, std::strerror(errno));
  int err = 0;
  if (const ssize_t n = write(fd, "x", 1); n != 1) err = n < 0 ? errno : EIO;
  if (close(fd) != 0 && err == 0) err = errno;
  unlink(probe.c_str());
  if (err != 0) return Error("{}: cannot write there: {}", dir, std::strerror(err));
  return Status::Ok();
}

Status WriteFileAtomically(std::string_view path, std::string_view contents) {
  RETURN_IF_ERROR(CheckOutputTarget(path));
  // A hidden name beside it, cut short so that a name near NAME_MAX still has
  // a temporary one.
  const size_t slash = path.rfind('/');
  const std::string_view dir = slash == std::string_view::npos ? "" : path.substr(0, slash + 1);
  const std::string_view name = path.substr(dir.size());
  const std::string tmp = fmt::format("{}.{}.tmp.{}", dir,
                                      name.substr(0, std::min<size_t>(name.size(), 200)), getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Error("{}: {}", path, std::strerror(errno));
  size_t written = 0;
  while (written < contents.size()) {
    ssize_t n = write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return Error("{}: {}", path, std::strerror(err));
    }
    written += n;
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return Error("{}: {}", path, std::strerror(err));
  }
  if (std::rename(tmp.c_str(), std::string(path).c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return Error("{}: {}", path, std::strerror(err));
  }
  return Status::Ok();
}

}  // namespace gptc
