#include "runtime/communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/rendezvous.h"

namespace gptc::rt {

namespace {

template <typename T>
T Combine(ir::ReduceKind kind, T a, T b) {
  return kind == ir::ReduceKind::kSum ? a + b : std::max(a, b);
}

std::string_view KindName(ir::ReduceKind kind) {
  return kind == ir::ReduceKind::kSum ? "sum" : "max";
}

// What one rank asked an all-reduce for.
struct Request {
  ir::ReduceKind kind = ir::ReduceKind::kSum;
  int64_t element_bytes = 0;
  int64_t count = 0;
  void* data = nullptr;

  bool SameOp(const Request& o) const {
    return kind == o.kind && element_bytes == o.element_bytes && count == o.count;
  }
  std::string ToString() const {
    return fmt::format("{} of {} {}-byte values", KindName(kind), count, element_bytes);
  }
};

}  // namespace

// Note [thread all-reduce]: every rank posts its buffer and meets the others
// at a barrier; then rank r combines elements [r*n/N, (r+1)*n/N) of all the
// buffers in rank order and writes the result into every buffer (each
// element is read and written by one thread only); a second barrier keeps
// every buffer alive and untouched until all ranks are done with it.
struct ThreadGroup::State {
  explicit State(int64_t world, std::chrono::milliseconds timeout)
      : world(world), timeout(timeout), arrived(world, false), requests(world) {}

  // Waits until all ranks have arrived (Note [failure]).
  Status Arrive(int64_t rank, std::string_view what) {
    std::unique_lock<std::mutex> lock(mu);
    if (aborted) return Error("{}", abort_message);
    const uint64_t my_generation = generation;
    arrived[rank] = true;
    if (++count == world) {
      count = 0;
      std::fill(arrived.begin(), arrived.end(), false);
      ++generation;
      cv.notify_all();
      return Status::Ok();
    }
    const auto start = Clock::now();
    const auto deadline = start + timeout;
    while (generation == my_generation && !aborted) {
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout && generation == my_generation &&
          !aborted) {
        std::vector<int64_t> missing;
        for (int64_t r = 0; r < world; ++r) {
          if (!arrived[r]) missing.push_back(r);
        }
        aborted = true;
        abort_message = fmt::format("{}: rank {} waited {} for rank{} {} (of {})", what, rank,
                                    FormatSeconds(Clock::now() - start),
                                    missing.size() == 1 ? "" : "s", FormatRanks(missing), world);
        cv.notify_all();
      }
    }
    if (generation != my_generation) return Status::Ok();
    return Error("{}", abort_message);
  }

  void Abort(int64_t rank, const Status& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (aborted) return;
    aborted = true;
    abort_message = fmt::format("rank {} aborted: {}", rank, why.message());
    cv.notify_all();
  }

  // Checks that every rank asked for the same operation (under the lock, so
  // the first rank to see a mismatch fails the group before anyone moves on).
  Status CheckRequests() {
    std::lock_guard<std::mutex> lock(mu);
    if (aborted) return Error("{}", abort_message);
    for (int64_t r = 1; r < world; ++r) {
      if (!requests[r].SameOp(requests[0])) {
        aborted = true;
        abort_message = fmt::format("all-reduce: rank 0 asked for a {}, rank {} for a {}",
                                    requests[0].ToString(), r, requests[r].ToString());
        return Error("{}", abort_message);
      }
    }
    return Status::Ok();
  }

  const int64_t world;
  const std::chrono::milliseconds timeout;
  std::mutex mu;
  std::condition_variable cv;
  int64_t count = 0;
  uint64_t generation = 0;
  std::vector<bool> arrived;
  bool aborted = false;
  std::string abort_message;
  std::vector<Request> requests;  // written by each rank before its first barrier
};

namespace {

class ThreadRank : public Communicator {
 public:
  ThreadRank(ThreadGroup::State* state, int64_t rank) : state_(state), rank_(rank) {}
  int64_t rank() const override { return rank_; }
  int64_t world_size() const override { return state_->world; }
  Status AllReduce(ir::ReduceKind kind, std::span<float> data) override { return Run(kind, data); }
  Status AllReduce(ir::ReduceKind kind, std::span<double> data) override { return Run(kind, data); }
  Status Barrier() override { return state_->Arrive(rank_, "barrier"); }
  void Abort(const Status& why) override { state_->Abort(rank_, why); }

 private:
  template <typename T>
  Status Run(ir::ReduceKind kind, std::span<T> data) {
    const int64_t world = state_->world;
    if (world == 1) return Status::Ok();
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->requests[rank_] = Request{kind, static_cast<int64_t>(sizeof(T)),
                                        static_cast<int64_t>(data.size()), data.data()};
    }
    RETURN_IF_ERROR(state_->Arrive(rank_, "all-reduce"));
    RETURN_IF_ERROR(state_->CheckRequests());
    std::vector<T*> buffers(world);
    for (int64_t r = 0; r < world; ++r) buffers[r] = static_cast<T*>(state_->requests[r].data);
    const int64_t n = static_cast<int64_t>(data.size());
    const int64_t begin = n * rank_ / world, end = n * (rank_ + 1) / world;
    for (int64_t i = begin; i < end; ++i) {
      T acc = buffers[0][i];
      for (int64_t r = 1; r < world; ++r) acc = Combine(kind, acc, buffers[r][i]);
      for (int64_t r = 0; r < world; ++r) buffers[r][i] = acc;
    }
    return state_->Arrive(rank_, "all-reduce");
  }

  ThreadGroup::State* state_;
  int64_t rank_;
};

// Payload prefix of a kData frame.
struct DataHeader {
  uint32_t kind = 0;
  uint32_t element_bytes = 0;
  uint64_t count = 0;
};

class TcpCommunicator : public Communicator {
 public:
  TcpCommunicator(std::unique_ptr<Rendezvous> rendezvous, std::chrono::milliseconds timeout)
      : rdv_(std::move(rendezvous)), timeout_(timeout) {}
  int64_t rank() const override { return rdv_->rank(); }
  int64_t world_size() const override { return rdv_->world_size(); }
  Status AllReduce(ir::ReduceKind kind, std::span<float> data) override { return Run(kind, data); }
  Status AllReduce(ir::ReduceKind kind, std::span<double> data) override { return Run(kind, data); }
  Status Barrier() override { return rdv_->Barrier(); }
  void Abort(const Status& why) override { rdv_->Abort(why); }

 private:
  Status TimedOut(const Status& s, Clock::time_point start) const {
    if (s.code() == StatusCode::kTimedOut) {
      return TimedOutError("timed out after {}", FormatSeconds(Clock::now() - start));
    }
    return s;
  }

  template <typename T>
  Status Run(ir::ReduceKind kind, std::span<T> data) {
    if (rdv_->failed()) return Error("all-reduce: the group already failed");
    if (world_size() == 1) return Status::Ok();
    const auto start = Clock::now();
    const auto deadline =
        start + timeout_ + (rank() == 0 ? Clock::duration(0) : Rendezvous::kPeerGrace);
    const DataHeader mine{static_cast<uint32_t>(kind), sizeof(T), data.size()};
    std::span<std::byte> bytes = std::as_writable_bytes(data);
    std::vector<Socket>& peers = rdv_->peers();
    if (rank() != 0) {
      std::vector<std::byte> frame(sizeof(mine) + bytes.size());
      std::memcpy(frame.data(), &mine, sizeof(mine));
      std::memcpy(frame.data() + sizeof(mine), bytes.data(), bytes.size());
      Status s = SendFrame(peers[0], FrameType::kData, frame, deadline);
      DataHeader back;
      if (s.ok()) {
        s = RecvFrameInto(peers[0], FrameType::kData, std::as_writable_bytes(std::span(&back, 1)),
                          bytes, deadline);
      }
      if (!s.ok()) {
        return rdv_->Fail(TimedOut(s, start).WithPrefix(fmt::format(
            "all-reduce: rank {} awaiting the result from {}", rank(), rdv_->PeerName(0))));
      }
      return Status::Ok();
    }
    // Rank 0 combines in rank order, then sends the result back to everyone.
    std::vector<T> incoming(data.size());
    for (int64_t r = 1; r < world_size(); ++r) {
      DataHeader theirs;
      Status s =
          RecvFrameInto(peers[r], FrameType::kData, std::as_writable_bytes(std::span(&theirs, 1)),
                        std::as_writable_bytes(std::span(incoming)), deadline);
      if (s.ok() && (theirs.kind != mine.kind || theirs.element_bytes != mine.element_bytes ||
                     theirs.count != mine.count)) {
        s = Error("it asked for a {} of {} {}-byte values, rank 0 for a {} of {}",
                  KindName(static_cast<ir::ReduceKind>(theirs.kind)), theirs.count,
                  theirs.element_bytes, KindName(kind), data.size());
      }
      if (!s.ok()) {
        return rdv_->Fail(TimedOut(s, start).WithPrefix(
            fmt::format("all-reduce: rank 0 awaiting {}", rdv_->PeerName(r))));
      }
      for (size_t i = 0; i < data.size(); ++i) data[i] = Combine(kind, data[i], incoming[i]);
    }
    std::vector<std::byte> frame(sizeof(mine) + bytes.size());
    std::memcpy(frame.data(), &mine, sizeof(mine));
    std::memcpy(frame.data() + sizeof(mine), bytes.data(), bytes.size());
    for (int64_t r = 1; r < world_size(); ++r) {
      Status s = SendFrame(peers[r], FrameType::kData, frame, deadline);
      if (!s.ok()) {
        return rdv_->Fail(TimedOut(s, start).WithPrefix(
            fmt::format("all-reduce: rank 0 sending the result to {}", rdv_->PeerName(r))));
      }
    }
    return Status::Ok();
  }

  std::unique_ptr<Rendezvous> rdv_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

ThreadGroup::ThreadGroup(int64_t world_size, std::chrono::milliseconds timeout)
    : state_(std::make_shared<State>(world_size, timeout)) {
  for (int64_t r = 0; r < world_size; ++r) {
    ranks_.push_back(std::make_unique<ThreadRank>(state_.get(), r));
  }
}

ThreadGroup::~ThreadGroup() = default;

std::vector<Status> RunRanksAsThreads(
    ThreadGroup& group, const std::function<Status(int64_t rank, Communicator& comm)>& fn) {
  const int64_t world = group.world_size();
  std::vector<Status> statuses(world, Status::Ok());
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      statuses[r] = fn(r, group.rank(r));
      if (!statuses[r].ok()) group.rank(r).Abort(statuses[r]);
    });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

std::unique_ptr<Communicator> MakeTcpCommunicator(std::unique_ptr<Rendezvous> rendezvous,
                                                  std::chrono::milliseconds timeout) {
  return std::make_unique<TcpCommunicator>(std::move(rendezvous), timeout);
}

}  // namespace gptc::rt
