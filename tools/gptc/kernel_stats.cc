// gptc inspect --kernel-stats: each kernel's static PTX statements by class
// (Note [counting PTX] in compiler/support/ptx_stats.h), per mma for the
// tensor-core kernels, with ptxas's registers and spills, the static shared
// memory and the blocks an H100 multiprocessor holds at that; and --cubins:
// the kernels' ptxas objects as files, for cuobjdump -sass on a GPU machine.
#include <algorithm>
#include <filesystem>
#include <map>
#include <string>

#include "compiler/program/container.h"
#include "compiler/program/manifest.h"
#include "compiler/program/plan.h"
#include "compiler/support/file.h"
#include "compiler/support/ptx_stats.h"
#include "compiler/support/text.h"
#include "tools/gptc/commands.h"

namespace gptc::tools {
namespace {

// What the plan says of one kernel: its launches and launch shape.
struct KernelLaunches {
  std::string kind;
  int64_t launches = 0, threads = 0, dynamic_smem = 0;
};

std::map<std::pair<std::string, std::string>, KernelLaunches> LaunchesByKernel(
    const program::Plan& plan) {
  std::map<std::pair<std::string, std::string>, KernelLaunches> out;
  for (const program::EntryPlan& e : plan.entries) {
    for (const program::Thunk& t : e.thunks) {
      const auto* k = std::get_if<program::KernelThunk>(&t.body);
      if (k == nullptr) continue;
      KernelLaunches& l = out[{std::string(e.name()), t.name}];
      l.kind = k->fusion_kind;
      l.launches += k->fallback ? 0 : 1;
      l.threads = k->block[0] * k->block[1] * k->block[2];
      l.dynamic_smem = k->dynamic_smem;
    }
  }
  return out;
}

std::string ClassCells(const PtxCounts& c) {
  std::string s;
  for (int i = 0; i < kNumPtxClasses; ++i) {
    s += fmt::format(" {:>{}}", c.by_class[i],
                     std::max<size_t>(5, PtxClassName(static_cast<PtxClass>(i)).size()));
  }
  return s;
}

std::string PerMma(const PtxCounts& c) {
  return c.of(PtxClass::kMma) == 0 ? std::string("-") : fmt::format("{:.1f}", c.PerMma());
}

}  // namespace

StatusOr<std::string> KernelStatsTable(const program::Artifact& a, std::string_view filter) {
  const std::string* ptx = a.Find("ptx");
  if (ptx == nullptr) return Error("the artifact has no PTX (compiled with --no-codegen)");
  ASSIGN_OR_RETURN(program::Plan plan, program::PlanFromJson(a.plan));
  const auto launches = LaunchesByKernel(plan);
  std::string header =
      fmt::format("{:<11} {:<44} {:<14} {:>5} {:>4} {:>5} {:>9} {:>6} {:>6} {:>5}", "entry",
                  "kernel", "kind", "calls", "regs", "spill", "smem", "blk/SM", "stmts", "/mma");
  for (int i = 0; i < kNumPtxClasses; ++i) {
    const std::string_view name = PtxClassName(static_cast<PtxClass>(i));
    header += fmt::format(" {:>{}}", name, std::max<size_t>(5, name.size()));
  }
  std::string s = header + "\n";
  int64_t shown = 0;
  for (const program::KernelRecord& k : a.manifest.kernels) {
    if (!filter.empty() && k.name.find(filter) == std::string::npos) continue;
    if (k.ptx_offset < 0 || k.ptx_size < 0 ||
        static_cast<size_t>(k.ptx_offset + k.ptx_size) > ptx->size()) {
      return Error("kernel {} of entry {}: its PTX lies outside the ptx section", k.name, k.entry);
    }
    const std::vector<PtxKernelStats> stats =
        AnalyzePtx(std::string_view(*ptx).substr(k.ptx_offset, k.ptx_size));
    const auto it = std::find_if(stats.begin(), stats.end(),
                                 [&](const PtxKernelStats& p) { return p.name == k.name; });
    if (it == stats.end()) return Error("kernel {}: no .entry of that name in its PTX", k.name);
    const auto l = launches.find({k.entry, k.name});
    const KernelLaunches launch = l == launches.end() ? KernelLaunches{} : l->second;
    const int64_t smem = it->static_shared_bytes + launch.dynamic_smem;
    s += fmt::format("{:<11} {:<44} {:<14} {:>5} {:>4} {:>5} {:>9} {:>6} {:>6} {:>5}{}\n", k.entry,
                     k.name, launch.kind, launch.launches, k.registers, k.spill_bytes,
                     FormatBytes(smem, 1), BlocksPerSm(launch.threads, k.registers, smem),
                     it->whole.total(), PerMma(it->whole), ClassCells(it->whole));
    for (size_t i = 0; i < it->mma_loops.size(); ++i) {
      const PtxCounts& loop = it->mma_loops[i];
      s += fmt::format("{:<11} {:<44} {:<14} {:>5} {:>4} {:>5} {:>9} {:>6} {:>6} {:>5}{}\n", "",
                       fmt::format("  mma loop {}", i + 1), "", "", "", "", "", "", loop.total(),
                       PerMma(loop), ClassCells(loop));
    }
    ++shown;
  }
  if (shown == 0) return Error("no kernel name contains '{}'", filter);
  return s;
}

StatusOr<int64_t> WriteCubins(const program::Artifact& a, std::string_view filter,
                              const std::string& dir) {
  const std::string* cubins = a.Find("cubin");
  if (cubins == nullptr) {
    return Error("the artifact has no cubin section (ptxas was not found when it was compiled)");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error("--cubins {}: {}", dir, ec.message());
  int64_t written = 0;
  for (const program::KernelRecord& k : a.manifest.kernels) {
    if (!k.cubin || (!filter.empty() && k.name.find(filter) == std::string::npos)) continue;
    const auto [offset, size] = *k.cubin;
    if (offset < 0 || size < 0 || static_cast<size_t>(offset + size) > cubins->size()) {
      return Error("kernel {} of entry {}: its cubin lies outside the cubin section", k.name,
                   k.entry);
    }
    const std::string path = fmt::format("{}/{}.{}.cubin", dir, k.entry, k.name);
    RETURN_IF_ERROR(WriteFileAtomically(path, std::string_view(*cubins).substr(offset, size)));
    ++written;
  }
  if (written == 0) return Error("no kernel name contains '{}' (or none has a cubin)", filter);
  return written;
}

}  // namespace gptc::tools
