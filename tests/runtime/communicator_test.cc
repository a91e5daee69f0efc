// The CPU communicators: ranks as threads (ThreadGroup) and as TCP peers
// over a rendezvous (here threads on loopback too), bit-identical results in
// rank order, and failures that end every rank instead of hanging.
#include "runtime/communicator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/rendezvous.h"

namespace gptc::rt {
namespace {

using std::chrono::milliseconds;

// Values whose float sums depend on the order: a different order would show.
std::vector<float> RankData(int64_t rank, size_t n) {
  std::mt19937 rng(static_cast<uint32_t>(rank) + 17);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = u(rng) * std::pow(10.0f, static_cast<float>(i % 9) - 4);
  return v;
}

// ((x0 + x1) + x2) + ... in float, as the communicators promise.
std::vector<float> RankOrderSum(int64_t world, size_t n) {
  std::vector<float> acc = RankData(0, n);
  for (int64_t r = 1; r < world; ++r) {
    std::vector<float> x = RankData(r, n);
    for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + x[i];
  }
  return acc;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::vector<std::string> Messages(const std::vector<Status>& statuses) {
  std::vector<std::string> out;
  for (const Status& s : statuses) out.push_back(s.ok() ? "ok" : s.message());
  return out;
}

TEST(ThreadGroupTest, SumsInRankOrderBitIdenticallyOnEveryRank) {
  constexpr int64_t kWorld = 3;
  constexpr size_t kN = 1001;  // not a multiple of the world: uneven chunks
  ThreadGroup group(kWorld);
  std::vector<std::vector<float>> data(kWorld);
  std::vector<std::vector<double>> maxes(kWorld);
  std::vector<Status> s = RunRanksAsThreads(group, [&](int64_t rank, Communicator& comm) {
    EXPECT_EQ(comm.rank(), rank);
    EXPECT_EQ(comm.world_size(), kWorld);
    data[rank] = RankData(rank, kN);
    RETURN_IF_ERROR(comm.AllReduce(ir::ReduceKind::kSum, std::span(data[rank])));
    maxes[rank] = {static_cast<double>(rank), -static_cast<double>(rank)};
    RETURN_IF_ERROR(comm.AllReduce(ir::ReduceKind::kMax, std::span(maxes[rank])));
    return comm.Barrier();
  });
  EXPECT_EQ(Messages(s), (std::vector<std::string>(kWorld, "ok")));
  const std::vector<float> want = RankOrderSum(kWorld, kN);
  for (int64_t r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(SameBits(data[r], want)) << "rank " << r;
    EXPECT_EQ(maxes[r], (std::vector<double>{2, 0})) << "rank " << r;
  }
}

// A reduce-scatter's shards are the all-reduce's slices bit for bit, and an
// all-gather of them gives the whole back on every rank.
TEST(ThreadGroupTest, ReduceScatterAndAllGatherAreSlicesOfTheRankOrderSum) {
  constexpr int64_t kWorld = 3;
  constexpr size_t kN = 999, kShard = kN / kWorld;
  ThreadGroup group(kWorld);
  std::vector<std::vector<float>> shards(kWorld), gathered(kWorld);
  std::vector<std::vector<double>> maxes(kWorld);
  std::vector<Status> s = RunRanksAsThreads(group, [&](int64_t rank, Communicator& comm) {
    const std::vector<float> in = RankData(rank, kN);
    shards[rank].resize(kShard);
    RETURN_IF_ERROR(
        comm.ReduceScatter(ir::ReduceKind::kSum, std::span(in), std::span(shards[rank])));
    gathered[rank].resize(kN);
    RETURN_IF_ERROR(
        comm.AllGather(std::span<const float>(shards[rank]), std::span(gathered[rank])));
    const auto d = static_cast<double>(rank);
    const std::vector<double> mine = {d, -d, 1, 2 - d, 0, 0};
    maxes[rank].resize(2);
    return comm.ReduceScatter(ir::ReduceKind::kMax, std::span(mine), std::span(maxes[rank]));
  });
  EXPECT_EQ(Messages(s), (std::vector<std::string>(kWorld, "ok")));
  const std::vector<float> sum = RankOrderSum(kWorld, kN);
  for (int64_t r = 0; r < kWorld; ++r) {
    std::vector<float> slice(sum.begin() + r * kShard, sum.begin() + (r + 1) * kShard);
    EXPECT_TRUE(SameBits(shards[r], slice)) << "rank " << r;
    EXPECT_TRUE(SameBits(gathered[r], sum)) << "rank " << r;
  }
  EXPECT_EQ(maxes[0], (std::vector<double>{2, 0}));
  EXPECT_EQ(maxes[1], (std::vector<double>{1, 2}));
  EXPECT_EQ(maxes[2], (std::vector<double>{0, 0}));
}

TEST(ThreadGroupTest, MismatchedCollectivesFailEveryRank) {
  ThreadGroup group(2);
  std::vector<Status> s = RunRanksAsThreads(group, [&](int64_t rank, Communicator& comm) {
    std::vector<float> in(4, 1.0f), out(rank == 0 ? 2 : 8);
    if (rank == 0)
      return comm.ReduceScatter(ir::ReduceKind::kSum, std::span<const float>(in), std::span(out));
    return comm.AllGather(std::span<const float>(in), std::span(out));
  });
  const std::string want =
      "reduce-scatter: rank 0 asked for a reduce-scatter (sum) of 4 4-byte values, rank 1 for "
      "an all-gather of 4 4-byte values";
  EXPECT_EQ(Messages(s), (std::vector<std::string>{want, want}));
}

TEST(ThreadGroupTest, AReduceScatterThatDoesNotDivideFails) {
  ThreadGroup group(2, milliseconds(60000));
  std::vector<Status> s = RunRanksAsThreads(group, [&](int64_t rank, Communicator& comm) {
    std::vector<float> in(5, 1.0f), out(2);
    return comm.ReduceScatter(ir::ReduceKind::kSum, std::span<const float>(in), std::span(out));
  });
  const std::string want =
      "reduce-scatter of 5 values over 2 ranks: expected 5 divisible by 2 and a shard of 2, got 2";
  EXPECT_TRUE(Contains(s[0].message(), want)) << s[0].message();
  EXPECT_TRUE(Contains(s[1].message(), want)) << s[1].message();
}

TEST(ThreadGroupTest, MismatchedCallsFailEveryRank) {
  ThreadGroup group(2);
  std::vector<Status> s = RunRanksAsThreads(group, [&](int64_t rank, Communicator& comm) {
    std::vector<float> v(rank == 0 ? 4 : 5);
    return comm.AllReduce(ir::ReduceKind::kSum, std::span(v));
  });
  const std::string want =
      "all-reduce: rank 0 asked for a sum of 4 4-byte values, rank 1 for a sum of 5 4-byte "
      "values";
  EXPECT_EQ(Messages(s), (std::vector<std::string>{want, want}));
}

TEST(ThreadGroupTest, AFailingRankEndsTheOthersAtOnce) {
  ThreadGroup group(3, milliseconds(60000));
  const auto start = Clock::now();
  std::vector<Status> s = RunRanksAsThreads(group, [&](int64_t rank, Communicator& comm) {
    if (rank == 1) return Error("evaluation failed: out of memory");
    std::vector<float> v(8, 1.0f);
    return comm.AllReduce(ir::ReduceKind::kSum, std::span(v));
  });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  EXPECT_EQ(Messages(s),
            (std::vector<std::string>{"rank 1 aborted: evaluation failed: out of memory",
                                      "evaluation failed: out of memory",
                                      "rank 1 aborted: evaluation failed: out of memory"}));
}

TEST(ThreadGroupTest, ARankThatNeverComesTimesOut) {
  ThreadGroup group(3, milliseconds(200));
  std::vector<Status> s = RunRanksAsThreads(group, [&](int64_t rank, Communicator& comm) {
    if (rank == 2) return Status::Ok();  // never joins the all-reduce
    std::vector<float> v(8, 1.0f);
    return comm.AllReduce(ir::ReduceKind::kSum, std::span(v));
  });
  // Whichever rank's clock runs out first reports; the other gets the same message.
  EXPECT_TRUE(Contains(s[0].message(), "all-reduce: rank ")) << s[0].message();
  EXPECT_TRUE(Contains(s[0].message(), " waited 0.2 s for rank 2 (of 3)")) << s[0].message();
  EXPECT_EQ(s[1].message(), s[0].message());
  EXPECT_TRUE(s[2].ok());
}

// Joins a rendezvous of `world` ranks on threads and runs fn(rank, comm) with
// the TCP communicator.
std::vector<std::string> OnTcp(int64_t world, milliseconds timeout,
                               const std::function<Status(int64_t, Communicator&)>& fn) {
  StatusOr<int> port = PickFreePort();
  EXPECT_TRUE(port.ok());
  std::vector<std::string> out(world);
  std::vector<std::thread> threads;
  for (int64_t rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      RendezvousOptions o;
      o.master_port = *port;
      o.rank = rank;
      o.world_size = world;
      o.timeout = timeout;
      o.retry_interval = milliseconds(20);
      StatusOr<std::unique_ptr<Rendezvous>> r = Rendezvous::Join(o);
      Status s = r.status();
      if (s.ok()) {
        std::unique_ptr<Communicator> comm = MakeTcpCommunicator(std::move(r).value(), timeout);
        s = fn(rank, *comm);
        if (!s.ok()) comm->Abort(s);
      }
      out[rank] = s.ok() ? "ok" : s.message();
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

TEST(TcpCommunicatorTest, EqualsTheThreadGroupBitForBit) {
  constexpr int64_t kWorld = 3;
  constexpr size_t kN = 100003;  // several TCP segments
  std::vector<std::vector<float>> data(kWorld);
  std::vector<std::vector<double>> doubles(kWorld);
  std::vector<std::string> s =
      OnTcp(kWorld, milliseconds(20000), [&](int64_t rank, Communicator& comm) {
        EXPECT_EQ(comm.rank(), rank);
        data[rank] = RankData(rank, kN);
        RETURN_IF_ERROR(comm.AllReduce(ir::ReduceKind::kSum, std::span(data[rank])));
        doubles[rank] = {0.1 * static_cast<double>(rank), 1e16, -1e16};
        RETURN_IF_ERROR(comm.AllReduce(ir::ReduceKind::kSum, std::span(doubles[rank])));
        return comm.Barrier();
      });
  EXPECT_EQ(s, (std::vector<std::string>(kWorld, "ok")));
  // The thread group on the same inputs.
  ThreadGroup group(kWorld);
  std::vector<std::vector<float>> threaded(kWorld);
  RunRanksAsThreads(group, [&](int64_t rank, Communicator& comm) {
    threaded[rank] = RankData(rank, kN);
    return comm.AllReduce(ir::ReduceKind::kSum, std::span(threaded[rank]));
  });
  for (int64_t r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(SameBits(data[r], threaded[r])) << "rank " << r;
    EXPECT_TRUE(SameBits(data[r], RankOrderSum(kWorld, kN))) << "rank " << r;
    EXPECT_EQ(doubles[r], doubles[0]);
  }
  EXPECT_EQ(doubles[0][0], (0.0 + 0.1) + 0.2);
}

TEST(TcpCommunicatorTest, ReduceScatterAndAllGatherEqualTheThreadGroupBitForBit) {
  constexpr int64_t kWorld = 3;
  constexpr size_t kN = 30003, kShard = kN / kWorld;  // several TCP segments
  auto run = [&](std::vector<std::vector<float>>& shards, std::vector<std::vector<float>>& whole,
                 int64_t rank, Communicator& comm) {
    const std::vector<float> in = RankData(rank, kN);
    shards[rank].resize(kShard);
    RETURN_IF_ERROR(
        comm.ReduceScatter(ir::ReduceKind::kSum, std::span(in), std::span(shards[rank])));
    whole[rank].resize(kN);
    return comm.AllGather(std::span<const float>(shards[rank]), std::span(whole[rank]));
  };
  std::vector<std::vector<float>> shards(kWorld), whole(kWorld);
  std::vector<std::string> s =
      OnTcp(kWorld, milliseconds(20000),
            [&](int64_t rank, Communicator& comm) { return run(shards, whole, rank, comm); });
  EXPECT_EQ(s, (std::vector<std::string>(kWorld, "ok")));
  ThreadGroup group(kWorld);
  std::vector<std::vector<float>> t_shards(kWorld), t_whole(kWorld);
  RunRanksAsThreads(
      group, [&](int64_t rank, Communicator& comm) { return run(t_shards, t_whole, rank, comm); });
  const std::vector<float> sum = RankOrderSum(kWorld, kN);
  for (int64_t r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(SameBits(shards[r], t_shards[r])) << "rank " << r;
    EXPECT_TRUE(SameBits(whole[r], sum)) << "rank " << r;
  }
}

TEST(TcpCommunicatorTest, MismatchedCollectivesFailEveryRank) {
  std::vector<std::string> s = OnTcp(2, milliseconds(10000), [&](int64_t rank, Communicator& comm) {
    std::vector<float> in(4, 1.0f), out(rank == 0 ? 2 : 8);
    if (rank == 0)
      return comm.ReduceScatter(ir::ReduceKind::kSum, std::span<const float>(in), std::span(out));
    return comm.AllGather(std::span<const float>(in), std::span(out));
  });
  EXPECT_TRUE(Contains(s[0], "reduce-scatter: rank 0 awaiting rank 1 (127.0.0.1:")) << s[0];
  EXPECT_TRUE(Contains(s[0],
                       "it asked for an all-gather of 4 4-byte values, rank 0 for a "
                       "reduce-scatter (sum) of 4 4-byte values"))
      << s[0];
  EXPECT_TRUE(Contains(s[1], "all-gather: rank 1 awaiting the result from rank 0")) << s[1];
}

TEST(TcpCommunicatorTest, ARankThatDiesEndsTheAllGatherOnEveryRank) {
  const auto start = Clock::now();
  std::vector<std::string> s = OnTcp(3, milliseconds(10000), [&](int64_t rank, Communicator& comm) {
    if (rank == 2) return Status::Ok();  // exits: its connection closes
    std::vector<double> in(4, 1.0), out(12);
    return comm.AllGather(std::span<const double>(in), std::span(out));
  });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  EXPECT_TRUE(Contains(s[0], "all-gather: rank 0 awaiting rank 2 (127.0.0.1:")) << s[0];
  EXPECT_TRUE(Contains(s[1], "all-gather: rank 1 awaiting the result from rank 0")) << s[1];
  EXPECT_TRUE(Contains(s[1], "rank 0 awaiting rank 2")) << s[1];
}

TEST(TcpCommunicatorTest, ARankThatDiesEndsTheAllReduceOnEveryRank) {
  const auto start = Clock::now();
  std::vector<std::string> s = OnTcp(3, milliseconds(10000), [&](int64_t rank, Communicator& comm) {
    if (rank == 2) return Status::Ok();  // exits: its connection closes
    std::vector<float> v(16, 1.0f);
    return comm.AllReduce(ir::ReduceKind::kSum, std::span(v));
  });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  EXPECT_TRUE(Contains(s[0], "all-reduce: rank 0 awaiting rank 2 (127.0.0.1:")) << s[0];
  EXPECT_TRUE(Contains(s[0], "connection closed")) << s[0];
  EXPECT_TRUE(Contains(s[1], "all-reduce: rank 1 awaiting the result from rank 0")) << s[1];
  EXPECT_TRUE(Contains(s[1], "rank 0 awaiting rank 2")) << s[1];
}

TEST(TcpCommunicatorTest, AFailingRankAbortsEveryRank) {
  std::vector<std::string> s = OnTcp(3, milliseconds(10000), [&](int64_t rank, Communicator& comm) {
    if (rank == 1) return Error("step 7: loss is NaN");
    std::vector<double> v(4, 1.0);
    return comm.AllReduce(ir::ReduceKind::kSum, std::span(v));
  });
  EXPECT_EQ(s[1], "step 7: loss is NaN");
  EXPECT_TRUE(Contains(s[0], "rank 1 aborted: step 7: loss is NaN")) << s[0];
  EXPECT_TRUE(Contains(s[2], "rank 1 aborted: step 7: loss is NaN")) << s[2];
}

TEST(TcpCommunicatorTest, ASilentRankTimesOut) {
  std::vector<std::string> s = OnTcp(2, milliseconds(300), [&](int64_t rank, Communicator& comm) {
    if (rank == 1) {
      std::this_thread::sleep_for(milliseconds(1500));  // alive but never sends
      return Status::Ok();
    }
    std::vector<float> v(4, 1.0f);
    return comm.AllReduce(ir::ReduceKind::kSum, std::span(v));
  });
  EXPECT_TRUE(Contains(s[0], "all-reduce: rank 0 awaiting rank 1 (127.0.0.1:")) << s[0];
  EXPECT_TRUE(Contains(s[0], "timed out after 0.3 s")) << s[0];
}

}  // namespace
}  // namespace gptc::rt
