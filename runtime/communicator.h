// Communicators for the CPU reference device: the collectives of a
// data-parallel group (all-reduce, reduce-scatter, all-gather), as the
// evaluator's eval::Collective (compiler/eval/collective.h). Two
// implementations:
//   ThreadGroup      N ranks as threads of one process (tests, and what CI
//                    checks --dp 2 against --dp 1 with)
//   TcpCommunicator  ranks as processes (gptrun --device cpu under mpirun or
//                    a torchrun-style launch), over the rendezvous connections
//                    (runtime/rendezvous.h), a star through rank 0
// Both combine each element in rank order, ((x0 + x1) + x2) + ..., in the
// element type, so every rank gets bit-identical results, the two agree bit
// for bit, and a reduce-scatter's shard is that of the all-reduce. The GPU
// runtime uses NCCL instead (its order is NCCL's).
//
//   ThreadGroup group(2);
//   std::vector<Status> s = RunRanksAsThreads(group, [&](int64_t rank, Communicator& comm) {
//     trainers[rank].set_collective(&comm);
//     return trainers[rank].Step(...).status();
//   });
//
// Note [failure]: no rank ever waits forever. Every blocking call ends after
// the group's timeout (default 300 s) with an error naming the ranks it
// waited for. A rank that fails calls Abort (RunRanksAsThreads does it for
// threads; a process that dies closes its sockets, which rank 0 sees as EOF),
// and every other rank's pending and later calls fail with that rank's
// message, so one failure ends the whole group with one clear cause. A group
// that failed stays failed.
#ifndef GPTC_RUNTIME_COMMUNICATOR_H_
#define GPTC_RUNTIME_COMMUNICATOR_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "compiler/eval/collective.h"
#include "compiler/support/status.h"
#include "runtime/launch_env.h"

namespace gptc::rt {

class Rendezvous;

class Communicator : public eval::Collective {
 public:
  // Returns once every rank has called it.
  virtual Status Barrier() = 0;
  // Ends the group: every rank's pending and later calls fail with "rank R
  // aborted: WHY". Idempotent; never blocks for long.
  virtual void Abort(const Status& why) = 0;
};

// N ranks as threads: rank(r) is the communicator rank r's thread uses.
class ThreadGroup {
 public:
  explicit ThreadGroup(int64_t world_size, std::chrono::milliseconds timeout = kDefaultDistTimeout);
  ~ThreadGroup();
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  int64_t world_size() const { return static_cast<int64_t>(ranks_.size()); }
  Communicator& rank(int64_t r) { return *ranks_[r]; }

  struct State;  // shared by the ranks (communicator.cc)

 private:
  std::shared_ptr<State> state_;
  std::vector<std::unique_ptr<Communicator>> ranks_;
};

// Runs fn(rank, group.rank(rank)) on one thread per rank and joins them. A
// rank whose fn fails aborts the group, so the others stop waiting for it.
// Returns each rank's status.
std::vector<Status> RunRanksAsThreads(
    ThreadGroup& group, const std::function<Status(int64_t rank, Communicator& comm)>& fn);

// The communicator of this process over a joined rendezvous (taken over:
// its connections carry the all-reduces). `timeout` bounds each call.
std::unique_ptr<Communicator> MakeTcpCommunicator(
    std::unique_ptr<Rendezvous> rendezvous,
    std::chrono::milliseconds timeout = kDefaultDistTimeout);

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_COMMUNICATOR_H_
