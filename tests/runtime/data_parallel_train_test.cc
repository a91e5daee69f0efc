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

StatusOr<program::TrainProgram> Compile(int64_t rows, int64_t accum, int64_t world,
                                        int64_t zero = 0, ir::DType grad_comm = ir::DType::kF32) {
  ASSIGN_OR_RETURN(models::GptConfig config, models::FindGptConfig("gpt2-tiny"));
  ASSIGN_OR_RETURN(frontend::TracedModule traced, models::TraceGpt2Forward(config, rows, kSeq));
  passes::TrainStepOptions options;
  options.grad_accum = accum;
  options.world_size = world;
  options.zero_stage = zero;
  options.grad_comm = grad_comm;
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

// Where a rank's run starts and ends: by default from the initialization,
// steps [0, kSteps); else from `start` (a checkpoint's whole state), and its
// whole state exported into `end` afterwards (every rank calls it).
struct Span {
  int64_t first = 0, last = kSteps;
  const TrainerState* start = nullptr;
  std::vector<TrainerState>* end = nullptr;  // one per rank
};

// One rank's training loop, its collectives through `comm`.
Status TrainRank(const program::TrainProgram& program, int64_t rank, Communicator& comm,
                 Trajectory& run, const Span& span = {}) {
  CpuTrainer trainer(&program, /*seed=*/0);  // every rank initializes identically
  trainer.set_collective(&comm);
  if (span.start != nullptr) RETURN_IF_ERROR(trainer.ImportState(*span.start));
  const int64_t k = program.grad_accum;
  for (int64_t s = span.first; s < span.last; ++s) {
    std::vector<MicroBatch> micro;
    for (int64_t i = 0; i < k; ++i) {
      micro.push_back(RankSlice(GlobalBatch(s * k + i), rank, comm.world_size()));
    }
    ASSIGN_OR_RETURN(StepResult r, trainer.Step(micro, kLr));
    run.steps.push_back(r);
  }
  for (size_t i = 0; i < program.params.size(); ++i) run.params.push_back(trainer.param(i));
  if (span.end != nullptr) {
    ASSIGN_OR_RETURN((*span.end)[rank], trainer.ExportState());
  }
  return Status::Ok();
}

std::vector<Trajectory> TrainThreads(const program::TrainProgram& program, int64_t world,
                                     const Span& span = {}) {
  ThreadGroup group(world, std::chrono::seconds(120));
  std::vector<Trajectory> runs(world);
  if (span.end != nullptr) span.end->resize(world);
  std::vector<Status> s = RunRanksAsThreads(group, [&](int64_t rank, Communicator& comm) {
    return TrainRank(program, rank, comm, runs[rank], span);
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

// ZeRO-1 (passes/zero_shard.h): the sharded optimizer. Compared with plain
// data parallelism over the same ranks, only the order of the gradient
// norm's additions differs.

// Both runs' losses and gradient norms within `tol` relative, and their
// parameters (ExpectParamsNear).
void ExpectRunsNear(const Trajectory& a, const Trajectory& b, double tol,
                    const program::TrainProgram& p) {
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t s = 0; s < a.steps.size(); ++s) {
    SCOPED_TRACE(testing::Message() << "step " << s + 1);
    EXPECT_NEAR(a.steps[s].loss, b.steps[s].loss, tol * b.steps[s].loss);
    EXPECT_NEAR(a.steps[s].grad_norm, b.steps[s].grad_norm, tol * b.steps[s].grad_norm);
  }
  ExpectParamsNear(a, b, tol, p);
}

void CompareZeroWithPlain(int64_t world, int64_t accum) {
  StatusOr<program::TrainProgram> plain = Compile(kRows / world, accum, world);
  StatusOr<program::TrainProgram> zero = Compile(kRows / world, accum, world, /*zero=*/1);
  StatusOr<program::TrainProgram> single = Compile(kRows, accum, 1);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  ASSERT_TRUE(zero.ok()) << zero.status().message();
  ASSERT_TRUE(single.ok()) << single.status().message();
  ASSERT_EQ(zero->zero_stage, 1);
  const std::vector<Trajectory> p = TrainThreads(*plain, world);
  const std::vector<Trajectory> z = TrainThreads(*zero, world);
  ASSERT_EQ(z[0].steps.size(), static_cast<size_t>(kSteps));
  for (int64_t r = 1; r < world; ++r) ExpectBitIdentical(z[0], z[r]);
  ExpectRunsNear(z[0], p[0], 1e-6, *plain);
  ExpectRunsNear(z[0], TrainSingle(*single), 1e-5, *single);
  // Repeated, bit for bit.
  ExpectBitIdentical(TrainThreads(*zero, world)[0], z[0]);
}

TEST(ZeroTrainTest, TwoRanksEqualPlainDataParallel) { CompareZeroWithPlain(2, 1); }
TEST(ZeroTrainTest, FourRanksEqualPlainDataParallel) { CompareZeroWithPlain(4, 1); }
TEST(ZeroTrainTest, TwoRanksWithGradAccumulation) { CompareZeroWithPlain(2, 2); }

// The sharded entry's state: moments and master weights are shards of
// ceil(n / N) elements, the parameters stay whole.
TEST(ZeroTrainTest, StateSlotsAreShards) {
  StatusOr<program::TrainProgram> zero = Compile(kRows / 4, 1, 4, /*zero=*/1);
  ASSERT_TRUE(zero.ok()) << zero.status().message();
  const program::EntrySignature& sig = zero->entries[0].signature;
  for (size_t i = 0; i < zero->params.size(); ++i) {
    const auto index = static_cast<int64_t>(i);
    const int64_t n = zero->params[i].shape.num_elements();
    const ir::Shape shard(ir::DType::kF32, {(n + 3) / 4});
    for (program::SlotRole role :
         {program::SlotRole::kAdamM, program::SlotRole::kAdamV, program::SlotRole::kMaster}) {
      const int64_t in = sig.FindInput(role, index);
      ASSERT_GE(in, 0) << program::SlotRoleName(role) << " " << i;
      EXPECT_EQ(sig.inputs[in].shape, shard) << zero->params[i].name;
      EXPECT_GE(sig.FindOutput(role, index), 0);
    }
    EXPECT_EQ(sig.inputs[sig.FindInput(program::SlotRole::kParam, index)].shape,
              zero->params[i].shape);
  }
}

// Checkpoints stay whole: every rank exports the same state, equal to
// plain data parallelism's; and a state saved at 4 ranks resumes at 2
// ranks and at 1, following the uninterrupted run.
TEST(ZeroTrainTest, StateIsWholeAndResumesAtAnyRankCount) {
  StatusOr<program::TrainProgram> zero4 = Compile(kRows / 4, 1, 4, /*zero=*/1);
  StatusOr<program::TrainProgram> plain4 = Compile(kRows / 4, 1, 4);
  StatusOr<program::TrainProgram> zero2 = Compile(kRows / 2, 1, 2, /*zero=*/1);
  StatusOr<program::TrainProgram> single = Compile(kRows, 1, 1);
  for (auto* p : {&zero4, &plain4, &zero2, &single}) ASSERT_TRUE(p->ok()) << p->status().message();
  std::vector<TrainerState> zero_end, plain_end;
  TrainThreads(*zero4, 4, {.first = 0, .last = kSteps - 1, .end = &zero_end});
  TrainThreads(*plain4, 4, {.first = 0, .last = kSteps - 1, .end = &plain_end});
  for (int64_t r = 1; r < 4; ++r) {
    EXPECT_EQ(zero_end[r].adam_m, zero_end[0].adam_m) << "rank " << r;
    EXPECT_EQ(zero_end[r].adam_v, zero_end[0].adam_v) << "rank " << r;
  }
  for (size_t i = 0; i < zero4->params.size(); ++i) {
    ASSERT_EQ(zero_end[0].adam_v[i].size(), plain_end[0].adam_v[i].size());
    double worst = 0, scale = 1e-12;
    for (size_t j = 0; j < plain_end[0].adam_v[i].size(); ++j) {
      scale = std::max(scale, static_cast<double>(std::abs(plain_end[0].adam_v[i][j])));
      worst = std::max(worst, static_cast<double>(
                                  std::abs(zero_end[0].adam_v[i][j] - plain_end[0].adam_v[i][j])));
    }
    EXPECT_LE(worst, 1e-5 * scale) << zero4->params[i].name;
  }
  const Trajectory whole = TrainThreads(*zero4, 4)[0];
  const Trajectory at2 =
      TrainThreads(*zero2, 2, {.first = kSteps - 1, .last = kSteps, .start = &zero_end[0]})[0];
  CpuTrainer one(&*single, /*seed=*/0);
  ASSERT_TRUE(one.ImportState(zero_end[0]).ok());
  StatusOr<StepResult> last = one.Step(std::vector{GlobalBatch(kSteps - 1)}, kLr);
  ASSERT_TRUE(last.ok()) << last.status().message();
  ASSERT_EQ(at2.steps.size(), 1u);
  EXPECT_NEAR(at2.steps[0].loss, whole.steps.back().loss, 1e-6 * whole.steps.back().loss);
  EXPECT_NEAR(last->loss, whole.steps.back().loss, 1e-5 * whole.steps.back().loss);
  ExpectParamsNear(at2, whole, 1e-6, *zero2);
}

// Note [bf16 gradient communication]: bf16 on the wire follows f32's run
// to bf16's precision, and the ranks still agree bit for bit.
TEST(ZeroTrainTest, Bf16GradientCommunication) {
  StatusOr<program::TrainProgram> f32 = Compile(kRows / 2, 1, 2, /*zero=*/1);
  StatusOr<program::TrainProgram> bf16 = Compile(kRows / 2, 1, 2, /*zero=*/1, ir::DType::kBF16);
  ASSERT_TRUE(f32.ok()) << f32.status().message();
  ASSERT_TRUE(bf16.ok()) << bf16.status().message();
  const std::vector<Trajectory> a = TrainThreads(*f32, 2);
  const std::vector<Trajectory> b = TrainThreads(*bf16, 2);
  ExpectBitIdentical(b[0], b[1]);
  for (size_t s = 0; s < a[0].steps.size(); ++s) {
    EXPECT_NEAR(b[0].steps[s].loss, a[0].steps[s].loss, 1e-3 * a[0].steps[s].loss);
    EXPECT_NEAR(b[0].steps[s].grad_norm, a[0].steps[s].grad_norm, 1e-2 * a[0].steps[s].grad_norm);
  }
  EXPECT_NE(b[0].steps.back().grad_norm, a[0].steps.back().grad_norm);  // it did round
}

TEST(ZeroTrainTest, ShardedProgramRefusesToRunAlone) {
  StatusOr<program::TrainProgram> zero = Compile(kRows / 2, 1, 2, /*zero=*/1);
  ASSERT_TRUE(zero.ok()) << zero.status().message();
  CpuTrainer trainer(&*zero, /*seed=*/0);
  StatusOr<StepResult> r = trainer.Step(std::vector{GlobalBatch(0)}, kLr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "step 1: the program shards its optimizer state over 2 ranks (--zero 1), and the "
            "CPU trainer runs alone");
  EXPECT_FALSE(trainer.ExportState().ok());
  // A whole state it cannot cut into shards is refused before anything changes.
  TrainerState whole;
  for (const program::ParamSpec& spec : zero->params) {
    const std::vector<float> ones(static_cast<size_t>(spec.shape.num_elements()), 1.0f);
    whole.values.push_back(ones);
    whole.adam_m.push_back(ones);
    whole.adam_v.push_back(ones);
  }
  const std::vector<double> before = trainer.param(0).values;
  Status s = trainer.ImportState(whole);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "importing the state: the program shards its optimizer state over 2 ranks (--zero 1), "
            "and the CPU trainer runs alone");
  EXPECT_EQ(trainer.param(0).values, before);
}

TEST(ZeroTrainTest, CompileRefusesZeroWithoutRanks) {
  StatusOr<program::TrainProgram> zero = Compile(kRows, 1, 1, /*zero=*/1);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("--zero 1 with --dp 1"), std::string::npos)
      << zero.status().message();
}

}  // namespace
}  // namespace gptc::rt
