// Rendezvous: how the ranks of a data-parallel job find each other, over TCP
// on MASTER_ADDR:MASTER_PORT (runtime/launch_env.h), as torchrun's c10d store
// does. Needs no MPI library and no shared filesystem.
//
//   ASSIGN_OR_RETURN(LaunchEnv env, ReadLaunchEnv());
//   ASSIGN_OR_RETURN(std::unique_ptr<Rendezvous> rdv,
//   Rendezvous::Join(RendezvousOptionsFrom(env)));
//   // GPU: rank 0 makes the NCCL unique id, every rank receives it.
//   ASSIGN_OR_RETURN(std::vector<std::byte> id, rdv->Broadcast(rank0 ? my_id : {}));
//   ncclCommInitRank(&comm, world, id, rank);
//   RETURN_IF_ERROR(rdv->Barrier());
//
// Protocol: rank 0 listens on every interface at the port; every other rank
// connects (retrying while rank 0 is not up yet), waits for rank 0's
// greeting (Note [greeting]) and sends a hello (protocol version, rank, world
// size and the fields of Note [agreement]); once rank 0 holds a valid,
// agreeing hello from each of ranks 1..N-1 it answers every one, and Join
// returns on all ranks. The connections stay open: Broadcast, Barrier and the
// TCP communicator (runtime/communicator.h) run over them as a star through
// rank 0.
//
// Note [greeting]: rank 0 speaks first, a frame with the protocol version,
// as soon as it accepts a connection. A rank that connects to MASTER_PORT
// and gets anything else (another program's banner, bytes that are no frame,
// silence for kGreetingTimeout, a closed connection) fails at once naming
// what it got and, when the address is this host's, the process that
// listens there: it never takes another program for rank 0. Rank 0 that
// cannot listen because another program holds the port names it too.
//
// Note [agreement]: data parallelism is only right when every rank trains
// the same way: the same artifact, learning-rate schedule, seed, data and
// start. Each rank sends these (RendezvousOptions::agreed, name and value)
// in its hello; rank 0 compares them with its own as each hello arrives, and
// the first rank that differs fails the rendezvous on every rank with one
// line naming that rank and the fields ("rendezvous: rank 1 disagrees with
// rank 0: --lr is '0.002' on rank 1 but '0.001' on rank 0 ..."), at once:
// the ranks already connected get it as the rendezvous' failure, and rank 0
// answers those that connect within the next kLatecomerWindow (5 s) with it.
//
// Failure (Note [failure] in runtime/communicator.h): every blocking step
// ends by `timeout`. A rank that never comes makes rank 0 fail with the
// ranks it waited for, and rank 0 tells the ranks already connected, which
// fail with that message at once; a rank that cannot reach rank 0 fails
// naming the address. A peer that goes away (EOF) fails the step naming its
// rank and address, and rank 0 relays the failure to everyone else. A rank
// that cannot take part at all sends its error in place of its hello
// (AbortBeforeJoin), which fails the rendezvous the same way. Hellos
// with another world size or a rank out of range or taken twice fail the
// whole rendezvous, naming both sides.
//
// Note [waiting lines]: a Join that waits says so every `progress_interval`
// (5 s by default) instead of keeping silent until the timeout: rank 0 names
// the ranks it still waits for ("rank 0: waiting for ranks 1, 3 of 4 at
// 10.0.0.1:29500 (12 s of 300 s)"), a rank that cannot reach rank 0 yet says
// so with the last connection error, and a rank that has joined says it
// waits for the others. The lines go to `progress` (gptrun prefixes them
// with "gptrun: "), or to stderr.
#ifndef GPTC_RUNTIME_RENDEZVOUS_H_
#define GPTC_RUNTIME_RENDEZVOUS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "compiler/support/status.h"
#include "runtime/launch_env.h"
#include "runtime/tcp_socket.h"

namespace gptc::rt {

// Note [agreement]: (name, value) pairs, in order; an empty value is not
// compared.
using AgreedFields = std::vector<std::pair<std::string, std::string>>;

struct RendezvousOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = kDefaultMasterPort;
  int64_t rank = 0;
  int64_t world_size = 1;
  // Bounds each blocking step: the whole Join, and each Broadcast / Barrier.
  std::chrono::milliseconds timeout = kDefaultDistTimeout;
  // Pause between connection attempts while rank 0 is not listening yet.
  std::chrono::milliseconds retry_interval{100};
  // How often a waiting Join says what it waits for (Note [waiting lines]);
  // zero: never.
  std::chrono::milliseconds progress_interval{5000};
  // Receives those lines (no newline); unset: they go to stderr.
  std::function<void(const std::string& line)> progress;
  // What every rank must agree on (Note [agreement]); none: nothing compared.
  AgreedFields agreed;
};

RendezvousOptions RendezvousOptionsFrom(const LaunchEnv& env);

class Rendezvous {
 public:
  // Blocks until every rank has joined, or fails (see the header comment).
  // world_size 1 returns at once with no connection.
  static StatusOr<std::unique_ptr<Rendezvous>> Join(const RendezvousOptions& options);

  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;
  ~Rendezvous() = default;

  int64_t rank() const { return options_.rank; }
  int64_t world_size() const { return options_.world_size; }
  const RendezvousOptions& options() const { return options_; }

  // For a rank that fails before joining (gptrun: no GPU for it), so that
  // the others need not wait for it until the timeout: a rank other than 0
  // sends "rank R aborted: `why`" to rank 0 in place of its hello, and rank 0
  // fails the rendezvous with it and relays it to the ranks already
  // connected; rank 0 listens and answers the ranks that connect with it.
  // Best effort, for at most `patience`: rank 0 may not be listening yet,
  // and ranks that come later wait as before.
  static void AbortBeforeJoin(const RendezvousOptions& options, const Status& why,
                              std::chrono::milliseconds patience = std::chrono::seconds(1));

  // Rank 0's `blob` (at most 1 MiB), returned on every rank; the other ranks
  // pass an empty span. For the 128-byte ncclUniqueId.
  StatusOr<std::vector<std::byte>> Broadcast(std::span<const std::byte> blob);
  // Returns once every rank has called it.
  Status Barrier();
  // Ends the group: sends `why` (prefixed with this rank) to rank 0, which
  // relays it to everyone, or from rank 0 to everyone, then closes the
  // connections. Later calls fail. Does not block beyond a second.
  void Abort(const Status& why);
  // Whether Abort ran or a step failed (the connections are closed then).
  bool failed() const { return failed_; }

  // For the TCP communicator: on rank 0, peers[r] is the connection to rank
  // r (peers[0] is empty); on the others, peers[0] is the connection to rank 0.
  std::vector<Socket>& peers() { return peers_; }
  // When a blocking step that starts at `start` gives up on this rank. Ranks
  // other than 0 wait kPeerGrace longer than the timeout: when rank 0 gives up
  // on a missing rank, its message (which names that rank) reaches them
  // before their own clock runs out.
  Clock::time_point Deadline(Clock::time_point start) const {
    return start + options_.timeout + (options_.rank == 0 ? Clock::duration(0) : kPeerGrace);
  }
  static constexpr std::chrono::seconds kPeerGrace{2};
  // "rank 2 (10.0.0.7:51234)" for messages; rank 0 is MASTER_ADDR:MASTER_PORT.
  std::string PeerName(int64_t rank) const;
  // Marks the group failed: on rank 0 sends `message` to every other rank
  // still connected (best effort); closes every connection. Returns `message`
  // as an error, for `return rdv.Fail(...)`.
  Status Fail(const Status& message);

 private:
  explicit Rendezvous(RendezvousOptions options) : options_(std::move(options)) {}
  Status JoinAsRoot();
  Status JoinAsPeer();
  // Rank 0's side of one accepted connection: the greeting, then the hello;
  // returns the rank it joins (0 when it is not one of ours), or the error
  // that ends the rendezvous (*disagreement: for Note [agreement]).
  StatusOr<int64_t> Welcome(Socket& s, const std::string& address, Clock::time_point deadline,
                            bool* disagreement);
  // A peer's side: rank 0's greeting on peers_[0] (Note [greeting]).
  Status AwaitGreeting(Clock::time_point deadline);

  RendezvousOptions options_;
  std::vector<Socket> peers_;
  std::vector<std::string> peer_addresses_;
  bool failed_ = false;
};

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_RENDEZVOUS_H_
