#include "compiler/perf/scaling_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace gptc::perf {
namespace {

// The all-gather of `bytes` in buckets of `cap`: one collective per bucket
// on the stream, back to back. Returns the whole and the first bucket's time.
std::pair<double, double> GatherUs(const LinkModel& link, int64_t bytes, int64_t cap,
                                   int64_t gpus) {
  double total = 0, first = 0;
  for (int64_t done = 0; done < bytes; done += cap) {
    const double us = CollectiveUs(link, Collective::kAllGather,
                                   static_cast<double>(std::min(cap, bytes - done)), gpus);
    if (done == 0) first = us;
    total += us;
  }
  return {total, first};
}

std::string MiB(int64_t bytes) {
  const double mib = static_cast<double>(bytes) / (1 << 20);
  return mib == static_cast<double>(static_cast<int64_t>(mib)) ? fmt::format("{}", bytes >> 20)
                                                               : fmt::format("{:.2f}", mib);
}

}  // namespace

double CollectiveUs(const LinkModel& link, Collective c, double bytes, int64_t gpus) {
  if (gpus <= 1) return 0;
  const double n = static_cast<double>(gpus);
  const int64_t nodes = (gpus + link.gpus_per_node - 1) / link.gpus_per_node;
  const double bus_gbs = nodes > 1 ? link.network_bus_gbs : link.nvlink_bus_gbs;
  const bool all_reduce = c == Collective::kAllReduce;
  const double traffic = (all_reduce ? 2.0 : 1.0) * (n - 1) / n * bytes;
  const int64_t steps = (all_reduce ? 2 : 1) * (gpus - 1);
  const int64_t inter = (all_reduce ? 2 : 1) * (nodes - 1);
  const double latency = link.base_latency_us +
                         static_cast<double>(steps - inter) * link.nvlink_step_us +
                         static_cast<double>(inter) * link.network_step_us;
  const double ring = traffic / (bus_gbs * 1e3) + latency;  // GB/s = 1e3 bytes a µs
  if (!all_reduce || nodes == 1) return ring;
  const double tree = 2 * bytes / (link.tree_bandwidth_share * bus_gbs * 1e3) +
                      2 * (static_cast<double>(link.gpus_per_node - 1) * link.tree_nvlink_step_us +
                           std::log2(static_cast<double>(nodes)) * link.tree_network_step_us);
  return std::min(ring, tree);
}

std::vector<Bucket> PackBuckets(std::span<const GradientReady> gradients, int64_t cap,
                                int64_t first_cap) {
  std::vector<Bucket> buckets;
  Bucket open;
  for (const GradientReady& g : gradients) {
    const int64_t limit = buckets.empty() && first_cap > 0 ? first_cap : cap;
    if (open.members > 0 && open.bytes + g.bytes > limit) {
      buckets.push_back(open);
      open = Bucket{};
    }
    open.bytes += g.bytes;
    open.ready_us = std::max(open.ready_us, g.ready_us);
    ++open.members;
  }
  if (open.members > 0) buckets.push_back(open);
  return buckets;
}

ScalingRow SimulateStep(const StepTimeline& step, const LinkModel& link,
                        const ScalingConfig& config) {
  ScalingRow row{.config = config};
  const int64_t n = std::max<int64_t>(config.gpus, 1);
  const bool zero1 = config.zero == 1;
  std::vector<GradientReady> gradients = step.gradients;
  if (config.bf16_gradients) {
    for (GradientReady& g : gradients) g.bytes = (g.bytes + 1) / 2;
  }
  const std::vector<Bucket> buckets =
      PackBuckets(gradients, config.bucket_bytes, config.first_bucket_bytes);
  row.buckets = static_cast<int64_t>(buckets.size());
  // The gradients' stream, in bucket order; each waits for its last member.
  double stream_end = 0;
  for (const Bucket& b : buckets) {
    const double us =
        CollectiveUs(link, zero1 ? Collective::kReduceScatter : Collective::kAllReduce,
                     static_cast<double>(b.bytes), n);
    stream_end = std::max(stream_end, b.ready_us) + us;
    row.comm_us += us;
  }
  const double exposed_grads = std::max(0.0, stream_end - step.backward_end_us);
  // K-1 micro-batches before the last one communicate nothing.
  const double earlier = static_cast<double>(config.grad_accum - 1) * step.backward_end_us;
  if (!zero1) {
    row.compute_us = earlier + step.compute_us();
    row.exposed_us = exposed_grads;
  } else {
    // The optimizer and the parameters' cast on this rank's shard; the grad
    // norm's partial sums meet in one scalar all-reduce.
    const double sharded = (step.optimizer_us + step.param_cast_us) / static_cast<double>(n);
    row.compute_us = earlier + step.backward_end_us - step.param_cast_us + sharded;
    const double norm = CollectiveUs(link, Collective::kAllReduce, 4, n);
    const auto [gather, first] = GatherUs(link, step.gather_bytes, config.bucket_bytes, n);
    const double exposed_gather = config.gather == GatherMode::kAfterOptimizer
                                      ? gather
                                      : std::max(first, gather - step.forward_us);
    row.comm_us += norm + gather;
    row.exposed_us = exposed_grads + norm + exposed_gather;
  }
  row.step_us = row.compute_us + row.exposed_us;
  const double tokens = static_cast<double>(n * step.tokens * config.grad_accum);
  row.tokens_per_second = row.step_us > 0 ? tokens / (row.step_us * 1e-6) : 0;
  const double one_gpu_us =
      static_cast<double>(config.grad_accum - 1) * step.backward_end_us + step.compute_us();
  row.efficiency = row.step_us > 0 ? one_gpu_us / row.step_us : 0;
  return row;
}

std::vector<ScalingRow> SimulateSteps(const StepTimeline& step, const LinkModel& link,
                                      ScalingConfig config, std::span<const int64_t> gpus) {
  std::vector<ScalingRow> rows;
  for (int64_t n : gpus) {
    config.gpus = n;
    rows.push_back(SimulateStep(step, link, config));
  }
  return rows;
}

std::string DescribeConfig(const ScalingConfig& config) {
  std::string s = fmt::format("zero {}, {} {}, buckets {} MiB", config.zero,
                              config.zero == 1 ? "reduce-scatter" : "all-reduce",
                              config.bf16_gradients ? "bf16" : "f32", MiB(config.bucket_bytes));
  if (config.first_bucket_bytes > 0)
    s += fmt::format(" (first {} MiB)", MiB(config.first_bucket_bytes));
  if (config.zero == 1) {
    s += config.gather == GatherMode::kAfterOptimizer ? ", all-gather after the optimizer"
                                                      : ", all-gather during the next forward";
  }
  if (config.grad_accum > 1) s += fmt::format(", grad-accum {}", config.grad_accum);
  return s;
}

}  // namespace gptc::perf
