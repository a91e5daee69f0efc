#include "runtime/rendezvous.h"

#include <cstdio>
#include <cstring>
#include <thread>

namespace gptc::rt {

namespace {

constexpr uint32_t kProtocolVersion = 1;
constexpr uint64_t kMaxBlobBytes = 1 << 20;
// A connection that does not say hello within this long is dropped (a port
// scanner, a stale client), so it cannot stall the rendezvous.
constexpr std::chrono::seconds kHelloTimeout{10};

struct Hello {
  uint32_t version = kProtocolVersion;
  uint32_t rank = 0;
  uint32_t world = 0;
};

std::span<const std::byte> Bytes(const Hello& h) { return std::as_bytes(std::span(&h, 1)); }

StatusOr<Hello> ParseHello(const std::vector<std::byte>& payload) {
  Hello h;
  if (payload.size() != sizeof(h))
    return Error("protocol error: hello of {} bytes", payload.size());
  std::memcpy(&h, payload.data(), sizeof(h));
  if (h.version != kProtocolVersion) {
    return Error("protocol version {}, this gptc speaks {} (mixed gptc versions?)", h.version,
                 kProtocolVersion);
  }
  return h;
}

// "timed out" from the socket layer, with how long was waited.
Status Explain(const Status& s, Clock::time_point start) {
  if (s.message() == "timed out")
    return Error("timed out after {}", FormatSeconds(Clock::now() - start));
  return s;
}

// "12 s" under a timeout of 10 s or more, "1.5 s" under a shorter one (tests).
std::string Seconds(Clock::duration d, std::chrono::milliseconds timeout) {
  const double s = std::chrono::duration<double>(d).count();
  return timeout >= std::chrono::seconds(10) ? fmt::format("{:.0f} s", s)
                                             : fmt::format("{:.1f} s", s);
}

// The lines of Note [waiting lines]: Until bounds each wait of Join, so that
// it wakes up in time to Report what it still waits for.
class Progress {
 public:
  Progress(const RendezvousOptions& options, Clock::time_point start)
      : options_(options), start_(start), next_(start + options.progress_interval) {}

  // The deadline of the next wait: `deadline`, or sooner when a line is due then.
  Clock::time_point Until(Clock::time_point deadline) const {
    return enabled() ? std::min(deadline, next_) : deadline;
  }
  bool Due() const { return enabled() && Clock::now() >= next_; }
  // "rank R: waiting for `what` (12 s of 300 s`detail`)", when one is due.
  void Report(const std::string& what, const std::string& detail = "") {
    if (!Due()) return;
    const auto now = Clock::now();
    const std::string line = fmt::format("rank {}: waiting for {} ({} of {}{})", options_.rank,
                                         what, Seconds(now - start_, options_.timeout),
                                         Seconds(options_.timeout, options_.timeout), detail);
    if (options_.progress) {
      options_.progress(line);
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    while (next_ <= now) next_ += options_.progress_interval;
  }

 private:
  bool enabled() const { return options_.progress_interval.count() > 0; }

  const RendezvousOptions& options_;
  Clock::time_point start_, next_;
};

}  // namespace

RendezvousOptions RendezvousOptionsFrom(const LaunchEnv& env) {
  RendezvousOptions o;
  o.master_addr = env.master_addr;
  o.master_port = env.master_port;
  o.rank = env.rank;
  o.world_size = env.world_size;
  o.timeout = env.timeout;
  return o;
}

StatusOr<std::unique_ptr<Rendezvous>> Rendezvous::Join(const RendezvousOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return Error("rendezvous: rank {} is not in a world of {}", options.rank, options.world_size);
  }
  if (options.world_size > 65536) {
    return Error("rendezvous: world size {} is above 65536", options.world_size);
  }
  std::unique_ptr<Rendezvous> r(new Rendezvous(options));
  if (options.world_size == 1) return r;
  RETURN_IF_ERROR(options.rank == 0 ? r->JoinAsRoot() : r->JoinAsPeer());
  return r;
}

std::string Rendezvous::PeerName(int64_t rank) const {
  if (rank == 0 || options_.rank != 0) {
    return fmt::format("rank 0 ({}:{})", options_.master_addr, options_.master_port);
  }
  const std::string& addr = peer_addresses_[rank];
  return addr.empty() ? fmt::format("rank {}", rank) : fmt::format("rank {} ({})", rank, addr);
}

Status Rendezvous::Fail(const Status& message) {
  if (!failed_) {
    failed_ = true;
    // Best effort and brief: the ranks still connected learn why at once
    // instead of waiting for their own timeout.
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    if (options_.rank == 0) {
      const std::string& text = message.message();
      for (Socket& peer : peers_) {
        if (peer.valid()) {
          SendFrame(peer, FrameType::kAbort, std::as_bytes(std::span(text)), deadline).ok();
        }
      }
    }
    for (Socket& peer : peers_) peer.CloseGracefully(deadline);
  }
  return message;
}

void Rendezvous::Abort(const Status& why) {
  if (failed_) return;
  const Status message = Error("rank {} aborted: {}", options_.rank, why.message());
  if (options_.rank != 0 && !peers_.empty() && peers_[0].valid()) {
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    const std::string& text = message.message();
    SendFrame(peers_[0], FrameType::kAbort, std::as_bytes(std::span(text)), deadline).ok();
  }
  Fail(message).ok();
}

Status Rendezvous::JoinAsRoot() {
  const int64_t world = options_.world_size;
  const auto start = Clock::now();
  const auto deadline = start + options_.timeout;
  peers_.resize(world);
  peer_addresses_.resize(world);
  StatusOr<Socket> listening = Listen(options_.master_port);
  if (!listening.ok()) return Fail(listening.status().WithPrefix("rendezvous: rank 0"));
  Socket listener = std::move(listening).value();
  auto missing_ranks = [&] {
    std::vector<int64_t> missing;
    for (int64_t r = 1; r < world; ++r) {
      if (!peers_[r].valid()) missing.push_back(r);
    }
    return missing;
  };
  Progress progress(options_, start);
  int64_t joined = 1;
  while (joined < world) {
    std::string address;
    StatusOr<Socket> accepted = Accept(listener, progress.Until(deadline), &address);
    if (!accepted.ok() && accepted.status().message() == "timed out" && Clock::now() < deadline) {
      const std::vector<int64_t> missing = missing_ranks();
      progress.Report(fmt::format("rank{} {} of {} at {}:{}", missing.size() == 1 ? "" : "s",
                                  FormatRanks(missing), world, options_.master_addr,
                                  options_.master_port));
      continue;
    }
    if (!accepted.ok()) {
      const std::vector<int64_t> missing = missing_ranks();
      return Fail(Error(
          "rendezvous: rank 0 waited {} on port {} but rank{} {} of {} never "
          "joined ({})",
          FormatSeconds(Clock::now() - start), options_.master_port, missing.size() == 1 ? "" : "s",
          FormatRanks(missing), world, accepted.status().message()));
    }
    Socket s = std::move(accepted).value();
    bool aborted = false;
    StatusOr<std::vector<std::byte>> payload =
        RecvFrame(s, FrameType::kHello, sizeof(Hello),
                  std::min(deadline, Clock::now() + kHelloTimeout), &aborted);
    if (aborted) return Fail(payload.status());  // AbortBeforeJoin: a rank that cannot come
    if (!payload.ok()) continue;  // not one of ours, or gone already: keep waiting
    // A bad hello ends the rendezvous; the sender hears why too.
    auto reject = [&](const Status& why) {
      const std::string& text = why.message();
      const auto deadline = Clock::now() + std::chrono::seconds(1);
      SendFrame(s, FrameType::kAbort, std::as_bytes(std::span(text)), deadline).ok();
      s.CloseGracefully(deadline);
      return Fail(why);
    };
    StatusOr<Hello> hello = ParseHello(*payload);
    if (!hello.ok()) {
      return reject(hello.status().WithPrefix(fmt::format("rendezvous: hello from {}", address)));
    }
    if (hello->world != world) {
      return reject(
          Error("rendezvous: rank {} ({}) was launched with world size {}, rank 0 with {}",
                hello->rank, address, hello->world, world));
    }
    if (hello->rank == 0 || hello->rank >= world) {
      return reject(Error("rendezvous: {} says it is rank {}, not in 1..{}", address, hello->rank,
                          world - 1));
    }
    if (peers_[hello->rank].valid()) {
      return reject(Error("rendezvous: rank {} joined twice (from {} and {})", hello->rank,
                          peer_addresses_[hello->rank], address));
    }
    peers_[hello->rank] = std::move(s);
    peer_addresses_[hello->rank] = address;
    ++joined;
  }
  const Hello welcome{kProtocolVersion, 0, static_cast<uint32_t>(world)};
  for (int64_t r = 1; r < world; ++r) {
    Status s = SendFrame(peers_[r], FrameType::kHello, Bytes(welcome), deadline);
    if (!s.ok()) return Fail(s.WithPrefix(fmt::format("rendezvous: welcoming {}", PeerName(r))));
  }
  return Status::Ok();
}

Status Rendezvous::JoinAsPeer() {
  const auto start = Clock::now();
  const auto deadline = start + options_.timeout;
  peers_.resize(1);
  const std::string master = fmt::format("{}:{}", options_.master_addr, options_.master_port);
  Progress progress(options_, start);
  Status last = Error("no attempt");
  while (true) {
    // An attempt ends when a line is due, so that a host that drops the
    // connection request does not keep this rank silent until the deadline.
    StatusOr<Socket> s =
        ConnectOnce(options_.master_addr, options_.master_port, progress.Until(deadline));
    if (s.ok()) {
      peers_[0] = std::move(s).value();
      break;
    }
    last = s.status();
    if (Clock::now() + options_.retry_interval >= deadline) {
      return Fail(Error("rendezvous: rank {} could not reach rank 0 at {} within {} ({})",
                        options_.rank, master, FormatSeconds(Clock::now() - start),
                        last.message()));
    }
    progress.Report(fmt::format("rank 0 at {}", master), "; " + last.message());
    std::this_thread::sleep_for(options_.retry_interval);
  }
  const Hello hello{kProtocolVersion, static_cast<uint32_t>(options_.rank),
                    static_cast<uint32_t>(options_.world_size)};
  Status sent = SendFrame(peers_[0], FrameType::kHello, Bytes(hello), deadline);
  if (!sent.ok()) {
    return Fail(sent.WithPrefix(
        fmt::format("rendezvous: rank {} saying hello to rank 0 at {}", options_.rank, master)));
  }
  // Rank 0 answers once every rank has said hello; until then say so.
  while (true) {
    StatusOr<bool> ready = WaitReadable(peers_[0], progress.Until(Deadline(start)));
    if (!ready.ok() || *ready || Clock::now() >= Deadline(start)) break;  // RecvFrame says why
    progress.Report(fmt::format("the other ranks to join rank 0 at {}", master));
  }
  StatusOr<std::vector<std::byte>> reply =
      RecvFrame(peers_[0], FrameType::kHello, sizeof(Hello), Deadline(start));
  if (!reply.ok()) {
    const std::string& why = reply.status().message();
    if (why == "timed out") {
      return Fail(
          Error("rendezvous: rank {} joined rank 0 at {} but the other ranks did not "
                "all join within {}",
                options_.rank, master, FormatSeconds(Clock::now() - start)));
    }
    return Fail(
        Error("rendezvous: rank {} waiting for rank 0 at {} to complete the "
              "rendezvous: {}",
              options_.rank, master, why));
  }
  RETURN_IF_ERROR(ParseHello(*reply).status());
  return Status::Ok();
}

void Rendezvous::AbortBeforeJoin(const RendezvousOptions& options, const Status& why,
                                 std::chrono::milliseconds patience) {
  if (options.world_size <= 1) return;
  const std::string text = fmt::format("rank {} aborted: {}", options.rank, why.message());
  const auto until = Clock::now() + patience;
  auto tell = [&](Socket& peer) {
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    SendFrame(peer, FrameType::kAbort, std::as_bytes(std::span(text)), deadline).ok();
    peer.CloseGracefully(deadline);
  };
  if (options.rank == 0) {
    StatusOr<Socket> listener = Listen(options.master_port);
    while (listener.ok()) {
      StatusOr<Socket> peer = Accept(*listener, until, nullptr);
      if (!peer.ok()) return;
      tell(*peer);
    }
    return;
  }
  while (Clock::now() < until) {
    StatusOr<Socket> rank0 = ConnectOnce(options.master_addr, options.master_port, until);
    if (rank0.ok()) return tell(*rank0);
    std::this_thread::sleep_for(options.retry_interval);
  }
}

StatusOr<std::vector<std::byte>> Rendezvous::Broadcast(std::span<const std::byte> blob) {
  if (failed_) return Error("rendezvous: broadcast after the group failed");
  if (options_.world_size == 1) return std::vector<std::byte>(blob.begin(), blob.end());
  const auto start = Clock::now();
  const auto deadline = Deadline(start);
  if (options_.rank == 0) {
    if (blob.size() > kMaxBlobBytes) {
      return Error("rendezvous: broadcast of {} bytes, at most {}", blob.size(), kMaxBlobBytes);
    }
    for (int64_t r = 1; r < options_.world_size; ++r) {
      Status s = Explain(SendFrame(peers_[r], FrameType::kBlob, blob, deadline), start);
      if (!s.ok()) {
        return Fail(
            s.WithPrefix(fmt::format("rendezvous broadcast: rank 0 sending to {}", PeerName(r))));
      }
    }
    return std::vector<std::byte>(blob.begin(), blob.end());
  }
  StatusOr<std::vector<std::byte>> got =
      RecvFrame(peers_[0], FrameType::kBlob, kMaxBlobBytes, deadline);
  if (!got.ok()) {
    return Fail(
        Explain(got.status(), start)
            .WithPrefix(fmt::format("rendezvous broadcast: rank {} awaiting the blob from {}",
                                    options_.rank, PeerName(0))));
  }
  return got;
}

Status Rendezvous::Barrier() {
  if (failed_) return Error("rendezvous: barrier after the group failed");
  if (options_.world_size == 1) return Status::Ok();
  const auto start = Clock::now();
  const auto deadline = Deadline(start);
  if (options_.rank == 0) {
    for (int64_t r = 1; r < options_.world_size; ++r) {
      Status s = Explain(RecvFrame(peers_[r], FrameType::kBarrier, 0, deadline).status(), start);
      if (!s.ok()) {
        return Fail(s.WithPrefix(fmt::format("barrier: rank 0 awaiting {}", PeerName(r))));
      }
    }
    for (int64_t r = 1; r < options_.world_size; ++r) {
      Status s = Explain(SendFrame(peers_[r], FrameType::kBarrier, {}, deadline), start);
      if (!s.ok()) {
        return Fail(s.WithPrefix(fmt::format("barrier: rank 0 releasing {}", PeerName(r))));
      }
    }
    return Status::Ok();
  }
  Status s = SendFrame(peers_[0], FrameType::kBarrier, {}, deadline);
  if (s.ok()) s = RecvFrame(peers_[0], FrameType::kBarrier, 0, deadline).status();
  s = Explain(s, start);
  if (!s.ok()) {
    return Fail(
        s.WithPrefix(fmt::format("barrier: rank {} awaiting {}", options_.rank, PeerName(0))));
  }
  return Status::Ok();
}

}  // namespace gptc::rt
