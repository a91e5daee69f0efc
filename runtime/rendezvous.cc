#include "runtime/rendezvous.h"

#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "compiler/support/text.h"

namespace gptc::rt {

namespace {

constexpr uint32_t kProtocolVersion = 2;
constexpr uint64_t kMaxBlobBytes = 1 << 20;
constexpr uint64_t kMaxHelloBytes = 1 << 16;
// A connection that does not say hello within this long is dropped (a port
// scanner, a stale client), so it cannot stall the rendezvous.
constexpr std::chrono::seconds kHelloTimeout{10};
// Note [greeting]: how long a rank waits for rank 0's greeting once
// connected, longer than rank 0 may spend on a silent connection before it.
constexpr std::chrono::seconds kGreetingTimeout{15};
// Note [agreement]: how long rank 0 answers the ranks that connect after the
// rendezvous failed for a disagreement, so that they end at once too.
constexpr std::chrono::seconds kLatecomerWindow{5};

struct Hello {
  uint32_t version = kProtocolVersion;
  uint32_t rank = 0;
  uint32_t world = 0;
};

std::span<const std::byte> Bytes(const Hello& h) { return std::as_bytes(std::span(&h, 1)); }

// A hello: the fixed part, then (from the ranks) the fields of Note
// [agreement] as a JSON list of [name, value] pairs.
std::vector<std::byte> HelloPayload(const Hello& h, const AgreedFields& fields) {
  std::vector<std::byte> payload(sizeof(h));
  std::memcpy(payload.data(), &h, sizeof(h));
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [name, value] : fields) list.push_back({name, value});
  const std::string text = list.dump();
  const auto bytes = std::as_bytes(std::span(text));
  payload.insert(payload.end(), bytes.begin(), bytes.end());
  return payload;
}

StatusOr<Hello> ParseHello(const std::vector<std::byte>& payload, AgreedFields* fields = nullptr) {
  Hello h;
  if (payload.size() < sizeof(h)) {
    return Error("protocol error: hello of {} bytes", payload.size());
  }
  std::memcpy(&h, payload.data(), sizeof(h));
  if (h.version != kProtocolVersion) {
    return Error("protocol version {}, this gptc speaks {} (mixed gptc versions?)", h.version,
                 kProtocolVersion);
  }
  if (fields == nullptr || payload.size() == sizeof(h)) return h;
  const auto* text = reinterpret_cast<const char*>(payload.data()) + sizeof(h);
  const nlohmann::json list = nlohmann::json::parse(text, text + payload.size() - sizeof(h),
                                                    nullptr, /*allow_exceptions=*/false);
  if (!list.is_array()) return Error("protocol error: the hello's fields are not a list");
  for (const nlohmann::json& f : list) {
    if (!f.is_array() || f.size() != 2 || !f[0].is_string() || !f[1].is_string()) {
      return Error("protocol error: a field of the hello is not [name, value]");
    }
    fields->emplace_back(f[0].get<std::string>(), f[1].get<std::string>());
  }
  return h;
}

// Note [agreement]: what rank `rank`'s fields say differently from rank 0's
// (`mine`), as one line, or "" when they agree. A field empty on either side
// is unknown there (its own error will say why) and not compared.
std::string Disagreement(int64_t rank, const AgreedFields& mine, const AgreedFields& theirs) {
  std::map<std::string, std::string> given(theirs.begin(), theirs.end());
  std::vector<std::string> differences;
  for (const auto& [name, value] : mine) {
    auto it = given.find(name);
    const std::string other = it == given.end() ? "" : it->second;
    if (value.empty() || other.empty() || value == other) continue;
    differences.push_back(fmt::format("{} is {} on rank {} but {} on rank 0", name,
                                      Shown(other, 60), rank, Shown(value, 60)));
  }
  if (differences.empty()) return "";
  const size_t shown = std::min<size_t>(differences.size(), 3);
  return fmt::format(
      "rendezvous: rank {} disagrees with rank 0: {}{} (every rank must run the same artifact "
      "with the same training flags and data)",
      rank, fmt::join(differences.begin(), differences.begin() + shown, "; "),
      differences.size() > shown ? fmt::format("; and {} more", differences.size() - shown) : "");
}

// Whether `addr` (MASTER_ADDR) names this host: loopback, or its host name.
bool IsThisHost(const std::string& addr) {
  char host[256] = {};
  return addr.starts_with("127.") || addr == "localhost" ||
         (gethostname(host, sizeof(host) - 1) == 0 && addr == host);
}

// Rank 0, after the rendezvous failed with `text`: the ranks that connect
// within kLatecomerWindow hear it in place of the greeting.
void TellLatecomers(const Socket& listener, const std::string& text, int64_t count) {
  const auto until = Clock::now() + kLatecomerWindow;
  for (int64_t told = 0; told < count;) {
    StatusOr<Socket> peer = Accept(listener, until, nullptr);
    if (!peer.ok()) return;
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    SendFrame(*peer, FrameType::kAbort, std::as_bytes(std::span(text)), deadline).ok();
    peer->CloseGracefully(deadline);
    ++told;
  }
}

// "timed out" from the socket layer, with how long was waited.
Status Explain(const Status& s, Clock::time_point start) {
  if (s.code() == StatusCode::kTimedOut)
    return TimedOutError("timed out after {}", FormatSeconds(Clock::now() - start));
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

StatusOr<int64_t> Rendezvous::Welcome(Socket& s, const std::string& address,
                                      Clock::time_point deadline, bool* disagreement) {
  const int64_t world = options_.world_size;
  const auto hello_deadline = std::min(deadline, Clock::now() + kHelloTimeout);
  const Hello greeting{kProtocolVersion, 0, static_cast<uint32_t>(world)};
  if (!SendFrame(s, FrameType::kHello, Bytes(greeting), hello_deadline).ok()) return 0;
  bool aborted = false;
  StatusOr<std::vector<std::byte>> payload =
      RecvFrame(s, FrameType::kHello, kMaxHelloBytes, hello_deadline, &aborted);
  if (aborted) return payload.status();  // AbortBeforeJoin: a rank that cannot come
  if (!payload.ok()) return 0;           // not one of ours, or gone already: keep waiting
  // A bad hello ends the rendezvous; the sender hears why too.
  auto reject = [&](const Status& why) {
    const std::string& text = why.message();
    const auto until = Clock::now() + std::chrono::seconds(1);
    SendFrame(s, FrameType::kAbort, std::as_bytes(std::span(text)), until).ok();
    s.CloseGracefully(until);
    return why;
  };
  AgreedFields fields;
  StatusOr<Hello> hello = ParseHello(*payload, &fields);
  if (!hello.ok()) {
    return reject(hello.status().WithPrefix(fmt::format("rendezvous: hello from {}", address)));
  }
  if (hello->world != world) {
    return reject(Error("rendezvous: rank {} ({}) was launched with world size {}, rank 0 with {}",
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
  if (std::string why = Disagreement(hello->rank, options_.agreed, fields); !why.empty()) {
    *disagreement = true;
    return reject(Error("{}", why));
  }
  return static_cast<int64_t>(hello->rank);
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
    if (!accepted.ok() && accepted.status().code() == StatusCode::kTimedOut &&
        Clock::now() < deadline) {
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
    bool disagreement = false;
    StatusOr<int64_t> rank = Welcome(s, address, deadline, &disagreement);
    if (!rank.ok()) {
      // Note [agreement]: the ranks still to come (all missing ones but the
      // one that disagreed, which Welcome told) hear it too.
      const auto latecomers = static_cast<int64_t>(missing_ranks().size()) - 1;
      Status failed = Fail(rank.status());
      if (disagreement) TellLatecomers(listener, failed.message(), latecomers);
      return failed;
    }
    if (*rank == 0) continue;
    peers_[*rank] = std::move(s);
    peer_addresses_[*rank] = address;
    ++joined;
  }
  const Hello welcome{kProtocolVersion, 0, static_cast<uint32_t>(world)};
  for (int64_t r = 1; r < world; ++r) {
    Status s = SendFrame(peers_[r], FrameType::kHello, Bytes(welcome), deadline);
    if (!s.ok()) return Fail(s.WithPrefix(fmt::format("rendezvous: welcoming {}", PeerName(r))));
  }
  return Status::Ok();
}

Status Rendezvous::AwaitGreeting(Clock::time_point deadline) {
  const std::string master = fmt::format("{}:{}", options_.master_addr, options_.master_port);
  const auto connected = Clock::now();
  const auto until = std::min(deadline, connected + kGreetingTimeout);
  // Note [greeting]: what is there, when it is not a gptrun rank 0.
  auto stranger = [&](const std::string& what) {
    const std::string who =
        IsThisHost(options_.master_addr) ? ListenerOf(options_.master_port) : "";
    return Error("rendezvous: rank {}: {} is not a gptrun rank 0: {}{} (another program holds "
                 "MASTER_PORT? choose a free one for every rank)",
                 options_.rank, master, what,
                 who.empty() ? "" : fmt::format("; {} listens there", who));
  };
  while (true) {
    StatusOr<std::string> seen = PeekSome(peers_[0], 64, until);
    if (!seen.ok() && seen.status().code() == StatusCode::kTimedOut) {
      return stranger(
          fmt::format("it said nothing in {}", FormatSeconds(Clock::now() - connected)));
    }
    if (!seen.ok()) return stranger(seen.status().message());
    if (seen->empty()) return stranger("it closed the connection without a word");
    if (!MayBeFrame(*seen)) return stranger(fmt::format("it answered {}", Shown(*seen, 40)));
    if (seen->size() >= 4) break;
    if (Clock::now() >= until) {
      return stranger(fmt::format("it sent {} and then nothing in {}", Shown(*seen, 40),
                                  FormatSeconds(Clock::now() - connected)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the rest of the magic
  }
  bool aborted = false;
  StatusOr<std::vector<std::byte>> greeting =
      RecvFrame(peers_[0], FrameType::kHello, sizeof(Hello), until, &aborted);
  if (aborted) return greeting.status();  // rank 0 failed: its message as it is
  if (!greeting.ok()) return stranger(greeting.status().message());
  return ParseHello(*greeting).status().WithPrefix(
      fmt::format("rendezvous: rank {}: rank 0 at {}", options_.rank, master));
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
  if (Status greeted = AwaitGreeting(Deadline(start)); !greeted.ok()) return Fail(greeted);
  const Hello hello{kProtocolVersion, static_cast<uint32_t>(options_.rank),
                    static_cast<uint32_t>(options_.world_size)};
  Status sent =
      SendFrame(peers_[0], FrameType::kHello, HelloPayload(hello, options_.agreed), deadline);
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
  bool aborted = false;
  StatusOr<std::vector<std::byte>> reply =
      RecvFrame(peers_[0], FrameType::kHello, sizeof(Hello), Deadline(start), &aborted);
  if (aborted) return Fail(reply.status());  // rank 0's own line (Note [agreement])
  if (!reply.ok()) {
    const std::string& why = reply.status().message();
    if (reply.status().code() == StatusCode::kTimedOut) {
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
