// Data parallelism on the CPU reference device, end to end: gpt2-tiny
// compiled with --dp 2, two ranks (threads, or TCP peers on loopback) each
// fed its half of every batch's rows, follows the same losses, gradient
// norms and parameters as --dp 1 with the whole batch, to float tolerance;
// and the two ranks stay bit-identical to each other. Trainer::SumOverRanks
// adds the ranks' values.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "models/gpt2.h"
#include "runtime/communicator.h"
#include "runtime/cpu_device.h"
#include "runtime/launch_env.h"
#include "runtime/rendezvous.h"
#include "passes/train_step.h"

namespace gptc::rt {
namespace {

constexpr int64_t kRows = 4;  // the global batch
constexpr int64_t kSeq = 16;
constexpr int64_t kSteps = 3;
constexpr double kLr = 3e-3;

StatusOr<program::TrainProgram> Compile(int64_t rows, int64_t accum, int64_t world) {
  ASSIGN_OR_RETURN(models::GptConfig config, models::FindGptConfig("gpt2-tiny"));
  ASSIGN_OR_RETURN(frontend::TracedModule traced, models::TraceGpt2Forward(config, rows, kSeq));
  passes::TrainStepOptions options;
  options.grad_accum = accum;
  options.world_size = world;
  // Some gradients are 0 in exact arithmetic and rounding noise in f32 (the
  // attention key bias: softmax ignores a constant shift). With eps 1e-8,
  // Adam blows that noise up to +-lr, differently for any two summation
  // orders (one batch of 4 rows, or two halves summed), which would hide
  // everything else. A larger eps keeps the update a smooth function of the
  // gradient (as in OptimizerTest.GradAccumulationMatchesOneBigBatch).
  options.adamw.eps = 1e-3;
  return passes::BuildTrainProgram(std::move(traced.module), std::move(traced.params),
                                   traced.inputs, options);
}

// The global batch of micro-step `index`: the same whatever the world size.
MicroBatch GlobalBatch(int64_t index) {
  return PatternBatch(kRows, kSeq, models::kGpt2Vocab, index);
}

// Rank `rank`'s rows of `global` (runtime/launch_env.h RankRows).
MicroBatch RankSlice(const MicroBatch& global, int64_t rank, int64_t world) {
  LaunchEnv env;
  env.rank = rank;
  env.world_size = world;
  const RowRange rows = RankRows(env, kRows / world);
  MicroBatch out;
  const auto first = static_cast<std::ptrdiff_t>(rows.begin * kSeq);
  const auto last = static_cast<std::ptrdiff_t>((rows.begin + rows.count) * kSeq);
  out.tokens.assign(global.tokens.begin() + first, global.tokens.begin() + last);
  out.targets.assign(global.targets.begin() + first, global.targets.begin() + last);
  return out;
}

struct Trajectory {
  std::vector<StepResult> steps;
  std::vector<eval::Literal> params;
};

Trajectory TrainSingle(const program::TrainProgram& program) {
  CpuTrainer trainer(&program, /*seed=*/0);
  Trajectory run;
  const int64_t k = program.grad_accum;
  for (int64_t s = 0; s < kSteps; ++s) {
    std::vector<MicroBatch> micro;
    for (int64_t i = 0; i < k; ++i) micro.push_back(GlobalBatch(s * k + i));
    StatusOr<StepResult> r = trainer.Step(micro, kLr);
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (!r.ok()) return run;
    run.steps.push_back(*r);
  }
  for (size_t i = 0; i < program.params.size(); ++i) run.params.push_back(trainer.param(i));
  return run;
}

// One rank's training loop, its all-reduces through `comm`.
Status TrainRank(const program::TrainProgram& program, int64_t rank, Communicator& comm,
                 Trajectory& run) {
  CpuTrainer trainer(&program, /*seed=*/0);  // every rank initializes identically
  trainer.set_collective(&comm);
  const int64_t k = program.grad_accum;
  for (int64_t s = 0; s < kSteps; ++s) {
    std::vector<MicroBatch> micro;
    for (int64_t i = 0; i < k; ++i) {
      micro.push_back(RankSlice(GlobalBatch(s * k + i), rank, comm.world_size()));
    }
    ASSIGN_OR_RETURN(StepResult r, trainer.Step(micro, kLr));
    run.steps.push_back(r);
  }
  for (size_t i = 0; i < program.params.size(); ++i) run.params.push_back(trainer.param(i));
  return Status::Ok();
}

std::vector<Trajectory> TrainThreads(const program::TrainProgram& program, int64_t world) {
  ThreadGroup group(world, std::chrono::seconds(120));
  std::vector<Trajectory> runs(world);
  std::vector<Status> s = RunRanksAsThreads(group, [&](int64_t rank, Communicator& comm) {
    return TrainRank(program, rank, comm, runs[rank]);
  });
  for (const Status& status : s) EXPECT_TRUE(status.ok()) << status.message();
  return runs;
}

std::vector<Trajectory> TrainTcp(const program::TrainProgram& program, int64_t world) {
  StatusOr<int> port = PickFreePort();
  EXPECT_TRUE(port.ok());
  std::vector<Trajectory> runs(world);
  std::vector<std::thread> threads;
  for (int64_t rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      LaunchEnv env;
      env.rank = rank;
      env.world_size = world;
      env.master_port = *port;
      env.timeout = std::chrono::seconds(120);
      StatusOr<std::unique_ptr<Rendezvous>> rdv = Rendezvous::Join(RendezvousOptionsFrom(env));
      ASSERT_TRUE(rdv.ok()) << rdv.status().message();
      std::unique_ptr<Communicator> comm = MakeTcpCommunicator(std::move(*rdv), env.timeout);
      Status s = TrainRank(program, rank, *comm, runs[rank]);
      if (!s.ok()) comm->Abort(s);
      EXPECT_TRUE(s.ok()) << s.message();
    });
  }
  for (std::thread& t : threads) t.join();
  return runs;
}

// |a - b| <= tol * max(1, max |b|) for every parameter, element by element.
void ExpectParamsNear(const Trajectory& a, const Trajectory& b, double tol,
                      const program::TrainProgram& p) {
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    double scale = 1, worst = 0;
    for (double v : b.params[i].values) scale = std::max(scale, std::abs(v));
    for (size_t j = 0; j < a.params[i].values.size(); ++j) {
      worst = std::max(worst, std::abs(a.params[i].values[j] - b.params[i].values[j]));
    }
    EXPECT_LE(worst, tol * scale) << p.params[i].name;
  }
}

void ExpectBitIdentical(const Trajectory& a, const Trajectory& b) {
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t s = 0; s < a.steps.size(); ++s) {
    EXPECT_EQ(a.steps[s].loss, b.steps[s].loss) << "step " << s + 1;
    EXPECT_EQ(a.steps[s].grad_norm, b.steps[s].grad_norm) << "step " << s + 1;
  }
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_EQ(a.params[i].values, b.params[i].values) << "parameter " << i;
  }
}

void CompareDp2WithDp1(int64_t accum) {
  StatusOr<program::TrainProgram> dp1 = Compile(kRows, accum, 1);
  StatusOr<program::TrainProgram> dp2 = Compile(kRows / 2, accum, 2);
  ASSERT_TRUE(dp1.ok()) << dp1.status().message();
  ASSERT_TRUE(dp2.ok()) << dp2.status().message();
  const Trajectory single = TrainSingle(*dp1);
  const std::vector<Trajectory> ranks = TrainThreads(*dp2, 2);
  ASSERT_EQ(single.steps.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(ranks[0].steps.size(), static_cast<size_t>(kSteps));
  // Every rank applies the identical update and reports the same numbers.
  ExpectBitIdentical(ranks[0], ranks[1]);
  // The reported loss is the mean over ranks: the global batch's loss.
  for (int64_t s = 0; s < kSteps; ++s) {
    SCOPED_TRACE(testing::Message() << "step " << s + 1);
    EXPECT_NEAR(ranks[0].steps[s].loss, single.steps[s].loss, 1e-5 * single.steps[s].loss);
    EXPECT_NEAR(ranks[0].steps[s].grad_norm, single.steps[s].grad_norm,
                1e-4 * single.steps[s].grad_norm);
  }
  EXPECT_LT(single.steps.back().loss, single.steps.front().loss);  // it trains
  ExpectParamsNear(ranks[0], single, 1e-6, *dp1);
}

TEST(DataParallelTrainTest, TwoRanksFollowOneRankWithTheWholeBatch) { CompareDp2WithDp1(1); }

TEST(DataParallelTrainTest, TwoRanksWithGradAccumulation) { CompareDp2WithDp1(2); }

// The TCP communicator (ranks as processes, here threads on loopback) gives
// the thread group's results bit for bit.
TEST(DataParallelTrainTest, TcpRanksEqualThreadRanks) {
  StatusOr<program::TrainProgram> dp2 = Compile(kRows / 2, 1, 2);
  ASSERT_TRUE(dp2.ok()) << dp2.status().message();
  const std::vector<Trajectory> threads = TrainThreads(*dp2, 2);
  const std::vector<Trajectory> tcp = TrainTcp(*dp2, 2);
  ExpectBitIdentical(tcp[0], tcp[1]);
  ExpectBitIdentical(tcp[0], threads[0]);
}

// Trainer::SumOverRanks, what an eval split across the ranks tallies with:
// each rank's counts come back summed on every rank.
TEST(DataParallelTrainTest, SumOverRanksAddsEveryRanksValues) {
  StatusOr<program::TrainProgram> dp2 = Compile(kRows / 2, 1, 2);
  ASSERT_TRUE(dp2.ok()) << dp2.status().message();
  ThreadGroup group(2, std::chrono::seconds(120));
  std::vector<std::vector<double>> values = {{1, 2.5, 7}, {10, 20, 30}};
  std::vector<Status> s = RunRanksAsThreads(group, [&](int64_t rank, Communicator& comm) {
    CpuTrainer trainer(&*dp2, /*seed=*/0);
    trainer.set_collective(&comm);
    return trainer.SumOverRanks(values[rank]);
  });
  for (const Status& status : s) EXPECT_TRUE(status.ok()) << status.message();
  for (int64_t rank : {0, 1}) {
    EXPECT_EQ(values[rank], (std::vector<double>{11, 22.5, 37})) << "rank " << rank;
  }
}

TEST(DataParallelTrainTest, SumOverRanksOfOneRankLeavesTheValues) {
  StatusOr<program::TrainProgram> dp1 = Compile(kRows, 1, 1);
  ASSERT_TRUE(dp1.ok()) << dp1.status().message();
  CpuTrainer trainer(&*dp1, /*seed=*/0);
  std::vector<double> values = {1, 2.5, 7};
  Status s = trainer.SumOverRanks(values);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(values, (std::vector<double>{1, 2.5, 7}));
}

}  // namespace
}  // namespace gptc::rt
