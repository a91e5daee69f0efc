// gptc simulate FILE.gptx: the data-parallel step predicted at N GPUs from
// one GPU's step (Note [scaling model] in compiler/perf/scaling_model.h):
// a table per configuration, one line a row, or --json.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compiler/perf/scaling_model.h"
#include "compiler/program/container.h"
#include "compiler/program/plan.h"
#include "compiler/support/text.h"
#include "tools/common/flags.h"
#include "tools/gptc/commands.h"
#include "tools/report/step_scaling.h"

namespace gptc::tools {
namespace {

using perf::ScalingConfig;
using perf::ScalingRow;

Flags SimulateFlags() {
  Flags flags(
      "gptc simulate",
      "FILE.gptx [--gpus 1,2,4,8,16,64,512] [--times model|roofline|PROFILE.json]\n"
      "      [--bucket-mib 25,...] [--first-bucket-mib M] [--zero 0,1] [--grad-comm f32|bf16]\n"
      "      [--gather after,overlap] [--grad-accum K] [--json]",
      "Predicts the train step of FILE.gptx (one rank's, a grad-accum 1 artifact) on N GPUs "
      "that each run it on their own rows: each thunk's time, the gradients in the order the "
      "backward finishes them, bucketed and communicated on one stream over NVLink (up to 8 "
      "GPUs) or InfiniBand, the communication that runs past the backward, tok/s and scaling "
      "efficiency. ZeRO-1 is predicted analytically. The model and its parameters: "
      "docs/DATA_PARALLEL.md, \"Scaling model\".");
  flags
      .Value("gpus", "N,...", "the GPU counts, one row each",
             fmt::format("{}", fmt::join(perf::kScalingGpuCounts, ",")))
      .Value("times", "model|roofline|FILE.json",
             "each thunk's time: the H100 model, the plan's H100 roofline, or a gptrun "
             "--profile-json of this artifact",
             "model")
      .Value("bucket-mib", "MIB,...",
             "bucket caps, one table each (25: gptc compile's default --bucket-mib)", "25")
      .Value("first-bucket-mib", "MIB",
             "a smaller first bucket, as PyTorch DDP's 1 (default: as the others, the combiner's "
             "rule)")
      .Value("zero", "0,1",
             "0: all-reduce every gradient (gptc --dp); 1: ZeRO-1, predicted (reduce-scatter, "
             "optimizer on a 1/N shard, all-gather of the parameters)",
             "0,1")
      .Value("grad-comm", "f32|bf16", "the gradients' dtype on the wire (bf16: as llm.c)", "f32")
      .Value("gather", "after,overlap",
             "ZeRO-1's all-gather: after the optimizer (exposed, as llm.c), or during the next "
             "forward",
             "after")
      .Value("grad-accum", "K",
             "micro-batches a step: K-1 forward+backward passes before the last, whose backward "
             "overlaps the communication",
             "1")
      .Bool("json", "the tables as JSON (gptc-simulate-1)");
  return flags;
}

// "a,b,c" as its items ("" is one empty item).
std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == sep) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

// A comma-separated list of flag `name`, each value at least `min`.
StatusOr<std::vector<double>> NumberList(const Flags& flags, const std::string& name, double min,
                                         bool integers) {
  std::vector<double> out;
  for (const std::string& item : Split(flags.Get(name), ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !std::isfinite(v) || v < min ||
        (integers && v != std::floor(v))) {
      return UsageError("--{}: '{}' is not {} of at least {}", name, item,
                        integers ? "a whole number" : "a number", min);
    }
    out.push_back(v);
  }
  return out;
}

struct Options {
  std::vector<int64_t> gpus;
  std::vector<ScalingConfig> configs;
  std::string times;
  bool json = false;
};

StatusOr<Options> ParseOptions(const Flags& flags) {
  Options o{.times = flags.Get("times"), .json = flags.Has("json")};
  ASSIGN_OR_RETURN(const auto gpus, NumberList(flags, "gpus", 1, true));
  ASSIGN_OR_RETURN(const auto mib, NumberList(flags, "bucket-mib", 0.001, false));
  ASSIGN_OR_RETURN(const auto zero, NumberList(flags, "zero", 0, true));
  ASSIGN_OR_RETURN(const auto accum, NumberList(flags, "grad-accum", 1, true));
  if (accum.size() != 1) return UsageError("--grad-accum takes one number");
  double first = 0;
  if (flags.Has("first-bucket-mib")) {
    ASSIGN_OR_RETURN(const auto f, NumberList(flags, "first-bucket-mib", 0.001, false));
    if (f.size() != 1) return UsageError("--first-bucket-mib takes one number");
    first = f[0];
  }
  const std::string comm = flags.Get("grad-comm");
  if (comm != "f32" && comm != "bf16") {
    return UsageError("--grad-comm must be f32 or bf16, got '{}'", comm);
  }
  std::vector<perf::GatherMode> gathers;
  for (const std::string& g : Split(flags.Get("gather"), ',')) {
    if (g != "after" && g != "overlap") {
      return UsageError("--gather: '{}' is neither after nor overlap", g);
    }
    gathers.push_back(g == "after" ? perf::GatherMode::kAfterOptimizer
                                   : perf::GatherMode::kOverlapForward);
  }
  for (double g : gpus) o.gpus.push_back(static_cast<int64_t>(g));
  for (double z : zero) {
    if (z > 1) return UsageError("--zero: {} is neither 0 nor 1", z);
    for (double m : mib) {
      for (size_t i = 0; i < (z == 1 ? gathers.size() : 1); ++i) {
        o.configs.push_back({.bucket_bytes = std::llround(m * (1 << 20)),
                             .first_bucket_bytes = std::llround(first * (1 << 20)),
                             .zero = static_cast<int>(z),
                             .bf16_gradients = comm == "bf16",
                             .gather = gathers[i],
                             .grad_accum = static_cast<int64_t>(accum[0])});
      }
    }
  }
  return o;
}

// The train_step's timeline: its times, the gradients, the all-gather's
// bytes. Errors name the artifact, or --times for the time source's.
StatusOr<perf::StepTimeline> TimelineOf(const program::Artifact& a, const std::string& path,
                                        const Options& o, std::string& source) {
  RETURN_IF_ERROR(report::CheckUnsharded(a, path));
  StatusOr<program::Plan> plan = program::PlanFromJson(a.plan);
  if (!plan.ok()) return plan.status().WithPrefix(path);
  ASSIGN_OR_RETURN(const program::EntryPlan* entry, report::TrainStepEntry(*plan, a, path));
  ASSIGN_OR_RETURN(report::ThunkTimes times, report::TimesOf(a, path, *entry, o.times));
  source = times.Described();
  return report::TrainStepTimeline(a, path, *entry, times);
}

std::string Header(const program::Artifact& a, const perf::StepTimeline& t,
                   const std::string& source, const perf::LinkModel& link) {
  const program::CompileFlags& f = a.manifest.flags;
  int64_t grad_bytes = 0;
  for (const perf::GradientReady& g : t.gradients) grad_bytes += g.bytes;
  std::string s =
      fmt::format("{}: batch {} x seq {} a GPU ({} tokens), remat {}; times: {}\n",
                  a.manifest.model.name, f.batch, f.seq, WithThousands(t.tokens), f.remat, source);
  s += fmt::format(
      "one GPU: step {:.2f} ms = forward {:.2f} + backward {:.2f} + optimizer {:.2f} (param "
      "cast {:.2f}); {} gradients, {}, final from {:.2f} to {:.2f} ms; parameters to gather {}\n",
      t.compute_us() / 1e3, t.forward_us / 1e3, (t.backward_end_us - t.forward_us) / 1e3,
      t.optimizer_us / 1e3, t.param_cast_us / 1e3, t.gradients.size(), FormatBytes(grad_bytes),
      t.gradients.front().ready_us / 1e3, t.gradients.back().ready_us / 1e3,
      FormatBytes(t.gather_bytes));
  s += fmt::format(
      "link: up to {} GPUs a node over NVLink, {:g} GB/s bus bandwidth; beyond, the network at "
      "{:g} GB/s a GPU; ring latency {:g} us + {:g} us an NVLink step + {:g} us a network step; "
      "across nodes an all-reduce may take NCCL's tree ({:g} us a level in a node, {:g} across)\n",
      link.gpus_per_node, link.nvlink_bus_gbs, link.network_bus_gbs, link.base_latency_us,
      link.nvlink_step_us, link.network_step_us, link.tree_nvlink_step_us,
      link.tree_network_step_us);
  return s;
}

}  // namespace

int SimulateCommand(int argc, char** argv) {
  Flags flags = SimulateFlags();
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  if (flags.positional().size() != 1) return Fail(UsageError("simulate takes one FILE.gptx"));
  StatusOr<Options> o = ParseOptions(flags);
  if (!o.ok()) return Fail(o.status());
  const std::string& path = flags.positional()[0];
  StatusOr<program::Artifact> a = program::ReadArtifact(path);
  if (!a.ok()) return Fail(1, a.status());
  std::string source;
  StatusOr<perf::StepTimeline> timeline = TimelineOf(*a, path, *o, source);
  if (!timeline.ok()) return Fail(1, timeline.status());
  const perf::LinkModel link;
  std::string text = Header(*a, *timeline, source, link);
  nlohmann::json tables = nlohmann::json::array();
  for (ScalingConfig config : o->configs) {
    nlohmann::json rows = nlohmann::json::array();
    std::string table;
    int64_t buckets = 0;
    for (const ScalingRow& r : perf::SimulateSteps(*timeline, link, config, o->gpus)) {
      buckets = r.buckets;
      rows.push_back(report::ScalingRowJson(r));
      table += fmt::format("{:>5} {:>10.2f} {:>11.2f} {:>10.2f} {:>14} {:>10.3f}\n", r.config.gpus,
                           r.step_us / 1e3, r.exposed_us / 1e3, r.comm_us / 1e3,
                           WithThousands(std::llround(r.tokens_per_second)), r.efficiency);
    }
    const std::string what = perf::DescribeConfig(config);
    text += fmt::format("\n{} ({} bucket{})\n{:>5} {:>10} {:>11} {:>10} {:>14} {:>10}\n{}", what,
                        buckets, buckets == 1 ? "" : "s", "N", "step ms", "exposed ms", "comm ms",
                        "tok/s", "efficiency", table);
    tables.push_back({{"config", what},
                      {"zero", config.zero},
                      {"bucket_bytes", config.bucket_bytes},
                      {"rows", rows}});
  }
  if (o->json) {
    const nlohmann::json j = {{"format", "gptc-simulate-1"},
                              {"artifact", path},
                              {"model", a->manifest.model.name},
                              {"times", source},
                              {"one_gpu_step_ms", timeline->compute_us() / 1e3},
                              {"link", report::LinkJson(link)},
                              {"tables", tables}};
    text = j.dump(1) + "\n";
  }
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace gptc::tools
