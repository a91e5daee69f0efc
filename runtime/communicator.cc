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

// The collective a call asks for (its number travels in kData frames).
enum class Op : uint16_t { kAllReduce = 0, kReduceScatter = 1, kAllGather = 2 };

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "all-reduce";
    case Op::kReduceScatter:
      return "reduce-scatter";
    case Op::kAllGather:
      return "all-gather";
  }
  return "collective";
}

// "a sum of 4 4-byte values", "a reduce-scatter (max) of ...", "an all-gather of ...".
std::string Describe(Op op, ir::ReduceKind kind, uint64_t count, uint64_t element_bytes) {
  std::string what = "an unknown collective";
  if (op == Op::kAllReduce) what = fmt::format("a {}", KindName(kind));
  if (op == Op::kReduceScatter) what = fmt::format("a reduce-scatter ({})", KindName(kind));
  if (op == Op::kAllGather) what = "an all-gather";
  return fmt::format("{} of {} {}-byte values", what, count, element_bytes);
}

// The lengths Collective promises: a reduce-scatter's input divides into
// world shards of out's length, an all-gather's output holds world inputs.
Status CheckLengths(Op op, int64_t world, size_t in, size_t out) {
  const auto w = static_cast<size_t>(world);
  if (op == Op::kReduceScatter && (in % w != 0 || out != in / w)) {
    return Error(
        "reduce-scatter of {} values over {} ranks: expected {} divisible by {} and a "
        "shard of {}, got {}",
        in, world, in, world, in / w, out);
  }
  if (op == Op::kAllGather && out != in * w) {
    return Error("all-gather of {} values over {} ranks: the result holds {}, expected {}", in,
                 world, out, in * w);
  }
  return Status::Ok();
}

// What one rank asked a collective for: `count` input values at `in`, its
// result at `out` (the same buffer for an all-reduce).
struct Request {
  Op op = Op::kAllReduce;
  ir::ReduceKind kind = ir::ReduceKind::kSum;
  int64_t element_bytes = 0;
  int64_t count = 0;
  const void* in = nullptr;
  void* out = nullptr;

  bool SameOp(const Request& o) const {
    return op == o.op && (op == Op::kAllGather || kind == o.kind) &&
           element_bytes == o.element_bytes && count == o.count;
  }
  std::string ToString() const { return Describe(op, kind, count, element_bytes); }
};

}  // namespace

// Note [thread all-reduce]: every rank posts its buffers and meets the others
// at a barrier; then for an all-reduce rank r combines elements [r*n/N,
// (r+1)*n/N) of all the buffers in rank order and writes the result into
// every buffer (each element is read and written by one thread only); for a
// reduce-scatter each rank combines its own shard of the inputs into its
// output, and for an all-gather copies every rank's input into its output,
// only reading the others'. A second barrier keeps every buffer alive and
// untouched until all ranks are done with it.
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
        abort_message =
            fmt::format("{}: rank 0 asked for {}, rank {} for {}", OpName(requests[0].op),
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

// eval::Collective's entry points, each as one call of the derived
// communicator's Run(op, kind, in, out) for its storage type.
template <typename Derived>
class RunsCollectives : public Communicator {
 public:
  Status AllReduce(ir::ReduceKind kind, std::span<float> data) override {
    return self().Run(Op::kAllReduce, kind, std::span<const float>(data), data);
  }
  Status AllReduce(ir::ReduceKind kind, std::span<double> data) override {
    return self().Run(Op::kAllReduce, kind, std::span<const double>(data), data);
  }
  Status ReduceScatter(ir::ReduceKind kind, std::span<const float> in,
                       std::span<float> out) override {
    return self().Run(Op::kReduceScatter, kind, in, out);
  }
  Status ReduceScatter(ir::ReduceKind kind, std::span<const double> in,
                       std::span<double> out) override {
    return self().Run(Op::kReduceScatter, kind, in, out);
  }
  Status AllGather(std::span<const float> in, std::span<float> out) override {
    return self().Run(Op::kAllGather, ir::ReduceKind::kSum, in, out);
  }
  Status AllGather(std::span<const double> in, std::span<double> out) override {
    return self().Run(Op::kAllGather, ir::ReduceKind::kSum, in, out);
  }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

class ThreadRank : public RunsCollectives<ThreadRank> {
 public:
  ThreadRank(ThreadGroup::State* state, int64_t rank) : state_(state), rank_(rank) {}
  int64_t rank() const override { return rank_; }
  int64_t world_size() const override { return state_->world; }
  Status Barrier() override { return state_->Arrive(rank_, "barrier"); }
  void Abort(const Status& why) override { state_->Abort(rank_, why); }

 private:
  friend class RunsCollectives<ThreadRank>;

  // Note [thread all-reduce].
  template <typename T>
  Status Run(Op op, ir::ReduceKind kind, std::span<const T> in, std::span<T> out) {
    const int64_t world = state_->world;
    if (Status s = CheckLengths(op, world, in.size(), out.size()); !s.ok()) {
      state_->Abort(rank_, s);
      return s;
    }
    if (world == 1) {
      if (in.data() != out.data()) std::copy(in.begin(), in.end(), out.begin());
      return Status::Ok();
    }
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->requests[rank_] = Request{
          op,        kind,      static_cast<int64_t>(sizeof(T)), static_cast<int64_t>(in.size()),
          in.data(), out.data()};
    }
    RETURN_IF_ERROR(state_->Arrive(rank_, OpName(op)));
    RETURN_IF_ERROR(state_->CheckRequests());
    std::vector<const T*> ins(world);
    std::vector<T*> outs(world);
    for (int64_t r = 0; r < world; ++r) {
      ins[r] = static_cast<const T*>(state_->requests[r].in);
      outs[r] = static_cast<T*>(state_->requests[r].out);
    }
    const int64_t n = static_cast<int64_t>(in.size());
    if (op == Op::kAllGather) {
      for (int64_t r = 0; r < world; ++r) std::copy(ins[r], ins[r] + n, out.data() + r * n);
    } else {
      // All-reduce: this rank's part of every buffer; reduce-scatter: its shard, into its own.
      const bool scatter = op == Op::kReduceScatter;
      const int64_t begin = n * rank_ / world, end = n * (rank_ + 1) / world;
      for (int64_t i = begin; i < end; ++i) {
        T acc = ins[0][i];
        for (int64_t r = 1; r < world; ++r) acc = Combine(kind, acc, ins[r][i]);
        if (scatter) {
          out[i - begin] = acc;
        } else {
          for (int64_t r = 0; r < world; ++r) outs[r][i] = acc;
        }
      }
    }
    return state_->Arrive(rank_, OpName(op));
  }

  ThreadGroup::State* state_;
  int64_t rank_;
};

// Payload prefix of a kData frame (an all-reduce's `op` is 0).
struct DataHeader {
  uint16_t kind = 0;
  uint16_t op = 0;
  uint32_t element_bytes = 0;
  uint64_t count = 0;
};

// Note [tcp collectives]: a star through rank 0. Every other rank sends its
// input and waits for its result; rank 0 receives the inputs in rank order,
// combines them in that order into the whole reduction (all-reduce,
// reduce-scatter) or places them (all-gather), and sends each rank its
// result: the whole (all-reduce, all-gather) or its shard (reduce-scatter).
class TcpCommunicator : public RunsCollectives<TcpCommunicator> {
 public:
  TcpCommunicator(std::unique_ptr<Rendezvous> rendezvous, std::chrono::milliseconds timeout)
      : rdv_(std::move(rendezvous)), timeout_(timeout) {}
  int64_t rank() const override { return rdv_->rank(); }
  int64_t world_size() const override { return rdv_->world_size(); }
  Status Barrier() override { return rdv_->Barrier(); }
  void Abort(const Status& why) override { rdv_->Abort(why); }

 private:
  friend class RunsCollectives<TcpCommunicator>;

  Status TimedOut(const Status& s, Clock::time_point start) const {
    if (s.code() == StatusCode::kTimedOut) {
      return TimedOutError("timed out after {}", FormatSeconds(Clock::now() - start));
    }
    return s;
  }

  template <typename T>
  Status Run(Op op, ir::ReduceKind kind, std::span<const T> in, std::span<T> out) {
    if (rdv_->failed()) return Error("{}: the group already failed", OpName(op));
    RETURN_IF_ERROR(CheckLengths(op, world_size(), in.size(), out.size()));
    if (world_size() == 1) {
      if (in.data() != out.data()) std::copy(in.begin(), in.end(), out.begin());
      return Status::Ok();
    }
    start_ = Clock::now();
    deadline_ = start_ + timeout_ + (rank() == 0 ? Clock::duration(0) : Rendezvous::kPeerGrace);
    const DataHeader mine{static_cast<uint16_t>(kind), static_cast<uint16_t>(op), sizeof(T),
                          in.size()};
    if (rank() != 0) {
      RETURN_IF_ERROR(Send(0, mine, std::as_bytes(in)));
      DataHeader back;
      Status s = RecvFrameInto(rdv_->peers()[0], FrameType::kData,
                               std::as_writable_bytes(std::span(&back, 1)),
                               std::as_writable_bytes(out), deadline_);
      if (!s.ok()) {
        return rdv_->Fail(TimedOut(s, start_).WithPrefix(fmt::format(
            "{}: rank {} awaiting the result from {}", OpName(op), rank(), rdv_->PeerName(0))));
      }
      return Status::Ok();
    }
    return Lead(mine, kind, in, out);
  }

  // Rank 0's part (Note [tcp collectives]).
  template <typename T>
  Status Lead(const DataHeader& mine, ir::ReduceKind kind, std::span<const T> in,
              std::span<T> out) {
    const auto op = static_cast<Op>(mine.op);
    const size_t n = in.size();
    // The whole reduction: in place for an all-reduce, aside for a reduce-scatter.
    std::vector<T> whole;
    std::span<T> acc = out;
    if (op == Op::kReduceScatter) {
      whole.assign(in.begin(), in.end());
      acc = std::span<T>(whole);
    } else if (op == Op::kAllGather) {
      std::copy(in.begin(), in.end(), out.begin());
    }
    std::vector<T> incoming(op == Op::kAllGather ? 0 : n);
    for (int64_t r = 1; r < world_size(); ++r) {
      std::span<T> into = op == Op::kAllGather ? out.subspan(static_cast<size_t>(r) * n, n)
                                               : std::span<T>(incoming);
      RETURN_IF_ERROR(Receive(r, mine, std::as_writable_bytes(into)));
      if (op == Op::kAllGather) continue;
      for (size_t i = 0; i < n; ++i) acc[i] = Combine(kind, acc[i], incoming[i]);
    }
    if (op != Op::kReduceScatter) {
      for (int64_t r = 1; r < world_size(); ++r) RETURN_IF_ERROR(Send(r, mine, std::as_bytes(out)));
      return Status::Ok();
    }
    const size_t shard = out.size();
    DataHeader theirs = mine;
    theirs.count = shard;
    for (int64_t r = 1; r < world_size(); ++r) {
      RETURN_IF_ERROR(
          Send(r, theirs, std::as_bytes(acc.subspan(static_cast<size_t>(r) * shard, shard))));
    }
    std::copy(acc.begin(), acc.begin() + static_cast<int64_t>(shard), out.begin());
    return Status::Ok();
  }

  // Rank 0 receives rank r's input into `into`, checking that r asked for the same.
  Status Receive(int64_t r, const DataHeader& mine, std::span<std::byte> into) {
    DataHeader theirs;
    Status s = RecvFrameInto(rdv_->peers()[r], FrameType::kData,
                             std::as_writable_bytes(std::span(&theirs, 1)), into, deadline_);
    const auto kind = static_cast<ir::ReduceKind>(mine.kind);
    const auto op = static_cast<Op>(mine.op);
    if (s.ok() && (theirs.op != mine.op || (op != Op::kAllGather && theirs.kind != mine.kind) ||
                   theirs.element_bytes != mine.element_bytes || theirs.count != mine.count)) {
      s = Error("it asked for {}, rank 0 for {}",
                Describe(static_cast<Op>(theirs.op), static_cast<ir::ReduceKind>(theirs.kind),
                         theirs.count, theirs.element_bytes),
                Describe(op, kind, mine.count, mine.element_bytes));
    }
    if (!s.ok()) {
      return rdv_->Fail(TimedOut(s, start_).WithPrefix(
          fmt::format("{}: rank 0 awaiting {}", OpName(op), rdv_->PeerName(r))));
    }
    return Status::Ok();
  }

  // Sends `header` and `values` to rank `to` (rank 0's result, or a rank's input to rank 0).
  Status Send(int64_t to, const DataHeader& header, std::span<const std::byte> values) {
    std::vector<std::byte> frame(sizeof(header) + values.size());
    std::memcpy(frame.data(), &header, sizeof(header));
    std::memcpy(frame.data() + sizeof(header), values.data(), values.size());
    Status s = SendFrame(rdv_->peers()[to], FrameType::kData, frame, deadline_);
    if (s.ok()) return s;
    const std::string_view op = OpName(static_cast<Op>(header.op));
    const std::string what =
        rank() == 0
            ? fmt::format("{}: rank 0 sending the result to {}", op, rdv_->PeerName(to))
            : fmt::format("{}: rank {} awaiting the result from {}", op, rank(), rdv_->PeerName(0));
    return rdv_->Fail(TimedOut(s, start_).WithPrefix(what));
  }

  std::unique_ptr<Rendezvous> rdv_;
  std::chrono::milliseconds timeout_;
  Clock::time_point start_, deadline_;  // of the call in progress
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
