// Watchdog: keeps a data-parallel GPU run from hanging.
//
// The CPU communicator puts a deadline on every call (Note [failure] in
// runtime/communicator.h). NCCL puts none: its collectives wait on the GPU
// for every peer, so a rank that died, or one stuck elsewhere, leaves the
// others spinning in their kernels, and their host threads, blocked in a CUDA
// wait behind those kernels, never notice. So each rank runs a watchdog
// thread that
//   - watches the rendezvous connections (idle once NCCL is up): a peer that
//     exits closes its socket, and a peer that fails sends an abort frame.
//     Rank 0 relays either to every other rank;
//   - calls a probe every poll period (ncclCommGetAsyncError);
//   - bounds each phase that the main thread marks with Begin/End (NCCL
//     init, a train step): a phase longer than the timeout is a hang.
// The first failure reaches every rank, and `on_failure` is called once, on
// the watchdog thread. gptrun prints it and exits, since its main thread is
// stuck in a CUDA wait and cannot return.
//
// A clean end is a barrier (Finish). Without it, a rank that is done and
// exits would look like a dead one to a peer still validating or writing
// its checkpoint.
//
//   Watchdog dog({.rank = r, .timeout = env.timeout}, [](const Status& s) { ... });
//   dog.Watch(std::move(rendezvous));
//   dog.Begin("NCCL init");  ...  dog.End();
//   dog.SetProbe([&] { return nccl->AsyncError(); });
//   for (...) { dog.Begin(fmt::format("step {}", s)); trainer.Step(...); dog.End(); }
//   RETURN_IF_ERROR(dog.Finish());
#ifndef GPTC_RUNTIME_WATCHDOG_H_
#define GPTC_RUNTIME_WATCHDOG_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "compiler/support/status.h"
#include "runtime/launch_env.h"
#include "runtime/rendezvous.h"

namespace gptc::rt {

class Watchdog {
 public:
  struct Options {
    int64_t rank = 0;  // for messages
    std::chrono::milliseconds timeout = kDefaultDistTimeout;
    std::chrono::milliseconds poll{100};
  };
  using FailureHandler = std::function<void(const Status&)>;
  using Probe = std::function<Status()>;

  // Starts the thread. Until Watch, it only bounds the phases.
  Watchdog(Options options, FailureHandler on_failure);
  // Stops the thread (on_failure is not called after this returns) and
  // closes the connections. A peer still watching sees this rank go away,
  // unless Finish succeeded first.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Takes over a joined rendezvous, which the caller no longer uses, and a
  // probe for asynchronous errors (may be null). Call at most once.
  void Watch(std::unique_ptr<Rendezvous> rendezvous, Probe probe = nullptr);
  // The probe, once there is something to probe (after NCCL init).
  void SetProbe(Probe probe);

  // A phase of the main thread that must end within the timeout. `what`
  // names it in the message ("step 12", "NCCL init").
  void Begin(std::string what);
  void End();

  // After an error of the main thread's own: tells every rank (the message
  // becomes "rank R aborted: WHY" on the others) and stops watching. Does
  // not call on_failure. Blocks for a second at most.
  void Abort(const Status& why);

  // The clean end: returns once every rank has called Finish, or with the
  // failure that came first (then on_failure is not called for it). Ranks
  // other than 0 wait for rank 0 for up to the timeout (plus the
  // rendezvous' grace), so rank 0's last validation and checkpoint must fit.
  Status Finish();

 private:
  void Run();
  // One round: reads what the peers sent, probes, checks the phase and the
  // finish. Returns the failure found, if any. Called with mu_ held.
  std::optional<Status> CheckLocked(const std::vector<int>& readable_ranks);
  // Its parts: what the peers sent (false: a failure, in failure_), and the
  // finish handshake. Called with mu_ held.
  bool ReadPeersLocked(const std::vector<int>& readable_ranks);
  std::optional<Status> FinishLocked(Clock::time_point now);
  // Tells the peers, marks the watchdog failed. Called with mu_ held.
  void FailLocked(const Status& failure, bool found_here);

  const Options options_;
  const FailureHandler on_failure_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<Rendezvous> rendezvous_;
  Probe probe_;
  std::optional<std::string> phase_;
  Clock::time_point phase_start_;
  bool stop_ = false;
  bool failed_ = false;
  std::optional<Status> failure_;
  // The clean end: rank 0 counts the ranks that are done; the others send
  // their done once and wait for rank 0's release.
  bool finishing_ = false;
  Clock::time_point finish_start_;
  std::vector<bool> done_;
  bool sent_done_ = false;
  bool finished_ = false;

  std::thread thread_;  // last: starts after every field above exists
};

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_WATCHDOG_H_
