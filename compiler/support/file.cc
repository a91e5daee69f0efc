#include "compiler/support/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>

namespace gptc {

StatusOr<std::string> ReadFile(std::string_view path) {
  if (path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  std::string p(path);
  int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error("{}: {}", path, std::strerror(errno));
  std::string contents;
  char buf[1 << 16];
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(fd);
      return Error("{}: {}", path, std::strerror(err));
    }
    if (n == 0) break;
    contents.append(buf, n);
  }
  close(fd);
  return contents;
}

Status WriteFileAtomically(std::string_view path, std::string_view contents) {
  std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Error("{}: {}", tmp, std::strerror(errno));
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
