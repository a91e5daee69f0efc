#include "runtime/watchdog.h"

#include <poll.h>

#include <utility>

namespace gptc::rt {

namespace {

// How long a frame that poll() said is there may take to arrive whole.
constexpr std::chrono::seconds kFrameTime{1};

}  // namespace

Watchdog::Watchdog(Options options, FailureHandler on_failure)
    : options_(options), on_failure_(std::move(on_failure)), thread_([this] { Run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::Watch(std::unique_ptr<Rendezvous> rendezvous, Probe probe) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    rendezvous_ = std::move(rendezvous);
    probe_ = std::move(probe);
    done_.assign(static_cast<size_t>(rendezvous_->world_size()), false);
  }
  cv_.notify_all();
}

void Watchdog::SetProbe(Probe probe) {
  std::lock_guard<std::mutex> lock(mu_);
  probe_ = std::move(probe);
}

void Watchdog::Begin(std::string what) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = std::move(what);
  phase_start_ = Clock::now();
}

void Watchdog::End() {
  std::lock_guard<std::mutex> lock(mu_);
  phase_.reset();
}

void Watchdog::Abort(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_ || stop_) return;
    failed_ = true;
    failure_ = why;
    stop_ = true;
    if (rendezvous_ != nullptr) rendezvous_->Abort(why);
  }
  cv_.notify_all();
}

Status Watchdog::Finish() {
  std::unique_lock<std::mutex> lock(mu_);
  if (failed_) return failure_.value_or(Error("rank {}: the group failed", options_.rank));
  phase_.reset();
  if (rendezvous_ == nullptr || rendezvous_->world_size() == 1) {
    stop_ = true;
    cv_.notify_all();
    return Status::Ok();
  }
  finishing_ = true;
  finish_start_ = Clock::now();
  cv_.notify_all();
  cv_.wait(lock, [&] { return finished_ || failed_; });
  if (failed_) return *failure_;
  return Status::Ok();
}

void Watchdog::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    // The connections to watch: rank 0 watches every other rank, the others rank 0.
    std::vector<pollfd> fds;
    std::vector<int> ranks;
    if (rendezvous_ != nullptr && !rendezvous_->failed()) {
      std::vector<Socket>& peers = rendezvous_->peers();
      for (size_t r = 0; r < peers.size(); ++r) {
        if (!peers[r].valid()) continue;
        fds.push_back(pollfd{.fd = peers[r].fd(), .events = POLLIN, .revents = 0});
        ranks.push_back(static_cast<int>(r));
      }
    }
    if (fds.empty()) {
      cv_.wait_for(lock, options_.poll);
    } else {
      // Unlocked, so Begin/End/Abort/Finish never wait for a poll period.
      lock.unlock();
      ::poll(fds.data(), fds.size(), static_cast<int>(options_.poll.count()));
      lock.lock();
    }
    if (stop_) break;
    std::vector<int> readable;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) readable.push_back(ranks[i]);
    }
    std::optional<Status> failure = CheckLocked(readable);
    if (finished_) {
      cv_.notify_all();
      break;
    }
    if (failure.has_value()) {
      const bool finishing = finishing_;
      cv_.notify_all();
      if (!finishing) {
        // Unlocked: gptrun's handler exits the process, a test's records it.
        lock.unlock();
        on_failure_(*failure);
        lock.lock();
      }
      break;
    }
  }
}

// Step 1 of CheckLocked: reads a frame from each peer in `readable_ranks`;
// false when one says the run failed (then failure_ says why).
bool Watchdog::ReadPeersLocked(const std::vector<int>& readable_ranks) {
  const int64_t rank = options_.rank;
  for (int r : readable_ranks) {
    Socket& peer = rendezvous_->peers()[r];
    StatusOr<std::vector<std::byte>> frame =
        RecvFrame(peer, FrameType::kBarrier, 0, Clock::now() + kFrameTime);
    const int64_t from = rank == 0 ? r : 0;
    if (frame.ok()) {
      if (rank == 0) {
        done_[r] = true;
      } else if (finishing_ && sent_done_) {
        finished_ = true;
      } else {
        FailLocked(Error("data parallel: rank {}: protocol error: rank 0 ended the run while "
                         "this rank was still training",
                         rank),
                   /*found_here=*/true);
        return false;
      }
      continue;
    }
    if (frame.status().code() == StatusCode::kUnavailable) {
      // A rank that said it was done may go; there is nothing left to tell it.
      if (rank == 0 && done_[r]) {
        peer.Close();
        continue;
      }
      FailLocked(Error("data parallel: {} went away (its process exited or its connection "
                       "broke); rank {} noticed",
                       rendezvous_->PeerName(from), rank),
                 /*found_here=*/false);
      return false;
    }
    // An abort frame (its text names the rank that failed) or a broken frame.
    FailLocked(frame.status(), /*found_here=*/false);
    return false;
  }
  return true;
}

std::optional<Status> Watchdog::CheckLocked(const std::vector<int>& readable_ranks) {
  const auto now = Clock::now();
  const int64_t rank = options_.rank;
  // 1. What the peers sent: a done or a release (barrier frames), an abort, or EOF.
  if (!ReadPeersLocked(readable_ranks)) return failure_;
  if (finished_) return std::nullopt;
  // 2. Errors the communicator raised on its own (a peer died mid-collective).
  if (probe_) {
    if (Status s = probe_(); !s.ok()) {
      FailLocked(s, /*found_here=*/true);
      return failure_;
    }
  }
  // 3. A phase of the main thread that does not end: hung in a collective.
  if (phase_.has_value() && now - phase_start_ > options_.timeout) {
    FailLocked(Error("rank {}: {} has not finished after {} (the GPTC_DIST_TIMEOUT limit): a "
                     "peer is hung or gone",
                     rank, *phase_, FormatSeconds(now - phase_start_)),
               /*found_here=*/true);
    return failure_;
  }
  // 4. The clean end.
  if (!finishing_) return std::nullopt;
  return FinishLocked(now);
}

// Step 4 of CheckLocked, once the run is finishing: another rank tells rank
// 0 it is done and waits for its release; rank 0 releases every rank once
// all are done. Either fails when the other side takes past the deadline.
std::optional<Status> Watchdog::FinishLocked(Clock::time_point now) {
  const int64_t rank = options_.rank;
  std::vector<Socket>& peers = rendezvous_->peers();
  if (rank != 0) {
    if (!sent_done_) {
      Status sent = SendFrame(peers[0], FrameType::kBarrier, {}, now + kFrameTime);
      if (!sent.ok()) {
        FailLocked(sent.WithPrefix(fmt::format("data parallel: rank {} telling {} it is done", rank,
                                               rendezvous_->PeerName(0))),
                   /*found_here=*/false);
        return failure_;
      }
      sent_done_ = true;
    }
    if (now > rendezvous_->Deadline(finish_start_)) {
      FailLocked(Error("data parallel: rank {} finished, but {} did not end the run within {}",
                       rank, rendezvous_->PeerName(0), FormatSeconds(now - finish_start_)),
                 /*found_here=*/true);
      return failure_;
    }
    return std::nullopt;
  }
  std::vector<int64_t> waiting;
  for (size_t r = 1; r < done_.size(); ++r) {
    if (!done_[r]) waiting.push_back(static_cast<int64_t>(r));
  }
  if (waiting.empty()) {
    for (size_t r = 1; r < peers.size(); ++r) {
      // Best effort: a rank that went after its done needs no release.
      if (peers[r].valid()) SendFrame(peers[r], FrameType::kBarrier, {}, now + kFrameTime).ok();
    }
    finished_ = true;
    return std::nullopt;
  }
  if (now > rendezvous_->Deadline(finish_start_)) {
    FailLocked(Error("data parallel: rank 0 finished, but rank{} {} did not within {}",
                     waiting.size() == 1 ? "" : "s", FormatRanks(waiting),
                     FormatSeconds(now - finish_start_)),
               /*found_here=*/true);
    return failure_;
  }
  return std::nullopt;
}

void Watchdog::FailLocked(const Status& failure, bool found_here) {
  failed_ = true;
  failure_ = failure;
  if (rendezvous_ == nullptr) return;
  // Rank 0 relays to every other rank either way; another rank reports its
  // own failure to rank 0, and needs to tell no one what it heard from rank 0.
  if (found_here) {
    rendezvous_->Abort(failure);
  } else {
    rendezvous_->Fail(failure).ok();
  }
}

}  // namespace gptc::rt
