#include "compiler/artifact/writer.h"

#include <chrono>
#include <optional>
#include <set>
#include <variant>

#include "compiler/ir/printer.h"
#include "compiler/program/container.h"
#include "compiler/program/emu_abi.h"
#include "compiler/program/manifest.h"
#include "compiler/program/param.h"
#include "gptc_version.h"

namespace gptc::artifact {

namespace {

class Stopwatch {
 public:
  double Lap() {
    auto now = std::chrono::steady_clock::now();
    double s = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// The ptx, cubin and emu sections and their indexes, kernel by kernel.
struct KernelSections {
  std::string ptx, cubin;
  std::vector<program::KernelRecord> kernel_index;
  // --emu: the host objects of every kernel and their index (Note [host kernels]).
  std::vector<std::string> host_objects;
  std::set<std::string> host_symbols;
  std::vector<program::HostKernelRecord> host_index;
  int64_t kernels = 0, cubins = 0;

  void Add(const std::string& entry, codegen::CompiledKernels& compiled) {
    for (codegen::CompiledKernel& k : compiled.kernels) {
      // A deduplicated fusion launches the kernel whose code it shares
      // (Note [kernel deduplication]); the code is stored once.
      if (k.code_of >= 0) continue;
      program::KernelRecord index{.entry = entry,
                                  .name = k.spec.name,
                                  .ptx_offset = static_cast<int64_t>(ptx.size()),
                                  .ptx_size = static_cast<int64_t>(k.ptx.size())};
      ptx += k.ptx;
      if (k.ptxas && !k.ptxas->cubin.empty()) {
        index.cubin = std::pair{static_cast<int64_t>(cubin.size()),
                                static_cast<int64_t>(k.ptxas->cubin.size())};
        index.registers = k.ptxas->registers;
        index.spill_bytes = k.ptxas->spill_stores + k.ptxas->spill_loads;
        cubin += k.ptxas->cubin;
        ++cubins;
      }
      kernel_index.push_back(std::move(index));
      ++kernels;
      if (k.host) AddHost(entry, k);
    }
  }

  // What the emulated driver answers for the kernel (cuFuncGetAttribute on
  // a GPU): its parameters, registers and static shared memory.
  void AddHost(const std::string& entry, codegen::CompiledKernel& k) {
    host_index.push_back(program::HostKernelRecord{
        .entry = entry,
        .name = k.spec.name,
        .symbol = k.host->symbol,
        .params = static_cast<int64_t>(k.spec.params.size()),
        .uses_sync = k.host->uses_sync,
        .host_shared_bytes = static_cast<int64_t>(k.host->shared_bytes),
        .static_smem = k.ptxas ? k.ptxas->shared_bytes : k.spec.static_shared_bytes,
        .registers = k.ptxas ? k.ptxas->registers : 0,
        .barriers = k.host->barriers,
        .shuffles = k.host->shuffles,
        .mmas = k.host->mmas,
        .ldmatrices = k.host->ldmatrices,
        .atomics = k.host->atomics,
        .accesses = k.host->accesses,
        .wgmmas = k.host->wgmmas});
    // A kernel shared with an earlier entry has its host object there.
    if (host_symbols.insert(k.host->symbol).second) host_objects.push_back(std::move(k.host->object));
  }
};

// Every entry's kernels on one pool of threads (codegen::CompileFusions).
StatusOr<std::vector<codegen::CompiledKernels>> CompileKernels(
    const program::TrainProgram& program, const ArtifactOptions& options) {
  if (!options.compile_kernels) {
    return std::vector<codegen::CompiledKernels>(program.entries.size());
  }
  std::vector<codegen::CodegenModule> modules;
  for (const program::TrainEntry& entry : program.entries) {
    modules.push_back({entry.module.get(),
                       fmt::format("{}{}__", program::emu::kKernelSymbolPrefix, entry.name())});
  }
  codegen::CodegenOptions codegen = options.codegen;
  codegen.progress = options.progress;
  return codegen::CompileFusions(modules, codegen);
}

}  // namespace

StatusOr<BuiltArtifact> BuildArtifact(const program::TrainProgram& program,
                                      const ArtifactOptions& options) {
  RETURN_IF_ERROR(codegen::CheckCodegenOptions(options.codegen));
  const analysis::ProgramBuffers* buffers = options.buffers;
  if (buffers == nullptr || buffers->assignments.size() != program.entries.size() ||
      buffers->hosts.size() != program.entries.size()) {
    return Error("{} buffer assignments for {} entries",
                 buffers != nullptr ? buffers->assignments.size() : 0, program.entries.size());
  }
  BuiltArtifact out;
  double t_codegen = 0, t_plan = 0;
  Stopwatch watch;
  std::string ir_text;
  KernelSections sections;
  program::Plan plan;
  ASSIGN_OR_RETURN(std::vector<codegen::CompiledKernels> entry_kernels,
                   CompileKernels(program, options));
  t_codegen += watch.Lap();
  for (size_t e = 0; e < program.entries.size(); ++e) {
    const program::TrainEntry& entry = program.entries[e];
    codegen::CompiledKernels& kernels = entry_kernels[e];
    for (const codegen::CompiledKernel& k : kernels.kernels) {
      if (k.code_of < 0 && k.lower_seconds + k.ptxas_seconds > 0)
        out.kernel_seconds.push_back({k.spec.name, k.lower_seconds, k.ptxas_seconds});
    }
    ir_text += ir::PrintModule(*entry.module);
    const analysis::BufferAssignment& ba = buffers->assignments[e];
    watch.Lap();
    ASSIGN_OR_RETURN(program::EntryPlan entry_plan, BuildEntryPlan(entry, ba, kernels, out.stats));
    if (const int host = buffers->hosts[e]; host >= 0) {
      entry_plan.arena_host = program.entries[host].role;
    }
    t_plan += watch.Lap();
    sections.Add(std::string(entry.name()), kernels);
    out.arena_bytes.push_back(entry_plan.arena_size);
    for (const program::Thunk& t : entry_plan.thunks) {
      const auto* k = std::get_if<program::KernelThunk>(&t.body);
      if (k != nullptr && k->fallback) ++out.fallback_kernels;
    }
    plan.entries.push_back(std::move(entry_plan));
  }
  int64_t unsupported = 0;
  for (const auto& [what, n] : out.stats.unsupported) unsupported += n;
  out.complete = unsupported == 0;

  program::Manifest manifest{.format_version = program::kArtifactFormatVersion,
                             .gptc_version = GPTC_VERSION,
                             .target = options.codegen.target,
                             .complete = out.complete,
                             .model = options.model,
                             .flags = options.flags,
                             .kernels = std::move(sections.kernel_index),
                             .counts = out.stats};
  // The one record of grad_accum and world_size (the loader's), whatever the
  // caller's flags say.
  manifest.flags.grad_accum = program.grad_accum;
  manifest.flags.world_size = program.world_size;
  manifest.flags.zero_stage = program.zero_stage;
  std::string emu_library;
  if (options.codegen.emit_host && options.compile_kernels) {
    watch.Lap();
    ASSIGN_OR_RETURN(emu_library, codegen::LinkHostLibrary(std::move(sections.host_objects)));
    manifest.emu = program::EmuIndex{.abi = program::emu::kKernelAbiVersion,
                                     .kernels = std::move(sections.host_index)};
    t_codegen += watch.Lap();
  }
  out.kernels = sections.kernels;
  out.cubins = sections.cubins;
  std::vector<std::pair<std::string, std::string>> container;
  container.emplace_back("manifest", program::ToJson(manifest).dump(2) + "\n");
  container.emplace_back("ir", std::move(ir_text));
  container.emplace_back("ptx", std::move(sections.ptx));
  if (!sections.cubin.empty()) container.emplace_back("cubin", std::move(sections.cubin));
  container.emplace_back("plan", program::ToJson(plan).dump(1) + "\n");
  container.emplace_back("params", program::ParamsSectionJson(program.params).dump(1) + "\n");
  if (!emu_library.empty()) container.emplace_back("emu", std::move(emu_library));
  ASSIGN_OR_RETURN(out.bytes, program::EncodeArtifact(container));
  double t_encode = watch.Lap();
  out.timings = {{"codegen", t_codegen}, {"plan", t_plan}, {"encode", t_encode}};
  return out;
}

}  // namespace gptc::artifact
