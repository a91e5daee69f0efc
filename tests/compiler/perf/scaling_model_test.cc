// The scaling model's arithmetic (Note [scaling model] in
// compiler/perf/scaling_model.h) on cases computed by hand.
#include "compiler/perf/scaling_model.h"

#include <gtest/gtest.h>

#include <vector>

namespace gptc::perf {
namespace {

// 370 MB over 8 GPUs on NVLink (370 GB/s = 370,000 bytes a µs):
// all-reduce 2 * 7/8 * 1000 µs = 1750 µs, plus 8.4 + 14 ring steps * 3.4.
TEST(CollectiveUsTest, RingOrTreeOverNvlinkAndNetwork) {
  const LinkModel link;
  EXPECT_DOUBLE_EQ(CollectiveUs(link, Collective::kAllReduce, 370e6, 8), 1750 + 8.4 + 14 * 3.4);
  EXPECT_DOUBLE_EQ(CollectiveUs(link, Collective::kReduceScatter, 370e6, 8), 875 + 8.4 + 7 * 3.4);
  EXPECT_DOUBLE_EQ(CollectiveUs(link, Collective::kAllGather, 370e6, 8), 875 + 8.4 + 7 * 3.4);
  // 16 GPUs, two nodes: the network's 50 GB/s bounds the ring, 2 of its 30
  // steps cross nodes; faster than the tree (2B at 45 GB/s, 2 * (7 * 28 + 50)).
  EXPECT_DOUBLE_EQ(CollectiveUs(link, Collective::kAllReduce, 50e6, 16),
                   2 * 15.0 / 16 * 1000 + 8.4 + 28 * 3.4 + 2 * 9.6);
  EXPECT_EQ(CollectiveUs(link, Collective::kAllReduce, 370e6, 1), 0);
  // 512 GPUs, 64 nodes: the ring's 1022 steps (126 across nodes) cost
  // 8.4 + 896 * 3.4 + 126 * 9.6 µs; NCCL's tree, 2 * (7 * 28 + 6 * 50) µs
  // and 2B at 0.9 of the bandwidth, is faster.
  EXPECT_DOUBLE_EQ(CollectiveUs(link, Collective::kAllReduce, 45e6, 512),
                   2 * 45e6 / 45e3 + 2 * (7 * 28 + 6 * 50));
  EXPECT_DOUBLE_EQ(CollectiveUs(link, Collective::kReduceScatter, 50e6, 512),
                   511.0 / 512 * 1000 + 8.4 + 448 * 3.4 + 63 * 9.6);
}

TEST(PackBucketsTest, ConsecutiveWithinTheCapALargerTensorAlone) {
  const std::vector<GradientReady> g = {{10, 1}, {10, 2}, {5, 3}, {40, 4}, {3, 5}, {4, 6}};
  const std::vector<Bucket> b = PackBuckets(g, 25);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].bytes, 25);
  EXPECT_EQ(b[0].members, 3);
  EXPECT_EQ(b[0].ready_us, 3);
  EXPECT_EQ(b[1].bytes, 40);  // over the cap: alone
  EXPECT_EQ(b[2].bytes, 7);
  EXPECT_EQ(b[2].ready_us, 6);
  // A first bucket of 10 bytes, as DDP's small first bucket.
  const std::vector<Bucket> first = PackBuckets(g, 25, 10);
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(first[0].bytes, 10);
  EXPECT_EQ(first[1].bytes, 15);
}

// Two gradients of 18.5 MB, final at 100 and 300 µs, a 20 MB cap: two
// buckets, each an 8-GPU all-reduce of 2 * 7/8 * 50 + 8.4 + 14 * 3.4 =
// 143.5 µs. The first runs 100-243.5, the second 300-443.5: 43.5 µs past
// the backward's end at 400, then the optimizer's 50.
StepTimeline TwoBuckets(double second_ready_us) {
  return {.forward_us = 50,
          .backward_end_us = 400,
          .optimizer_us = 50,
          .gradients = {{18'500'000, 100}, {18'500'000, second_ready_us}},
          .gather_bytes = 37'000'000,
          .tokens = 1000};
}

TEST(SimulateStepTest, TwoBucketsOnEightGpusByHand) {
  const ScalingRow r =
      SimulateStep(TwoBuckets(300), LinkModel{}, {.gpus = 8, .bucket_bytes = 20'000'000});
  EXPECT_EQ(r.buckets, 2);
  EXPECT_DOUBLE_EQ(r.comm_us, 2 * 143.5);
  EXPECT_DOUBLE_EQ(r.exposed_us, 43.5);
  EXPECT_DOUBLE_EQ(r.step_us, 400 + 43.5 + 50);
  EXPECT_DOUBLE_EQ(r.tokens_per_second, 8 * 1000 / (493.5e-6));
  EXPECT_DOUBLE_EQ(r.efficiency, 450 / 493.5);
  // Final at 200, the second bucket waits for the first (243.5) and ends at
  // 387, inside the backward: nothing exposed.
  const ScalingRow hidden =
      SimulateStep(TwoBuckets(200), LinkModel{}, {.gpus = 8, .bucket_bytes = 20'000'000});
  EXPECT_DOUBLE_EQ(hidden.exposed_us, 0);
  EXPECT_DOUBLE_EQ(hidden.step_us, 450);
  // bf16 gradients: half the bytes, so both fit one 20 MB bucket of
  // 18.5 MB, issued at 300 and done at 443.5.
  const ScalingRow bf16 =
      SimulateStep(TwoBuckets(300), LinkModel{},
                   {.gpus = 8, .bucket_bytes = 20'000'000, .bf16_gradients = true});
  EXPECT_EQ(bf16.buckets, 1);
  EXPECT_DOUBLE_EQ(bf16.comm_us, 143.5);
  EXPECT_DOUBLE_EQ(bf16.exposed_us, 43.5);
}

TEST(SimulateStepTest, OneGpuIsTheCompute) {
  for (int zero : {0, 1}) {
    const ScalingRow r = SimulateStep(TwoBuckets(300), LinkModel{}, {.gpus = 1, .zero = zero});
    EXPECT_EQ(r.exposed_us, 0);
    EXPECT_EQ(r.comm_us, 0);
    EXPECT_DOUBLE_EQ(r.step_us, 450);
    EXPECT_DOUBLE_EQ(r.efficiency, 1);
  }
}

TEST(SimulateStepTest, EfficiencyFallsAsGpusGrow) {
  double last = 2;
  for (int64_t n : {1, 2, 4, 8, 16, 64, 512}) {
    const ScalingRow r = SimulateStep(TwoBuckets(300), LinkModel{}, {.gpus = n});
    EXPECT_LE(r.efficiency, last) << n << " GPUs";
    last = r.efficiency;
  }
}

// ZeRO-1 on 4 GPUs: the optimizer (400) and the cast (40) on a quarter
// shard; the grad norm's scalar all-reduce (4 bytes: 8.4 + 6 * 3.4 µs and
// 2 * 3/4 * 4 bytes at 370 GB/s); the 37 MB
// all-gather in two 20 MB buckets after the optimizer, or hidden behind a
// long forward but for its first bucket.
TEST(SimulateStepTest, ZeroOneShardsTheOptimizer) {
  StepTimeline step = TwoBuckets(300);
  step.optimizer_us = 400;
  step.param_cast_us = 40;
  const LinkModel link;
  const ScalingConfig config{.gpus = 4, .bucket_bytes = 20'000'000, .zero = 1};
  const ScalingRow r = SimulateStep(step, link, config);
  EXPECT_DOUBLE_EQ(r.compute_us, 400 - 40 + 440 / 4.0);
  const double rs = CollectiveUs(link, Collective::kReduceScatter, 18.5e6, 4);
  const double exposed_rs = std::max(0.0, std::max(300.0, 100 + rs) + rs - 400);
  const double norm = 8.4 + 6 * 3.4 + 6 / 370e3;
  const double first = CollectiveUs(link, Collective::kAllGather, 20e6, 4);
  const double gather = first + CollectiveUs(link, Collective::kAllGather, 17e6, 4);
  EXPECT_DOUBLE_EQ(r.exposed_us, exposed_rs + norm + gather);
  EXPECT_DOUBLE_EQ(r.step_us, r.compute_us + r.exposed_us);
  step.forward_us = 1e6;
  ScalingConfig overlap = config;
  overlap.gather = GatherMode::kOverlapForward;
  EXPECT_DOUBLE_EQ(SimulateStep(step, link, overlap).exposed_us, exposed_rs + norm + first);
}

TEST(SimulateStepTest, GradAccumAddsMicroBatchesWithoutCommunication) {
  const ScalingRow r = SimulateStep(TwoBuckets(300), LinkModel{},
                                    {.gpus = 8, .bucket_bytes = 20'000'000, .grad_accum = 4});
  EXPECT_DOUBLE_EQ(r.step_us, 3 * 400 + 400 + 43.5 + 50);
  EXPECT_DOUBLE_EQ(r.efficiency, (3 * 400 + 450) / r.step_us);
  EXPECT_DOUBLE_EQ(r.tokens_per_second, 8 * 4 * 1000 / (r.step_us * 1e-6));
}

}  // namespace
}  // namespace gptc::perf
