// The evaluator's reduce-scatter and all-gather as ranks of a real group
// (Note [collectives] in compiler/eval/evaluator.h): threads (ThreadGroup)
// at 2 and 3 ranks and TCP peers on loopback. A reduce-scatter then an
// all-gather of a sum is the all-reduce bit for bit on every rank, each
// rank's shard is its slice of that sum, and an all-gather places bf16
// shards in rank order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compiler/eval/evaluator.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/module.h"
#include "compiler/support/float_bits.h"
#include "runtime/communicator.h"
#include "runtime/rendezvous.h"

namespace gptc::rt {
namespace {

using eval::Literal;
using ir::DType;
using ir::Shape;

template <typename T>
T Must(StatusOr<T> s) {
  EXPECT_TRUE(s.ok()) << s.status().message();
  return std::move(s).value();
}

// Values whose sums depend on the order of the ranks, rounded to `dtype`.
std::vector<double> RankValues(int64_t rank, int64_t n, DType dtype) {
  std::mt19937 rng(static_cast<uint32_t>(rank) * 7 + 3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) {
    float x = u(rng) * std::pow(10.0f, static_cast<float>(i % 7) - 3);
    v[i] = dtype == DType::kBF16 ? RoundToBF16(x) : x;
  }
  return v;
}

bool SameBits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// main(x: dtype[n]) = (all-reduce(x), reduce-scatter(x), all-gather(reduce-scatter(x))).
std::unique_ptr<ir::Module> ShardAndGather(DType dtype, int64_t n, int64_t world) {
  auto module = std::make_unique<ir::Module>("shard_and_gather");
  ir::Computation* main = module->AddComputation("main");
  module->set_entry(main);
  ir::Builder b(main);
  ir::Instruction* x = Must(b.Parameter(0, Shape(dtype, {n}), "x"));
  ir::Instruction* ar = Must(b.AllReduce(x, ir::ReduceKind::kSum));
  ir::Instruction* rs = Must(b.ReduceScatter(x, ir::ReduceKind::kSum, world));
  ir::Instruction* ag = Must(b.AllGather(rs, world));
  main->set_root(Must(b.Tuple({ar, rs, ag})));
  return module;
}

struct RankResult {
  std::vector<double> all_reduce, shard, gathered;
};

// Evaluates ShardAndGather as rank `rank` of `comm`'s group.
Status EvalRank(const ir::Module& module, DType dtype, int64_t n, eval::Precision precision,
                Communicator& comm, RankResult& out) {
  std::vector<Literal> args = {Literal{Shape(dtype, {n}), RankValues(comm.rank(), n, dtype), {}}};
  ASSIGN_OR_RETURN(Literal result,
                   eval::Evaluate(module, args, {.precision = precision, .collective = &comm}));
  out = {result.elements[0].values, result.elements[1].values, result.elements[2].values};
  return Status::Ok();
}

// Every rank: the gathered shards equal the all-reduce bit for bit, and the
// shard is its slice of it; all ranks agree.
void ExpectShardsOfTheAllReduce(const std::vector<RankResult>& results, int64_t n) {
  const int64_t world = static_cast<int64_t>(results.size());
  const int64_t shard = n / world;
  for (int64_t r = 0; r < world; ++r) {
    const RankResult& got = results[r];
    EXPECT_TRUE(SameBits(got.gathered, got.all_reduce)) << "rank " << r;
    EXPECT_TRUE(SameBits(got.all_reduce, results[0].all_reduce)) << "rank " << r;
    std::vector<double> slice(got.all_reduce.begin() + r * shard,
                              got.all_reduce.begin() + (r + 1) * shard);
    EXPECT_TRUE(SameBits(got.shard, slice)) << "rank " << r;
  }
}

struct Case {
  int64_t world;
  DType dtype;
  eval::Precision precision;
};

class EvalCollectivesTest : public ::testing::TestWithParam<Case> {};

TEST_P(EvalCollectivesTest, ReduceScatterThenAllGatherIsTheAllReduce) {
  const Case c = GetParam();
  constexpr int64_t kN = 1002;  // divides by 2 and 3
  std::unique_ptr<ir::Module> module = ShardAndGather(c.dtype, kN, c.world);
  ThreadGroup group(c.world);
  std::vector<RankResult> results(c.world);
  std::vector<Status> s = RunRanksAsThreads(group, [&](int64_t rank, Communicator& comm) {
    return EvalRank(*module, c.dtype, kN, c.precision, comm, results[rank]);
  });
  for (int64_t r = 0; r < c.world; ++r) ASSERT_TRUE(s[r].ok()) << s[r].message();
  ExpectShardsOfTheAllReduce(results, kN);
  // The sum really is ((x0 + x1) + x2) in the storage type, rounded to the dtype.
  std::vector<std::vector<double>> x;
  for (int64_t r = 0; r < c.world; ++r) x.push_back(RankValues(r, kN, c.dtype));
  for (int64_t i : {int64_t{0}, int64_t{1}, kN - 1}) {
    double want = 0;
    if (c.precision == eval::Precision::kF32) {
      float acc = static_cast<float>(x[0][i]);
      for (int64_t r = 1; r < c.world; ++r) acc = acc + static_cast<float>(x[r][i]);
      want = c.dtype == DType::kBF16 ? RoundToBF16(acc) : acc;
    } else {
      want = x[0][i];
      for (int64_t r = 1; r < c.world; ++r) want = want + x[r][i];
      if (c.dtype == DType::kBF16) want = RoundToBF16(static_cast<float>(want));
    }
    EXPECT_EQ(results[0].all_reduce[i], want) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, EvalCollectivesTest,
                         ::testing::Values(Case{2, DType::kF32, eval::Precision::kF32},
                                           Case{3, DType::kF32, eval::Precision::kF32},
                                           Case{3, DType::kF32, eval::Precision::kF64},
                                           Case{2, DType::kBF16, eval::Precision::kF32},
                                           Case{3, DType::kBF16, eval::Precision::kF32}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return fmt::format(
                               "{}Ranks{}{}", info.param.world, ir::DTypeName(info.param.dtype),
                               info.param.precision == eval::Precision::kF32 ? "" : "InF64");
                         });

// An all-gather of bf16 shards: each rank's values, in rank order, unchanged.
TEST(EvalCollectivesTest, AllGatherPlacesBf16ShardsInRankOrder) {
  constexpr int64_t kWorld = 3, kM = 5;
  auto module = std::make_unique<ir::Module>("gather");
  ir::Computation* main = module->AddComputation("main");
  module->set_entry(main);
  ir::Builder b(main);
  ir::Instruction* x = Must(b.Parameter(0, Shape(DType::kBF16, {kM}), "x"));
  main->set_root(Must(b.AllGather(x, kWorld)));
  ThreadGroup group(kWorld);
  std::vector<std::vector<double>> got(kWorld);
  std::vector<Status> s = RunRanksAsThreads(group, [&](int64_t rank, Communicator& comm) {
    std::vector<Literal> args = {
        Literal{Shape(DType::kBF16, {kM}), RankValues(rank, kM, DType::kBF16), {}}};
    ASSIGN_OR_RETURN(Literal out, eval::Evaluate(*module, args, {.collective = &comm}));
    got[rank] = out.values;
    return Status::Ok();
  });
  std::vector<double> want;
  for (int64_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(s[r].ok()) << s[r].message();
    std::vector<double> v = RankValues(r, kM, DType::kBF16);
    want.insert(want.end(), v.begin(), v.end());
  }
  for (int64_t r = 0; r < kWorld; ++r) EXPECT_TRUE(SameBits(got[r], want)) << "rank " << r;
}

// replicas must be the group's size; the error names the instruction.
TEST(EvalCollectivesTest, ReplicasOtherThanTheGroupSizeFail) {
  std::unique_ptr<ir::Module> module = ShardAndGather(DType::kF32, 12, 3);
  ThreadGroup group(2);
  std::vector<Status> s = RunRanksAsThreads(group, [&](int64_t rank, Communicator& comm) {
    RankResult unused;
    return EvalRank(*module, DType::kF32, 12, eval::Precision::kF32, comm, unused);
  });
  EXPECT_EQ(s[0].message(),
            "%reduce-scatter: reduce-scatter over replicas=3 in a group of 2 ranks");
}

// The same module over TCP peers on loopback: the same bits as the threads.
TEST(EvalCollectivesTest, OverTcpEqualsTheThreadGroup) {
  constexpr int64_t kWorld = 3, kN = 3003;
  std::unique_ptr<ir::Module> module = ShardAndGather(DType::kF32, kN, kWorld);
  StatusOr<int> port = PickFreePort();
  ASSERT_TRUE(port.ok()) << port.status().message();
  std::vector<RankResult> tcp(kWorld);
  std::vector<Status> s(kWorld, Status::Ok());
  std::vector<std::thread> threads;
  for (int64_t rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      RendezvousOptions o;
      o.master_port = *port;
      o.rank = rank;
      o.world_size = kWorld;
      o.timeout = std::chrono::milliseconds(20000);
      o.retry_interval = std::chrono::milliseconds(20);
      StatusOr<std::unique_ptr<Rendezvous>> r = Rendezvous::Join(o);
      s[rank] = r.status();
      if (!s[rank].ok()) return;
      std::unique_ptr<Communicator> comm = MakeTcpCommunicator(std::move(r).value(), o.timeout);
      s[rank] = EvalRank(*module, DType::kF32, kN, eval::Precision::kF32, *comm, tcp[rank]);
      if (!s[rank].ok()) comm->Abort(s[rank]);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int64_t r = 0; r < kWorld; ++r) ASSERT_TRUE(s[r].ok()) << s[r].message();
  ExpectShardsOfTheAllReduce(tcp, kN);
  ThreadGroup group(kWorld);
  std::vector<RankResult> threaded(kWorld);
  RunRanksAsThreads(group, [&](int64_t rank, Communicator& comm) {
    return EvalRank(*module, DType::kF32, kN, eval::Precision::kF32, comm, threaded[rank]);
  });
  for (int64_t r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(SameBits(tcp[r].gathered, threaded[r].gathered)) << "rank " << r;
    EXPECT_TRUE(SameBits(tcp[r].shard, threaded[r].shard)) << "rank " << r;
  }
}

}  // namespace
}  // namespace gptc::rt
