// TCP sockets for the rendezvous and the CPU communicator: every blocking
// call takes a deadline, and a closed peer is an error, never a signal.
//
// Sockets are non-blocking; SendAll/RecvAll poll until the deadline. Sends
// use MSG_NOSIGNAL, so writing to a peer that died returns "connection
// closed" instead of killing the process with SIGPIPE. IPv4 only.
//
// Frames (what the rendezvous and the TCP communicator exchange):
//   u32 magic 'GPDP' | u32 type | u64 payload length | payload
// A kAbort frame carries the text of the error that ended the sender's
// group; receiving one where anything else was expected returns that text
// as the error (Note [failure] in runtime/communicator.h).
#ifndef GPTC_RUNTIME_TCP_SOCKET_H_
#define GPTC_RUNTIME_TCP_SOCKET_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/support/status.h"

namespace gptc::rt {

using Clock = std::chrono::steady_clock;

// "1.5 s": durations in messages.
std::string FormatSeconds(Clock::duration d);
// "1, 2, 5": ranks in messages; past 16, "..., 15, ... (40 in all)".
std::string FormatRanks(const std::vector<int64_t>& ranks);

// An owned non-blocking TCP socket, closed on destruction. Move-only.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { Close(); }

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void Close();
  // Closes so that what was sent last (an abort frame) reaches the peer: a
  // socket closed with unread data sends a reset, and the peer's kernel then
  // drops the frame before the peer reads it. Sends FIN, discards what the
  // peer still sends until it closes too or `deadline`, then closes.
  void CloseGracefully(Clock::time_point deadline);

  // Errors: "connection closed" (kUnavailable: the peer is gone), "timed
  // out" (kTimedOut), or the system's reason. The caller adds who and what was awaited.
  Status SendAll(std::span<const std::byte> data, Clock::time_point deadline);
  Status RecvAll(std::span<std::byte> data, Clock::time_point deadline);

 private:
  int fd_ = -1;
};

// Listens on every IPv4 interface at `port` (0: any free port), SO_REUSEADDR.
StatusOr<Socket> Listen(int port, int backlog = 128);
// The local port a socket is bound to.
StatusOr<int> LocalPort(const Socket& socket);
// One connection accepted before `deadline` ("timed out" otherwise). `peer`
// receives "ADDR:PORT" of the other end.
StatusOr<Socket> Accept(const Socket& listener, Clock::time_point deadline, std::string* peer);
// One attempt to connect to host:port (host resolved as IPv4) before `deadline`.
StatusOr<Socket> ConnectOnce(const std::string& host, int port, Clock::time_point deadline);
// Whether `socket` has data (or EOF) to read before `deadline`: false when
// the deadline passes first. Lets a caller wake up on the way to a longer
// wait without cutting a frame in two.
StatusOr<bool> WaitReadable(const Socket& socket, Clock::time_point deadline);
// Up to `max_bytes` of what `socket` has received, left unread (MSG_PEEK),
// once something arrived before `deadline` ("timed out" otherwise); empty
// when the peer closed the connection.
StatusOr<std::string> PeekSome(const Socket& socket, size_t max_bytes, Clock::time_point deadline);
// Whether `bytes`, the first received on a connection, can begin a frame
// (they are the frame magic, or a beginning of it).
bool MayBeFrame(std::string_view bytes);
// The local process listening on TCP `port`, "python3 (pid 4242)", found in
// /proc; "a process of another user" when its sockets are not ours to see;
// "" when nothing here listens there.
std::string ListenerOf(int port);
// A TCP port that is free on loopback right now (tests).
StatusOr<int> PickFreePort();

enum class FrameType : uint32_t {
  kHello = 1,    // rank -> rank 0: u32 version, u32 rank, u32 world; reply: the same, rank 0
  kBlob = 2,     // rank 0 -> rank: Rendezvous::Broadcast payload
  kBarrier = 3,  // empty
  kData = 4,     // a collective: u16 kind, u16 op (0 all-reduce), u32 element bytes,
                 // u64 count, then the values (runtime/communicator.cc)
  kAbort = 5,    // the error text that ended the sender's group
};

Status SendFrame(Socket& socket, FrameType type, std::span<const std::byte> payload,
                 Clock::time_point deadline);
// Reads one frame of `type` whose payload is at most `max_bytes`. A kAbort
// frame becomes an error with its text (and sets *aborted, when given);
// another type or a bad magic is a protocol error.
StatusOr<std::vector<std::byte>> RecvFrame(Socket& socket, FrameType type, uint64_t max_bytes,
                                           Clock::time_point deadline, bool* aborted = nullptr);
// Reads one frame of `type` whose payload is a `header` then exactly `body.size()` bytes,
// straight into the two spans (no copy for large all-reduce payloads).
Status RecvFrameInto(Socket& socket, FrameType type, std::span<std::byte> header,
                     std::span<std::byte> body, Clock::time_point deadline);

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_TCP_SOCKET_H_
