// The TCP rendezvous with ranks as threads on loopback: success, a rank that
// never comes, rank 0 that is not there, a rank that dies, bad hellos. Every
// failure ends every rank with one clear message, within the (short) timeout.
#include "runtime/rendezvous.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <functional>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace gptc::rt {
namespace {

using std::chrono::milliseconds;

RendezvousOptions Options(int port, int64_t rank, int64_t world, milliseconds timeout) {
  RendezvousOptions o;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.rank = rank;
  o.world_size = world;
  o.timeout = timeout;
  o.retry_interval = milliseconds(20);
  return o;
}

int FreePort() {
  StatusOr<int> port = PickFreePort();
  EXPECT_TRUE(port.ok()) << port.status().message();
  return port.ok() ? *port : 0;
}

// Runs fn(rank) for `ranks` on threads; returns each rank's status message ("ok").
std::vector<std::string> OnThreads(const std::vector<int64_t>& ranks,
                                   const std::function<Status(int64_t)>& fn) {
  std::vector<std::string> out(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      Status s = fn(ranks[i]);
      out[i] = s.ok() ? "ok" : s.message();
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(RendezvousTest, ThreeRanksShareABlobAndMeetAtABarrier) {
  const int port = FreePort();
  std::vector<std::byte> id(128);
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<std::byte>(i * 7);
  std::vector<std::vector<std::byte>> got(3);
  std::vector<std::string> status = OnThreads({0, 1, 2}, [&](int64_t rank) -> Status {
    ASSIGN_OR_RETURN(std::unique_ptr<Rendezvous> r,
                     Rendezvous::Join(Options(port, rank, 3, milliseconds(10000))));
    ASSIGN_OR_RETURN(got[rank], r->Broadcast(rank == 0 ? std::span<const std::byte>(id)
                                                       : std::span<const std::byte>()));
    RETURN_IF_ERROR(r->Barrier());
    return r->Barrier();
  });
  EXPECT_EQ(status, (std::vector<std::string>{"ok", "ok", "ok"}));
  for (const auto& g : got) EXPECT_EQ(g, id);
}

TEST(RendezvousTest, OneRankIsNoRendezvous) {
  StatusOr<std::unique_ptr<Rendezvous>> r = Rendezvous::Join(Options(1, 0, 1, milliseconds(1)));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE((*r)->Barrier().ok());
}

TEST(RendezvousTest, ARankThatNeverComesTimesOutEveryRank) {
  const int port = FreePort();
  const auto start = Clock::now();
  std::vector<std::string> status = OnThreads({0, 1}, [&](int64_t rank) -> Status {
    return Rendezvous::Join(Options(port, rank, 3, milliseconds(1000))).status();
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(seconds, 3.0);
  // The time waited is measured: 1.0 s, or a little more on a busy machine.
  EXPECT_TRUE(
      std::regex_search(status[0], std::regex("rendezvous: rank 0 waited 1\\.[0-9] s on port ")))
      << status[0];
  EXPECT_TRUE(Contains(status[0], "but rank 2 of 3 never joined (timed out)")) << status[0];
  // Rank 1 was connected: rank 0 tells it why, and it fails with rank 0's
  // line (the one that names the culprit); it does not wait on its own.
  EXPECT_EQ(status[1], status[0]);
}

// Note [waiting lines]: rank 0 names the ranks still missing, rank 1 says
// it waits for the others once joined, and for rank 0 before.
TEST(RendezvousTest, WaitingRanksSayWhomTheyWaitFor) {
  const int port = FreePort();
  std::mutex mu;
  std::vector<std::vector<std::string>> lines(2);
  std::vector<std::string> status = OnThreads({0, 1}, [&](int64_t rank) -> Status {
    RendezvousOptions o = Options(port, rank, 3, milliseconds(1000));
    o.progress_interval = milliseconds(200);
    o.progress = [&, rank](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu);
      lines[rank].push_back(line);
    };
    // Rank 1 comes late, so rank 0 first waits for both.
    if (rank == 1) std::this_thread::sleep_for(milliseconds(300));
    return Rendezvous::Join(o).status();
  });
  EXPECT_TRUE(Contains(status[0], "but rank 2 of 3 never joined")) << status[0];
  const std::string at = fmt::format(" at 127.0.0.1:{} \\(\\d\\.\\d s of 1\\.0 s\\)", port);
  ASSERT_GE(lines[0].size(), 3u);
  EXPECT_TRUE(
      std::regex_match(lines[0].front(), std::regex("rank 0: waiting for ranks 1, 2 of 3" + at)))
      << lines[0].front();
  EXPECT_TRUE(std::regex_match(lines[0].back(), std::regex("rank 0: waiting for rank 2 of 3" + at)))
      << lines[0].back();
  ASSERT_GE(lines[1].size(), 2u);
  EXPECT_TRUE(std::regex_match(
      lines[1].back(), std::regex("rank 1: waiting for the other ranks to join rank 0" + at)))
      << lines[1].back();

  // Before rank 0 listens: the last connection error too.
  const int port2 = FreePort();
  std::vector<std::string> alone;
  RendezvousOptions o = Options(port2, 1, 2, milliseconds(700));
  o.progress_interval = milliseconds(200);
  o.progress = [&](const std::string& line) { alone.push_back(line); };
  EXPECT_FALSE(Rendezvous::Join(o).ok());
  ASSERT_GE(alone.size(), 2u);
  EXPECT_TRUE(std::regex_match(
      alone[0], std::regex(fmt::format("rank 1: waiting for rank 0 at 127.0.0.1:{} "
                                       "\\(0\\.\\d s of 0\\.7 s; Connection refused\\)",
                                       port2))))
      << alone[0];
}

TEST(RendezvousTest, NoWaitingLinesWithAZeroInterval) {
  const int port = FreePort();
  std::vector<std::string> lines;
  RendezvousOptions o = Options(port, 0, 2, milliseconds(300));
  o.progress_interval = milliseconds(0);
  o.progress = [&](const std::string& line) { lines.push_back(line); };
  EXPECT_FALSE(Rendezvous::Join(o).ok());
  EXPECT_TRUE(lines.empty()) << lines[0];
}

TEST(RendezvousTest, NoRankZeroTimesOutNamingTheAddress) {
  const int port = FreePort();
  const auto start = Clock::now();
  Status s = Rendezvous::Join(Options(port, 1, 2, milliseconds(500))).status();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.0);
  EXPECT_EQ(s.message(), fmt::format("rendezvous: rank 1 could not reach rank 0 at 127.0.0.1:{} "
                                     "within 0.5 s (Connection refused)",
                                     port));
}

TEST(RendezvousTest, ARankThatDiesEndsTheBarrierOnEveryRank) {
  const int port = FreePort();
  std::vector<std::string> status = OnThreads({0, 1, 2}, [&](int64_t rank) -> Status {
    ASSIGN_OR_RETURN(std::unique_ptr<Rendezvous> r,
                     Rendezvous::Join(Options(port, rank, 3, milliseconds(5000))));
    if (rank == 2) return Status::Ok();  // gone: its sockets close, as when a process dies
    return r->Barrier();
  });
  EXPECT_EQ(status[2], "ok");
  EXPECT_TRUE(Contains(status[0], "barrier: rank 0 awaiting rank 2 (127.0.0.1:")) << status[0];
  EXPECT_TRUE(Contains(status[0], "): connection closed")) << status[0];
  // Rank 1 hears it from rank 0 (not a timeout of its own).
  EXPECT_TRUE(Contains(status[1], "barrier: rank 1 awaiting rank 0 (127.0.0.1:")) << status[1];
  EXPECT_TRUE(Contains(status[1], "rank 0 awaiting rank 2")) << status[1];
  EXPECT_FALSE(Contains(status[1], "timed out")) << status[1];
}

TEST(RendezvousTest, AbortReachesEveryRank) {
  const int port = FreePort();
  std::vector<std::string> status = OnThreads({0, 1, 2}, [&](int64_t rank) -> Status {
    ASSIGN_OR_RETURN(std::unique_ptr<Rendezvous> r,
                     Rendezvous::Join(Options(port, rank, 3, milliseconds(5000))));
    if (rank == 1) {
      r->Abort(Error("out of memory"));
      return Status::Ok();
    }
    return r->Barrier();
  });
  EXPECT_TRUE(Contains(status[0], "rank 1 aborted: out of memory")) << status[0];
  EXPECT_TRUE(Contains(status[2], "rank 1 aborted: out of memory")) << status[2];
}

// A rank that fails before joining (gptrun: no GPU for it) ends the ranks
// already waiting at once, not at their timeout.
TEST(RendezvousTest, AbortBeforeJoinEndsTheWaitingRanks) {
  const int port = FreePort();
  const auto start = Clock::now();
  std::vector<std::string> status = OnThreads({0, 1, 2}, [&](int64_t rank) -> Status {
    if (rank == 1) {
      std::this_thread::sleep_for(milliseconds(300));  // the others are waiting by now
      Rendezvous::AbortBeforeJoin(Options(port, 1, 3, milliseconds(5000)), Error("no GPU"));
      return Status::Ok();
    }
    return Rendezvous::Join(Options(port, rank, 3, milliseconds(5000))).status();
  });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 3.0);
  EXPECT_EQ(status[0], "rank 1 aborted: no GPU");
  EXPECT_TRUE(Contains(status[2], "rank 1 aborted: no GPU")) << status[2];

  // Rank 0 that cannot come answers the ranks that connect meanwhile.
  const int port2 = FreePort();
  status = OnThreads({0, 1}, [&](int64_t rank) -> Status {
    if (rank == 0) {
      Rendezvous::AbortBeforeJoin(Options(port2, 0, 2, milliseconds(5000)), Error("no GPU"));
      return Status::Ok();
    }
    return Rendezvous::Join(Options(port2, 1, 2, milliseconds(5000))).status();
  });
  EXPECT_TRUE(Contains(status[1], "rank 0 aborted: no GPU")) << status[1];
}

TEST(RendezvousTest, BadHellosFailTheRendezvous) {
  // Rank 1 thinks the world has 3 ranks, rank 0 says 2.
  const int port = FreePort();
  std::vector<std::string> status = OnThreads({0, 1}, [&](int64_t rank) -> Status {
    return Rendezvous::Join(Options(port, rank, rank == 0 ? 2 : 3, milliseconds(3000))).status();
  });
  EXPECT_TRUE(Contains(status[0], "was launched with world size 3, rank 0 with 2")) << status[0];
  EXPECT_TRUE(Contains(status[1], "was launched with world size 3, rank 0 with 2")) << status[1];

  // Two processes both claim rank 1.
  const int port2 = FreePort();
  status = OnThreads({0, 1, 1}, [&](int64_t rank) -> Status {
    return Rendezvous::Join(Options(port2, rank, 3, milliseconds(3000))).status();
  });
  EXPECT_TRUE(Contains(status[0], "rendezvous: rank 1 joined twice (from 127.0.0.1:")) << status[0];
}

// Note [agreement]: the first rank whose fields differ from rank 0's fails
// every rank at once with one line naming it and the fields; a field empty
// on either side is not compared.
TEST(RendezvousTest, RanksThatDisagreeFailEveryRankNamingTheField) {
  const int port = FreePort();
  const auto start = Clock::now();
  std::vector<std::string> status = OnThreads({0, 1, 2}, [&](int64_t rank) -> Status {
    RendezvousOptions o = Options(port, rank, 3, milliseconds(20000));
    o.agreed = {{"--lr", rank == 2 ? "0.002" : "0.001"},
                {"the start", rank == 1 ? "" : "step 1"},
                {"--seed", "5"}};
    if (rank == 2) std::this_thread::sleep_for(milliseconds(200));  // rank 1 is in by now
    return Rendezvous::Join(o).status();
  });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
  const std::string want =
      "rendezvous: rank 2 disagrees with rank 0: --lr is '0.002' on rank 2 but '0.001' on rank 0 "
      "(every rank must run the same artifact with the same training flags and data)";
  for (const std::string& s : status) EXPECT_EQ(s, want);

  // A rank that connects after the failure hears it too, at once.
  const int port2 = FreePort();
  status = OnThreads({0, 1, 2}, [&](int64_t rank) -> Status {
    RendezvousOptions o = Options(port2, rank, 3, milliseconds(20000));
    o.agreed = {{"--seed", rank == 1 ? "6" : "5"}};
    if (rank == 2) std::this_thread::sleep_for(milliseconds(600));
    return Rendezvous::Join(o).status();
  });
  for (const std::string& s : status) {
    EXPECT_TRUE(s.starts_with("rendezvous: rank 1 disagrees with rank 0: --seed is '6' on rank 1 "
                              "but '5' on rank 0"))
        << s;
  }

  // Agreeing fields join as before.
  const int port3 = FreePort();
  status = OnThreads({0, 1}, [&](int64_t rank) -> Status {
    RendezvousOptions o = Options(port3, rank, 2, milliseconds(5000));
    o.agreed = {{"--lr", "0.001"}, {"the start", rank == 0 ? "step 1" : ""}};
    return Rendezvous::Join(o).status();
  });
  EXPECT_EQ(status, (std::vector<std::string>{"ok", "ok"}));
}

// Note [greeting]: another program on MASTER_PORT is never taken for rank 0:
// a banner, bytes that are no frame, silence or a closed connection are named
// with the process that listens there.
TEST(RendezvousTest, AStrangerOnMasterPortIsNamed) {
  for (const std::string& banner : {std::string("SSH-2.0-OpenSSH_9.2\r\n"), std::string("GP"),
                                   std::string(""), std::string("close")}) {
    const int port = FreePort();
    StatusOr<Socket> listener = Listen(port);
    ASSERT_TRUE(listener.ok()) << listener.status().message();
    std::thread stranger([&] {
      StatusOr<Socket> c = Accept(*listener, Clock::now() + std::chrono::seconds(5), nullptr);
      if (!c.ok()) return;
      if (banner == "close") return;  // closes at once
      if (!banner.empty()) {
        c->SendAll(std::as_bytes(std::span(banner)), Clock::now() + std::chrono::seconds(1)).ok();
      }
      std::this_thread::sleep_for(milliseconds(3500));
    });
    const Status s = Rendezvous::Join(Options(port, 1, 2, milliseconds(1000))).status();
    stranger.join();
    const std::string& m = s.message();
    EXPECT_TRUE(m.starts_with(fmt::format("rendezvous: rank 1: 127.0.0.1:{} is not a gptrun rank "
                                          "0: ",
                                          port)))
        << m;
    const std::string said = banner == "close" ? "it closed the connection without a word"
                             : banner.empty()  ? "it said nothing in"
                             : banner == "GP"  ? "it sent 'GP' and then nothing in"
                                               : "it answered 'SSH-2.0-OpenSSH";
    EXPECT_NE(m.find(said), std::string::npos) << m;
    EXPECT_NE(m.find(fmt::format("(pid {}) listens there", getpid())), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// Rank 0 whose port another program holds names it.
TEST(RendezvousTest, ATakenPortNamesItsHolder) {
  const int port = FreePort();
  StatusOr<Socket> holder = Listen(port);
  ASSERT_TRUE(holder.ok());
  const Status s = Rendezvous::Join(Options(port, 0, 2, milliseconds(1000))).status();
  EXPECT_EQ(s.message(),
            fmt::format("rendezvous: rank 0: cannot listen on port {}: Address already in use; "
                        "runtime_tests (pid {}) listens there",
                        port, getpid()));
}

}  // namespace
}  // namespace gptc::rt
