// A data-parallel step on N GPUs, predicted from one GPU's step (Note
// [scaling model]): `gptc simulate` prints it, docs/DATA_PARALLEL.md
// ("Scaling model") holds its tables. Plain arithmetic: what a step's
// thunks cost and when each gradient is final come from the caller
// (step_timeline.h reads them off an artifact's plan).
//
// Note [scaling model]
// ~~~~~~~~~~~~~~~~~~~~
// Every rank runs the same step on its own rows, so compute does not change
// with N; what N adds is communication, on one stream, in order:
//  - Links (LinkModel): up to gpus_per_node GPUs talk over NVLink, beyond
//    that every ring crosses nodes and the network bounds it. A ring
//    collective of B bytes (the whole tensor) over N GPUs takes
//      all-reduce:                   2(N-1)/N * B / busBW + latency
//      reduce-scatter, all-gather:    (N-1)/N * B / busBW + latency
//    with latency = base + (steps - inter) * nvlink_step + inter * network_step,
//    steps = 2(N-1) for an all-reduce (N-1 otherwise) and inter = 2(nodes-1)
//    (nodes-1) of them crossing nodes: NCCL's own ring cost model
//    (src/graph/tuning.cc, protocol Simple). Across nodes an all-reduce
//    takes the faster of that ring and NCCL's tree, 2B / (0.9 busBW) +
//    2 ((gpus_per_node-1) tree_nvlink_step + log2(nodes) tree_network_step),
//    as NCCL chooses by the same model; a ring's latency grows with N, the
//    tree's with log N, so at hundreds of GPUs the tree wins. NVLS, SHARP and
//    PAT are not modelled (reduce-scatter and all-gather stay rings).
//  - Buckets (PackBuckets): gradients in the order the backward finishes
//    them, packed as the combiner packs the all-reduces (Note [all-reduce
//    buckets] in passes/all_reduce_combiner.h; a copy of its cap rule over
//    this model's own data, as compiler/ may not use passes/, and without
//    its early-reader rule, which never applies when only the optimizer
//    reads the gradients): a bucket grows while it stays
//    within the cap, a larger tensor is a bucket of its own; optionally a
//    smaller first bucket, as PyTorch DDP's 1 MiB. A bucket is issued when
//    its last gradient is final and after the bucket before it.
//  - ZeRO-0 (every rank all-reduces every gradient, gptc's --dp today):
//    the optimizer reads every gradient, so the step is the backward's end,
//    then whatever communication runs past it (exposed), then the
//    optimizer tail.
//  - ZeRO-1 (predicted; gptc does not build it yet): buckets are
//    reduce-scattered instead (bytes halved with bf16 gradients, as llm.c),
//    the optimizer tail and the parameters' cast to the compute dtype run
//    on each rank's 1/N shard, the grad norm costs one scalar all-reduce,
//    and the updated parameters (in the compute dtype) are all-gathered in
//    buckets of the same cap: after the optimizer, all exposed (as llm.c
//    does), or during the next step's forward, exposed only where the
//    gather outlasts the forward (and at least its first bucket, which the
//    first layer waits for).
//  - Gradient accumulation of K micro-batches: K-1 forward+backward passes
//    without communication, then the last one's backward overlaps it.
// Not modelled: communication kernels slowing compute (NCCL takes SMs and
// memory bandwidth), stragglers, the data loader.
#ifndef GPTC_COMPILER_PERF_SCALING_MODEL_H_
#define GPTC_COMPILER_PERF_SCALING_MODEL_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gptc::perf {

// The interconnect of a cluster of H100 nodes (Note [scaling model]).
struct LinkModel {
  int64_t gpus_per_node = 8;
  // Bus bandwidth a GPU, GB/s (1e9 B/s), for large NCCL collectives:
  // NVLink 4 within a node (nccl-tests' busbw on 8xH100 SXM), and one
  // InfiniBand NDR 400 Gb/s NIC a GPU across nodes.
  double nvlink_bus_gbs = 370;
  double network_bus_gbs = 50;
  // NCCL's ring latency (src/graph/tuning.cc, Simple protocol): a base per
  // collective and a cost per ring step over NVLink or across nodes.
  double base_latency_us = 8.4;
  double nvlink_step_us = 3.4;
  double network_step_us = 9.6;
  // NCCL's tree (Simple protocol): a level within a node and across nodes,
  // and the share of the bus bandwidth it reaches.
  double tree_nvlink_step_us = 28;
  double tree_network_step_us = 50;
  double tree_bandwidth_share = 0.9;
};

enum class Collective { kAllReduce, kReduceScatter, kAllGather };

// One ring collective of `bytes` (the whole tensor, as every rank holds it)
// over `gpus` GPUs; 0 on one GPU.
double CollectiveUs(const LinkModel& link, Collective c, double bytes, int64_t gpus);

// A gradient: its bytes as the step holds it (f32 today) and when the
// backward finishes it, µs from the step's start.
struct GradientReady {
  int64_t bytes = 0;
  double ready_us = 0;
};

// One GPU's step as the scaling model needs it.
struct StepTimeline {
  double forward_us = 0;       // from the start to the first gradient thunk
  double backward_end_us = 0;  // everything but the optimizer tail
  double optimizer_us = 0;     // the tail: norm, scalars, every parameter's update
  double param_cast_us = 0;    // part of backward_end_us: the parameters' cast (mixed precision)
  std::vector<GradientReady> gradients;  // in the order they are finished
  int64_t gather_bytes = 0;  // the parameters in the compute dtype (ZeRO-1's all-gather)
  int64_t tokens = 0;        // one GPU's micro-batch
  double compute_us() const { return backward_end_us + optimizer_us; }
};

// Consecutive gradients packed as Note [scaling model] says: each bucket's
// bytes and when its last member is final. `first_cap` > 0: the first
// bucket's cap.
struct Bucket {
  int64_t bytes = 0;
  double ready_us = 0;
  int64_t members = 0;
};
std::vector<Bucket> PackBuckets(std::span<const GradientReady> gradients, int64_t cap,
                                int64_t first_cap = 0);

enum class GatherMode { kAfterOptimizer, kOverlapForward };

struct ScalingConfig {
  int64_t gpus = 1;
  int64_t bucket_bytes = int64_t{25} << 20;
  int64_t first_bucket_bytes = 0;  // 0: as the others
  int zero = 0;                    // 0 or 1
  bool bf16_gradients = false;     // communicate gradients in bf16 (half the f32 bytes)
  GatherMode gather = GatherMode::kAfterOptimizer;  // ZeRO-1
  int64_t grad_accum = 1;
};

struct ScalingRow {
  ScalingConfig config;
  int64_t buckets = 0;
  double compute_us = 0;  // this rank's compute (ZeRO-1: the optimizer's shard)
  double comm_us = 0;     // the communication stream's busy time
  double exposed_us = 0;  // communication the compute waits for
  double step_us = 0;
  double tokens_per_second = 0;  // all GPUs
  double efficiency = 0;         // tok/s over N times one GPU's (ZeRO-0, N = 1)
};

// The step on config.gpus GPUs (config.zero 0 or 1, grad_accum >= 1).
ScalingRow SimulateStep(const StepTimeline& step, const LinkModel& link,
                        const ScalingConfig& config);

// The GPU counts `gptc simulate` and the report's scaling view predict by
// default: within a node, two nodes, and clusters where the network and the
// ring's latency dominate.
inline constexpr int64_t kScalingGpuCounts[] = {1, 2, 4, 8, 16, 64, 512};

// SimulateStep at each of `gpus` (config.gpus ignored), in their order.
std::vector<ScalingRow> SimulateSteps(const StepTimeline& step, const LinkModel& link,
                                      ScalingConfig config, std::span<const int64_t> gpus);

// "zero 0, all-reduce f32, buckets 25 MiB" and the like.
std::string DescribeConfig(const ScalingConfig& config);

}  // namespace gptc::perf

#endif  // GPTC_COMPILER_PERF_SCALING_MODEL_H_
