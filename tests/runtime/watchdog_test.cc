// The watchdog of NCCL runs, with ranks as threads over a loopback rendezvous
// and short timeouts: a clean end while rank 0 is still busy, a rank that
// goes away, an asynchronous error, a hung phase, an abort of the main
// thread. Each failure must reach every rank, naming the rank at fault.
#include "runtime/watchdog.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace gptc::rt {
namespace {

using std::chrono::milliseconds;

// What one rank's on_failure received, waited for with a bound.
class Failures {
 public:
  void Record(const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    messages_.push_back(s.message());
    cv_.notify_all();
  }
  // The first failure, or "" if none came within `wait`.
  std::string Wait(milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, wait, [&] { return !messages_.empty(); });
    return messages_.empty() ? "" : messages_.front();
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> messages_;
};

// `world` ranks, each with a joined rendezvous handed to its watchdog.
struct Group {
  Group(int64_t world, milliseconds timeout, std::vector<Watchdog::Probe> probes = {})
      : failures(world) {
    StatusOr<int> port = PickFreePort();
    EXPECT_TRUE(port.ok()) << port.status().message();
    std::vector<std::unique_ptr<Rendezvous>> joined(world);
    std::vector<std::thread> threads;
    for (int64_t r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        RendezvousOptions o{.master_port = port.ok() ? *port : 0,
                            .rank = r,
                            .world_size = world,
                            .timeout = milliseconds(10000),
                            .retry_interval = milliseconds(20)};
        StatusOr<std::unique_ptr<Rendezvous>> rdv = Rendezvous::Join(o);
        EXPECT_TRUE(rdv.ok()) << rdv.status().message();
        if (rdv.ok()) joined[r] = std::move(rdv).value();
      });
    }
    for (std::thread& t : threads) t.join();
    for (int64_t r = 0; r < world; ++r) {
      dogs.push_back(std::make_unique<Watchdog>(
          Watchdog::Options{.rank = r, .timeout = timeout, .poll = milliseconds(10)},
          [this, r](const Status& s) { failures[r].Record(s); }));
      dogs.back()->Watch(std::move(joined[r]),
                         r < static_cast<int64_t>(probes.size()) ? probes[r] : nullptr);
    }
  }
  std::vector<Failures> failures;
  std::vector<std::unique_ptr<Watchdog>> dogs;
};

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(WatchdogTest, RanksThatFinishEarlyWaitForRankZero) {
  Group g(3, milliseconds(5000));
  std::vector<std::string> status(3);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      g.dogs[r]->Begin("step 1");
      g.dogs[r]->End();
      // Rank 0 validates and writes its checkpoint while the others are done.
      if (r == 0) std::this_thread::sleep_for(milliseconds(300));
      Status s = g.dogs[r]->Finish();
      status[r] = s.ok() ? "ok" : s.message();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(status, (std::vector<std::string>{"ok", "ok", "ok"}));
  g.dogs.clear();  // closing after a clean end is no failure
  for (Failures& f : g.failures) EXPECT_EQ(f.count(), 0u);
}

TEST(WatchdogTest, ARankThatGoesAwayEndsEveryRank) {
  Group g(3, milliseconds(20000));
  for (auto& dog : g.dogs) dog->Begin("step 7");
  const auto start = Clock::now();
  g.dogs[2].reset();  // the process of rank 2 exits: its connection closes
  const std::string at0 = g.failures[0].Wait(milliseconds(5000));
  const std::string at1 = g.failures[1].Wait(milliseconds(5000));
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  EXPECT_TRUE(Contains(at0, "rank 2 (") && Contains(at0, "went away")) << at0;
  EXPECT_TRUE(Contains(at1, "rank 2 (") && Contains(at1, "went away")) << at1;
}

TEST(WatchdogTest, AnAsynchronousErrorIsRelayedToEveryRank) {
  bool raise = false;
  std::mutex mu;
  Watchdog::Probe quiet = [] { return Status::Ok(); };
  Watchdog::Probe broken = [&]() -> Status {
    std::lock_guard<std::mutex> lock(mu);
    if (raise) return Error("rank 1 of 3: NCCL (asynchronous error): remote process exited");
    return Status::Ok();
  };
  Group g(3, milliseconds(20000), {quiet, broken, quiet});
  {
    std::lock_guard<std::mutex> lock(mu);
    raise = true;
  }
  const std::string at1 = g.failures[1].Wait(milliseconds(5000));
  const std::string at0 = g.failures[0].Wait(milliseconds(5000));
  const std::string at2 = g.failures[2].Wait(milliseconds(5000));
  EXPECT_TRUE(Contains(at1, "remote process exited")) << at1;
  EXPECT_TRUE(Contains(at0, "rank 1 aborted: rank 1 of 3: NCCL")) << at0;
  EXPECT_TRUE(Contains(at2, "rank 1 aborted: rank 1 of 3: NCCL")) << at2;
}

TEST(WatchdogTest, APhaseThatNeverEndsTimesOut) {
  Group g(2, milliseconds(300));
  const auto start = Clock::now();
  g.dogs[1]->Begin("step 12");  // e.g. stuck in an all-reduce whose peer hangs
  const std::string at1 = g.failures[1].Wait(milliseconds(5000));
  const std::string at0 = g.failures[0].Wait(milliseconds(5000));
  EXPECT_GE(Clock::now() - start, milliseconds(300));
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  EXPECT_TRUE(Contains(at1, "rank 1: step 12 has not finished after")) << at1;
  EXPECT_TRUE(Contains(at0, "rank 1 aborted: rank 1: step 12")) << at0;
}

TEST(WatchdogTest, BeforeWatchItStillBoundsAPhase) {
  Failures failures;
  Watchdog dog({.rank = 3, .timeout = milliseconds(100), .poll = milliseconds(10)},
               [&](const Status& s) { failures.Record(s); });
  dog.Begin("NCCL init");
  const std::string got = failures.Wait(milliseconds(5000));
  EXPECT_TRUE(Contains(got, "rank 3: NCCL init has not finished")) << got;
}

TEST(WatchdogTest, APhaseThatEndsInTimeIsNoFailure) {
  Failures failures;
  Watchdog dog({.rank = 0, .timeout = milliseconds(200), .poll = milliseconds(10)},
               [&](const Status& s) { failures.Record(s); });
  for (int i = 0; i < 5; ++i) {
    dog.Begin("step");
    std::this_thread::sleep_for(milliseconds(60));
    dog.End();
  }
  std::this_thread::sleep_for(milliseconds(300));  // idle between phases is fine
  EXPECT_EQ(failures.count(), 0u);
  EXPECT_TRUE(dog.Finish().ok());
}

TEST(WatchdogTest, AnAbortOfTheMainThreadReachesThePeers) {
  Group g(3, milliseconds(20000));
  g.dogs[1]->Abort(Error("step 4: thunk fusion.17: an illegal memory access"));
  const std::string at0 = g.failures[0].Wait(milliseconds(5000));
  const std::string at2 = g.failures[2].Wait(milliseconds(5000));
  EXPECT_TRUE(Contains(at0, "rank 1 aborted: step 4: thunk fusion.17")) << at0;
  EXPECT_TRUE(Contains(at2, "rank 1 aborted: step 4: thunk fusion.17")) << at2;
  EXPECT_EQ(g.failures[1].count(), 0u);  // the main thread reports its own error
  // Finish after the failure returns it instead of waiting.
  Status s = g.dogs[0]->Finish();
  EXPECT_TRUE(Contains(s.message(), "rank 1 aborted")) << s.message();
}

TEST(WatchdogTest, AFailureWhileFinishingIsFinishsError) {
  Group g(2, milliseconds(20000));
  std::string at1;
  std::thread waiter([&] { at1 = g.dogs[1]->Finish().message(); });
  std::this_thread::sleep_for(milliseconds(100));
  g.dogs[0]->Abort(Error("checkpoint: disk full"));
  waiter.join();
  EXPECT_TRUE(Contains(at1, "rank 0 aborted: checkpoint: disk full")) << at1;
  EXPECT_EQ(g.failures[1].count(), 0u);
}

}  // namespace
}  // namespace gptc::rt
