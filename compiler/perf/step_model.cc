#include "compiler/perf/step_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/program/gpu_spec.h"
#include "compiler/program/plan.h"
#include "compiler/support/text.h"

namespace gptc::perf {
namespace {

// The plan's entries a step runs, with how often.
std::vector<std::pair<const program::EntryPlan*, int64_t>> StepEntries(const program::Plan& plan,
                                                                       int64_t grad_accum) {
  std::vector<std::pair<const program::EntryPlan*, int64_t>> out;
  for (const program::EntryPlan& e : plan.entries) {
    if (e.role == program::EntryRole::kTrainStep) out.emplace_back(&e, 1);
  }
  if (!out.empty()) return out;
  for (const program::EntryPlan& e : plan.entries) {
    if (e.role == program::EntryRole::kAccumulate) out.emplace_back(&e, grad_accum);
  }
  for (const program::EntryPlan& e : plan.entries) {
    if (e.role == program::EntryRole::kApply) out.emplace_back(&e, 1);
  }
  return out;
}

// A gemm's operands and results once: A, B, C when accumulated, D, the bias
// and the aux matrix.
int64_t GemmBytes(const program::GemmThunk& g) {
  int64_t bytes = g.a.size + g.b.size + g.d.size;
  if (g.config.beta != 0) bytes += g.c.size;
  if (g.bias) bytes += g.bias->size;
  if (g.aux) bytes += g.aux->size;
  return bytes;
}

std::string LaunchKey(const StepLaunch& l) {
  std::string key = fmt::format("{}|{},{},{}|{},{},{}|{}", l.kernel, l.shape.grid.x, l.shape.grid.y,
                                l.shape.grid.z, l.shape.block.x, l.shape.block.y, l.shape.block.z,
                                l.shape.dynamic_shared_bytes);
  for (int64_t b : l.shape.param_bytes) key += fmt::format(",{}", b);
  return key;
}

}  // namespace

namespace {

// The kind-specific half of a thunk's launch; false: the step does not run
// it (a fallback kernel, an all-reduce on one GPU).
StatusOr<bool> FillLaunch(const program::Thunk& t, const std::map<std::string, int32_t>& kernels,
                          StepLaunch& l) {
  switch (t.kind()) {
    case program::ThunkKind::kKernel: {
      const auto& k = std::get<program::KernelThunk>(t.body);
      if (k.fallback) return false;
      auto it = kernels.find(t.name);
      if (it == kernels.end()) {
        return Error("{}: kernel {} has no PTX in the artifact", t.Describe(), t.name);
      }
      l.kind = StepLaunch::Kind::kKernel;
      l.fusion_kind = k.fusion_kind;
      l.kernel = it->second;
      l.shape.grid = {k.grid[0], k.grid[1], k.grid[2]};
      l.shape.block = {k.block[0], k.block[1], k.block[2]};
      l.shape.dynamic_shared_bytes = k.dynamic_smem;
      for (const program::ArenaSlice& a : k.args) l.shape.param_bytes.push_back(a.size);
      return true;
    }
    case program::ThunkKind::kGemm: {
      const auto& g = std::get<program::GemmThunk>(t.body);
      l.kind = StepLaunch::Kind::kGemm;
      l.fusion_kind = "gemm";
      l.gemm = {g.config.m,  g.config.n, g.config.k, g.config.batch_count, g.aux ? g.aux->size : 0,
                GemmBytes(g)};
      return true;
    }
    case program::ThunkKind::kCopy:
      l.kind = StepLaunch::Kind::kCopy;
      l.fusion_kind = "copy";
      l.bytes = std::get<program::CopyThunk>(t.body).bytes;
      return true;
    case program::ThunkKind::kConstant:
      l.kind = StepLaunch::Kind::kConstant;
      l.fusion_kind = "constant";
      return true;
    case program::ThunkKind::kAllReduce:
      return false;
    case program::ThunkKind::kUnsupported:
      return Error("{}: the artifact is incomplete ({})", t.Describe(),
                   std::get<program::UnsupportedThunk>(t.body).reason);
  }
  return false;
}

// The entry's kernels, parsed once, appended to `out`; by name.
StatusOr<std::map<std::string, int32_t>> EntryKernels(const program::Artifact& artifact,
                                                      const std::string& entry, StepProgram& out) {
  const std::string* ptx = artifact.Find("ptx");
  if (!ptx) return Error("the artifact has no ptx section");
  std::map<std::string, int32_t> index;
  for (const program::KernelRecord& r : artifact.manifest.kernels) {
    if (r.entry != entry || r.ptx_size <= 0) continue;
    if (r.ptx_offset < 0 || r.ptx_offset + r.ptx_size > static_cast<int64_t>(ptx->size())) {
      return Error("kernel {} of {}: its PTX lies outside the ptx section", r.name, entry);
    }
    auto parsed = ParsePtx(std::string_view(*ptx).substr(r.ptx_offset, r.ptx_size));
    if (!parsed.ok()) return parsed.status().WithPrefix(fmt::format("kernel {}", r.name));
    for (PtxKernel& k : *parsed) {
      index[k.name] = static_cast<int32_t>(out.kernels.size());
      if (r.registers > 0) out.registers[k.name] = r.registers;
      out.kernels.push_back(std::move(k));
    }
  }
  return index;
}

}  // namespace

StatusOr<StepProgram> StepProgramOf(const program::Artifact& artifact) {
  ASSIGN_OR_RETURN(program::Plan plan, program::PlanFromJson(artifact.plan));
  const program::Manifest& manifest = artifact.manifest;
  auto entries = StepEntries(plan, manifest.flags.grad_accum);
  if (entries.empty()) return Error("the plan has no train_step or accumulate entry");
  StepProgram out;
  out.tokens = manifest.flags.batch * manifest.flags.seq * manifest.flags.grad_accum;
  const program::GpuSpec h100 = program::GpuSpec::H100();
  for (const auto& [entry, repeat] : entries) {
    const std::string entry_name(entry->name());
    ASSIGN_OR_RETURN(const auto kernels, EntryKernels(artifact, entry_name, out));
    for (const program::Thunk& t : entry->thunks) {
      StepLaunch l;
      l.name = t.name;
      l.meta = t.meta;
      l.entry = entry_name;
      l.thunk = t.index;
      l.repeat = repeat;
      if (t.cost) {
        l.roofline_us = h100.RooflineUs(
            t.cost->flops, static_cast<double>(t.cost->bytes_read + t.cost->bytes_written));
      }
      ASSIGN_OR_RETURN(const bool runs, FillLaunch(t, kernels, l));
      if (runs) out.launches.push_back(std::move(l));
    }
  }
  return out;
}

StatusOr<StepEstimate> EstimateStep(const StepProgram& program, const MachineModel& machine,
                                    const std::function<void(int64_t, int64_t)>& progress) {
  StepEstimate out;
  std::map<std::string, KernelTime> cache;
  int64_t distinct = 0;
  {
    std::map<std::string, bool> keys;
    for (const StepLaunch& l : program.launches) {
      if (l.kind == StepLaunch::Kind::kKernel) keys[LaunchKey(l)] = true;
    }
    distinct = static_cast<int64_t>(keys.size());
  }
  for (const StepLaunch& l : program.launches) {
    LaunchEstimate e;
    switch (l.kind) {
      case StepLaunch::Kind::kKernel: {
        if (l.kernel < 0 || l.kernel >= static_cast<int32_t>(program.kernels.size())) {
          return Error("launch of {}: no kernel", l.name);
        }
        const std::string key = LaunchKey(l);
        auto it = cache.find(key);
        if (it == cache.end()) {
          const PtxKernel& k = program.kernels[l.kernel];
          auto reg = program.registers.find(k.name);
          KernelLaunch launch{&k, l.shape, reg == program.registers.end() ? 0 : reg->second};
          auto t = EstimateKernel(launch, machine);
          if (!t.ok()) return t.status();
          it = cache.emplace(key, *t).first;
          if (progress) progress(static_cast<int64_t>(cache.size()), distinct);
        }
        e.kernel = it->second;
        e.us = it->second.us;
        out.kernel_us += e.us * l.repeat;
        break;
      }
      case StepLaunch::Kind::kGemm:
        e.us = GemmMicroseconds(l.gemm, machine);
        out.gemm_us += e.us * l.repeat;
        break;
      case StepLaunch::Kind::kCopy:
        e.us = 2.0 * static_cast<double>(l.bytes) /
                   (machine.dram_bytes_per_clock * machine.clock_mhz) +
               machine.launch_us;
        out.other_us += e.us * l.repeat;
        break;
      case StepLaunch::Kind::kConstant:
        e.us = machine.launch_us;
        out.other_us += e.us * l.repeat;
        break;
    }
    out.roofline_us += l.roofline_us * l.repeat;
    out.launches.push_back(std::move(e));
  }
  return out;
}

nlohmann::json StepEstimateJson(const StepProgram& program, const StepEstimate& estimate) {
  static constexpr const char* kKinds[] = {"kernel", "gemm", "copy", "constant"};
  nlohmann::json launches = nlohmann::json::array();
  for (size_t i = 0; i < program.launches.size(); ++i) {
    const StepLaunch& l = program.launches[i];
    nlohmann::json row{{"entry", l.entry},
                       {"thunk", l.thunk},
                       {"kind", kKinds[static_cast<int>(l.kind)]},
                       {"name", l.name},
                       {"fusion_kind", l.fusion_kind},
                       {"repeat", l.repeat},
                       {"us", estimate.launches[i].us},
                       {"roofline_us", l.roofline_us}};
    if (l.kind == StepLaunch::Kind::kGemm) {
      row["m"] = l.gemm.m;
      row["n"] = l.gemm.n;
      row["k"] = l.gemm.k;
      row["batch"] = l.gemm.batch;
      row["aux_bytes"] = l.gemm.aux_bytes;
      row["bytes"] = l.gemm.bytes;
    }
    if (const auto& k = estimate.launches[i].kernel) {
      row["bound"] = k->bound;
      row["blocks_per_sm"] = k->blocks_per_sm;
      row["warps_per_scheduler"] = k->warps_per_scheduler;
      row["use"] = {{"issue", k->issue_use},
                    {"tensor", k->tensor_use},
                    {"shared", k->mio_use},
                    {"dram", k->dram_use}};
      nlohmann::json stalls = nlohmann::json::object();
      for (int s = 0; s < kNumStalls; ++s) {
        stalls[StallName(static_cast<Stall>(s))] = k->stalls_per_issue[s];
      }
      row["stalls_per_issue"] = std::move(stalls);
      row["dram_bytes"] = k->dram_bytes;
    }
    launches.push_back(std::move(row));
  }
  return {{"format", "gptc-estimate-1"},
          {"step_us", estimate.us()},
          {"kernel_us", estimate.kernel_us},
          {"gemm_us", estimate.gemm_us},
          {"other_us", estimate.other_us},
          {"roofline_us", estimate.roofline_us},
          {"tokens", program.tokens},
          {"tokens_per_second", estimate.TokensPerSecond(program.tokens)},
          {"launches", std::move(launches)}};
}

std::string FormatStepEstimate(const StepProgram& program, const StepEstimate& estimate,
                               int64_t rows) {
  std::string out = fmt::format(
      "H100 step estimate (Note [step model]): {:.2f} ms = kernels {:.2f} + gemms {:.2f} + other "
      "{:.2f}; {} tok/s",
      estimate.us() / 1000, estimate.kernel_us / 1000, estimate.gemm_us / 1000,
      estimate.other_us / 1000,
      WithThousands(static_cast<int64_t>(estimate.TokensPerSecond(program.tokens))));
  if (estimate.roofline_us > 0) {
    out += fmt::format(" (roofline {:.2f} ms)", estimate.roofline_us / 1000);
  }
  out += "\n";
  // One row per kernel (by name) or gemm (by scope and shape).
  struct Row {
    std::string what;
    int64_t calls = 0;
    double us = 0, roofline = 0;
    const LaunchEstimate* sample = nullptr;
  };
  std::map<std::string, Row> by;
  for (size_t i = 0; i < program.launches.size(); ++i) {
    const StepLaunch& l = program.launches[i];
    std::string key;
    switch (l.kind) {
      case StepLaunch::Kind::kKernel:
        key = "kernel " + program.kernels[l.kernel].name;
        break;
      case StepLaunch::Kind::kGemm:
        key = fmt::format("gemm m={} n={} k={}{}", l.gemm.m, l.gemm.n, l.gemm.k,
                          l.gemm.batch > 1 ? fmt::format(" x{}", l.gemm.batch) : "");
        break;
      case StepLaunch::Kind::kCopy:
        key = "copies";
        break;
      case StepLaunch::Kind::kConstant:
        key = "constants";
        break;
    }
    Row& r = by[key];
    r.what = key;
    r.calls += l.repeat;
    r.us += estimate.launches[i].us * l.repeat;
    r.roofline += l.roofline_us * l.repeat;
    if (!r.sample) r.sample = &estimate.launches[i];
  }
  std::vector<Row> sorted;
  for (auto& [k, r] : by) sorted.push_back(r);
  std::sort(sorted.begin(), sorted.end(), [](const Row& a, const Row& b) { return a.us > b.us; });
  out += fmt::format("{:<56} {:>5} {:>10} {:>9} {:>8}  {}\n", "launch", "calls", "us/call",
                     "ms/step", "roofline", "bound (blocks/SM, warps/scheduler)");
  for (int64_t i = 0; i < static_cast<int64_t>(sorted.size()) && i < rows; ++i) {
    const Row& r = sorted[i];
    std::string bound;
    if (r.sample->kernel) {
      const KernelTime& k = *r.sample->kernel;
      bound = fmt::format("{} ({}, {})", k.bound, k.blocks_per_sm, k.warps_per_scheduler);
      if (k.unknown_branches > 0) bound += ", branches on data";
    }
    out += fmt::format("{:<56} {:>5} {:>10.1f} {:>9.3f} {:>8}  {}\n", r.what.substr(0, 56), r.calls,
                       r.us / r.calls, r.us / 1000,
                       r.roofline > 0 ? fmt::format("{:.1f}", r.roofline / r.calls) : "-", bound);
  }
  if (static_cast<int64_t>(sorted.size()) > rows) {
    out += fmt::format("... {} more\n", sorted.size() - rows);
  }
  return out;
}

}  // namespace gptc::perf
