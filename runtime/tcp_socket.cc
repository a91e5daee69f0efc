#include "runtime/tcp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace gptc::rt {

namespace {

constexpr uint32_t kFrameMagic = 0x50445047;  // "GPDP" little-endian

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint32_t type = 0;
  uint64_t length = 0;
};
static_assert(sizeof(FrameHeader) == 16);

std::string Errno(int err) { return std::strerror(err); }

int MillisLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

// Waits until `fd` is ready for `events`; false on timeout.
StatusOr<bool> WaitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, MillisLeft(deadline));
    if (n > 0) return true;
    if (n == 0) {
      if (Clock::now() >= deadline) return false;
      continue;
    }
    if (errno != EINTR) return Error("poll: {}", Errno(errno));
  }
}

Status SetNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return Error("fcntl: {}", Errno(errno));
  }
  return Status::Ok();
}

// Small frames go out at once (the barrier and the all-reduce replies are latency bound).
void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string FormatAddress(const sockaddr_in& addr) {
  char text[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
  return fmt::format("{}:{}", text, ntohs(addr.sin_port));
}

StatusOr<FrameHeader> RecvHeader(Socket& socket, FrameType type, Clock::time_point deadline,
                                 bool* aborted = nullptr) {
  FrameHeader h;
  RETURN_IF_ERROR(socket.RecvAll(std::as_writable_bytes(std::span(&h, 1)), deadline));
  if (h.magic != kFrameMagic) return Error("protocol error: bad frame magic {:#x}", h.magic);
  if (h.type == static_cast<uint32_t>(FrameType::kAbort)) {
    // The sender's error, verbatim; bounded so a bad length cannot exhaust memory.
    std::string text(std::min<uint64_t>(h.length, 1 << 16), '\0');
    RETURN_IF_ERROR(socket.RecvAll(std::as_writable_bytes(std::span(text)), deadline));
    if (aborted != nullptr) *aborted = true;
    return Error("{}", text);
  }
  if (h.type != static_cast<uint32_t>(type)) {
    return Error("protocol error: frame type {}, expected {}", h.type, static_cast<uint32_t>(type));
  }
  return h;
}

}  // namespace

std::string FormatSeconds(Clock::duration d) {
  return fmt::format("{:.1f} s", std::chrono::duration<double>(d).count());
}

std::string FormatRanks(const std::vector<int64_t>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) {
    out += fmt::format("{}{}", i == 0 ? "" : ", ", ranks[i]);
  }
  if (ranks.size() > 16) out += fmt::format(", ... ({} in all)", ranks.size());
  return out;
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Socket::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::CloseGracefully(Clock::time_point deadline) {
  if (fd_ < 0) return;
  ::shutdown(fd_, SHUT_WR);
  char sink[1 << 16];
  while (true) {
    const ssize_t n = ::recv(fd_, sink, sizeof(sink), 0);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      StatusOr<bool> ready = WaitFor(fd_, POLLIN, deadline);
      if (ready.ok() && *ready) continue;
    }
    break;  // EOF, an error, or the deadline
  }
  Close();
}

Status Socket::SendAll(std::span<const std::byte> data, Clock::time_point deadline) {
  if (fd_ < 0) return UnavailableError("connection closed");
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      ASSIGN_OR_RETURN(bool ready, WaitFor(fd_, POLLOUT, deadline));
      if (!ready) return TimedOutError("timed out");
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
      return UnavailableError("connection closed");
    return Error("send: {}", Errno(errno));
  }
  return Status::Ok();
}

Status Socket::RecvAll(std::span<std::byte> data, Clock::time_point deadline) {
  if (fd_ < 0) return UnavailableError("connection closed");
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = ::recv(fd_, data.data() + got, data.size() - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return UnavailableError("connection closed");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      ASSIGN_OR_RETURN(bool ready, WaitFor(fd_, POLLIN, deadline));
      if (!ready) return TimedOutError("timed out");
      continue;
    }
    if (errno == ECONNRESET) return UnavailableError("connection closed");
    return Error("recv: {}", Errno(errno));
  }
  return Status::Ok();
}

StatusOr<Socket> Listen(int port, int backlog) {
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return Error("socket: {}", Errno(errno));
  int one = 1;
  ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    const int err = errno;
    const std::string who = err == EADDRINUSE ? ListenerOf(port) : "";
    return Error("cannot listen on port {}: {}{}", port, Errno(err),
                 who.empty() ? "" : fmt::format("; {} listens there", who));
  }
  if (::listen(s.fd(), backlog) < 0) return Error("listen on port {}: {}", port, Errno(errno));
  RETURN_IF_ERROR(SetNonBlocking(s.fd()));
  return s;
}

StatusOr<int> LocalPort(const Socket& socket) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&addr), &len) < 0) {
    return Error("getsockname: {}", Errno(errno));
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

StatusOr<Socket> Accept(const Socket& listener, Clock::time_point deadline, std::string* peer) {
  while (true) {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    const int fd = ::accept4(listener.fd(), reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      SetNoDelay(fd);
      if (peer != nullptr) *peer = FormatAddress(addr);
      return Socket(fd);
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Error("accept: {}", Errno(errno));
    ASSIGN_OR_RETURN(bool ready, WaitFor(listener.fd(), POLLIN, deadline));
    if (!ready) return TimedOutError("timed out");
  }
}

StatusOr<Socket> ConnectOnce(const std::string& host, int port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return Error("cannot resolve '{}': {}", host, ::gai_strerror(rc));
  }
  sockaddr_in addr{};
  std::memcpy(&addr, found->ai_addr, sizeof(addr));
  ::freeaddrinfo(found);
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return Error("socket: {}", Errno(errno));
  RETURN_IF_ERROR(SetNonBlocking(s.fd()));
  if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    if (errno != EINPROGRESS) return Error("{}", Errno(errno));
    ASSIGN_OR_RETURN(bool ready, WaitFor(s.fd(), POLLOUT, deadline));
    if (!ready) return TimedOutError("timed out");
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return Error("{}", Errno(err));
  }
  SetNoDelay(s.fd());
  return s;
}

StatusOr<bool> WaitReadable(const Socket& socket, Clock::time_point deadline) {
  if (!socket.valid()) return UnavailableError("connection closed");
  return WaitFor(socket.fd(), POLLIN, deadline);
}

StatusOr<int> PickFreePort() {
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return Error("socket: {}", Errno(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    return Error("bind: {}", Errno(errno));
  }
  return LocalPort(s);
}

StatusOr<std::string> PeekSome(const Socket& socket, size_t max_bytes,
                               Clock::time_point deadline) {
  while (true) {
    ASSIGN_OR_RETURN(bool ready, WaitFor(socket.fd(), POLLIN, deadline));
    if (!ready) return TimedOutError("timed out");
    std::string bytes(max_bytes, '\0');
    const ssize_t n = ::recv(socket.fd(), bytes.data(), bytes.size(), MSG_PEEK);
    if (n >= 0) {
      bytes.resize(static_cast<size_t>(n));
      return bytes;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
    if (errno == ECONNRESET) return std::string();
    return Error("recv: {}", Errno(errno));
  }
}

bool MayBeFrame(std::string_view bytes) {
  const std::string_view magic(reinterpret_cast<const char*>(&kFrameMagic), 4);
  return bytes.substr(0, 4) == magic.substr(0, std::min<size_t>(bytes.size(), 4));
}

namespace {

// The socket inodes listening on TCP `port` in /proc/net/tcp and tcp6.
std::set<std::string> ListeningInodes(int port) {
  std::set<std::string> inodes;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the column names
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      const size_t colon = local.rfind(':');
      if (state != "0A" || colon == std::string::npos) continue;  // 0A: LISTEN
      if (std::strtol(local.c_str() + colon + 1, nullptr, 16) == port) inodes.insert(inode);
    }
  }
  return inodes;
}

}  // namespace

std::string ListenerOf(int port) {
  const std::set<std::string> inodes = ListeningInodes(port);
  if (inodes.empty()) return "";
  std::error_code ec;
  for (const auto& proc : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = proc.path().filename().string();
    if (pid.empty() || !std::isdigit(static_cast<unsigned char>(pid[0]))) continue;
    std::error_code fd_ec;
    for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", fd_ec)) {
      std::error_code link_ec;
      const std::string target = std::filesystem::read_symlink(fd.path(), link_ec).string();
      if (link_ec || !target.starts_with("socket:[")) continue;
      if (!inodes.contains(target.substr(8, target.size() - 9))) continue;
      std::string comm;
      std::getline(std::ifstream(proc.path() / "comm"), comm);
      return fmt::format("{} (pid {})", comm.empty() ? "a process" : comm, pid);
    }
  }
  return "a process of another user";
}

Status SendFrame(Socket& socket, FrameType type, std::span<const std::byte> payload,
                 Clock::time_point deadline) {
  FrameHeader h{kFrameMagic, static_cast<uint32_t>(type), payload.size()};
  RETURN_IF_ERROR(socket.SendAll(std::as_bytes(std::span(&h, 1)), deadline));
  return socket.SendAll(payload, deadline);
}

StatusOr<std::vector<std::byte>> RecvFrame(Socket& socket, FrameType type, uint64_t max_bytes,
                                           Clock::time_point deadline, bool* aborted) {
  ASSIGN_OR_RETURN(FrameHeader h, RecvHeader(socket, type, deadline, aborted));
  if (h.length > max_bytes) {
    return Error("protocol error: frame of {} bytes, at most {} expected", h.length, max_bytes);
  }
  std::vector<std::byte> payload(h.length);
  RETURN_IF_ERROR(socket.RecvAll(payload, deadline));
  return payload;
}

Status RecvFrameInto(Socket& socket, FrameType type, std::span<std::byte> header,
                     std::span<std::byte> body, Clock::time_point deadline) {
  ASSIGN_OR_RETURN(FrameHeader h, RecvHeader(socket, type, deadline));
  if (h.length != header.size() + body.size()) {
    return Error("protocol error: frame of {} bytes, expected {}", h.length,
                 header.size() + body.size());
  }
  RETURN_IF_ERROR(socket.RecvAll(header, deadline));
  return socket.RecvAll(body, deadline);
}

}  // namespace gptc::rt
