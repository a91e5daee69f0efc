#include "compiler/codegen/codegen.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "compiler/codegen/attention_plan.h"  // HasBothBackwardParts
#include "compiler/codegen/gemm_fallback.h"
#include "compiler/codegen/lowering.h"
#include "compiler/ir/patterns.h"
#include "compiler/ir/printer.h"

namespace gptc::codegen {
namespace {

// "fusion.3" -> "fusion_3": PTX identifiers are [A-Za-z_][A-Za-z0-9_]*.
std::string SanitizeName(const std::string& name) {
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "k_" + out;
  return out;
}

}  // namespace

bool HasEmitter(ir::FusionKind kind) {
  return kind == ir::FusionKind::kLoop || kind == ir::FusionKind::kReduction ||
         kind == ir::FusionKind::kOptimizer || kind == ir::FusionKind::kCrossEntropy ||
         kind == ir::FusionKind::kAttention;
}

std::vector<const ir::Instruction*> FusionReduces(const ir::Computation& fused) {
  std::vector<const ir::Instruction*> reduces;
  for (const auto& inst : fused.instructions()) {
    if (inst->opcode() == ir::Opcode::kReduce) reduces.push_back(inst.get());
    if (inst->opcode() == ir::Opcode::kSoftmaxCrossEntropy && inst->called_computation()) {
      for (const ir::Instruction* r : FusionReduces(*inst->called_computation()))
        reduces.push_back(r);
    }
  }
  return reduces;
}

StatusOr<std::vector<bool>> MixedReductionColumnPart(const ir::Computation& fused) {
  // The kinds of reduce each instruction depends on: bit 0 row, bit 1 column.
  constexpr int kRow = 1, kColumn = 2;
  std::map<const ir::Instruction*, int> depends;
  int all = 0;
  const ir::Shape* row_input = nullptr;
  for (const auto& inst : fused.instructions()) {
    if (inst->called_computation() != nullptr) {
      return Error("%{}: a composite in a mixed row/column reduction", inst->name());
    }
    int d = 0;
    for (const ir::Instruction* op : inst->operands()) d |= depends[op];
    if (inst->opcode() == ir::Opcode::kReduce) {
      const std::vector<int64_t>& dims = inst->attrs().dimensions;
      bool prefix = !dims.empty();
      for (size_t i = 0; i < dims.size(); ++i)
        prefix = prefix && dims[i] == static_cast<int64_t>(i);
      const ir::Shape& in = inst->operand(0)->shape();
      if (ir::IsRowReduce(*inst)) {
        if (row_input != nullptr && row_input->dims() != in.dims()) {
          return Error("%{}: row reduces of different input shapes", inst->name());
        }
        row_input = &in;
        d |= kRow;
      } else if (prefix) {
        d |= kColumn;
      } else {
        return Error("%{}: reduces middle dims", inst->name());
      }
      all |= d;
    }
    depends[inst.get()] = d;
  }
  if (all != (kRow | kColumn)) return Error("not a mix of row and column reductions");
  std::vector<const ir::Instruction*> outputs;
  if (fused.root()->opcode() == ir::Opcode::kTuple) {
    outputs.assign(fused.root()->operands().begin(), fused.root()->operands().end());
  } else {
    outputs.push_back(fused.root());
  }
  std::vector<bool> column;
  for (const ir::Instruction* out : outputs) {
    if (depends[out] == (kRow | kColumn)) {
      return Error("output %{} depends on row and column reductions", out->name());
    }
    column.push_back(depends[out] == kColumn);
  }
  return column;
}

StatusOr<EmitterKind> ChooseEmitter(const ir::Instruction& inst) {
  if (inst.opcode() == ir::Opcode::kGather) return EmitterKind::kGather;
  if (inst.opcode() == ir::Opcode::kScatterAdd) return EmitterKind::kScatterAdd;
  if (inst.opcode() != ir::Opcode::kFusion || inst.called_computation() == nullptr) {
    return Error("opcode {} has no emitter", ir::OpcodeName(inst.opcode()));
  }
  ir::FusionKind kind = inst.attrs().fusion_kind;
  if (kind == ir::FusionKind::kLoop || kind == ir::FusionKind::kOptimizer) {
    return EmitterKind::kLoop;
  }
  if (kind == ir::FusionKind::kReduction || kind == ir::FusionKind::kCrossEntropy) {
    bool row = true, column = true, any = false;
    const ir::Shape* row_input = nullptr;  // a row reduction has one input shape
    for (const ir::Instruction* r : FusionReduces(*inst.called_computation())) {
      any = true;
      const std::vector<int64_t>& dims = r->attrs().dimensions;
      const ir::Shape& in = r->operand(0)->shape();
      int64_t rank = in.rank();
      row = row && dims == std::vector<int64_t>{rank - 1} &&
            (row_input == nullptr || row_input->dims() == in.dims());
      row_input = &in;
      bool prefix = !dims.empty();
      for (size_t i = 0; i < dims.size(); ++i)
        prefix = prefix && dims[i] == static_cast<int64_t>(i);
      column = column && prefix;
    }
    if (any && row) return EmitterKind::kRowReduction;
    if (any && column) return EmitterKind::kColumnReduction;
    StatusOr<std::vector<bool>> mixed = MixedReductionColumnPart(*inst.called_computation());
    if (kind == ir::FusionKind::kReduction && mixed.ok()) {
      return EmitterKind::kMixedReductionColumns;  // Note [mixed row and column reductions]
    }
    return Error("{} fusion mixes row and column reductions (or reduces middle dims): {}",
                 ir::FusionKindName(kind), mixed.ok() ? "cross-entropy" : mixed.status().message());
  }
  if (kind == ir::FusionKind::kAttention) {
    for (const auto& x : inst.called_computation()->instructions()) {
      if (x->opcode() == ir::Opcode::kAttention) return EmitterKind::kAttention;
      if (x->opcode() == ir::Opcode::kAttentionGrad) return EmitterKind::kAttentionBackward;
    }
    for (const auto& x : inst.called_computation()->instructions()) {
      if (x->opcode() == ir::Opcode::kAttentionLse) return EmitterKind::kAttention;
    }
    return Error("attention fusion without an attention, attention-lse or attention-grad op");
  }
  return Error("fusion kind {} has no emitter yet", ir::FusionKindName(kind));
}

Status CheckTarget(std::string_view target) {
  if (ParseTarget(target)) return Status::Ok();
  return Error("target {}: expected {}", target, TargetNames(", ", " or "));
}

Status CheckCodegenOptions(const CodegenOptions& options) {
  RETURN_IF_ERROR(CheckTarget(options.target));
  if (!TargetHas(*ParseTarget(options.target), options.attention_mma)) {
    return Error("attention on {} needs target {}, not {}", AttentionMmaName(options.attention_mma),
                 TargetName(*TargetRequiredBy(options.attention_mma)), options.target);
  }
  return Status::Ok();
}

StatusOr<CompiledKernel> CompileFusion(const ir::Instruction& fusion, std::string kernel_name,
                                       const CodegenOptions& options) {
  StatusOr<EmitterKind> kind = ChooseEmitter(fusion);
  if (!kind.ok()) {
    return kind.status().WithPrefix(fmt::format("kernel {} (%{})", kernel_name, fusion.name()));
  }
  return CompileKernel(fusion, *kind, std::move(kernel_name), options);
}

StatusOr<CompiledKernel> CompileKernel(const ir::Instruction& fusion, EmitterKind emitter,
                                       std::string kernel_name, const CodegenOptions& options) {
  RETURN_IF_ERROR(CheckCodegenOptions(options));
  auto start = std::chrono::steady_clock::now();
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  ASSIGN_OR_RETURN(LoweredKernel lowered, EmitAndLower(fusion, emitter, kernel_name, options));
  CompiledKernel kernel;
  kernel.lower_seconds = seconds_since(start);
  kernel.spec = std::move(lowered.spec);
  kernel.ptx = std::move(lowered.ptx);
  kernel.mlir = std::move(lowered.mlir);
  kernel.llvm_ir = std::move(lowered.llvm_ir);
  kernel.host = std::move(lowered.host);
  const KernelSpec& spec = kernel.spec;
  if (spec.block.product() > kMaxThreadsPerBlock) {
    return Error("kernel {}: block of {} threads exceeds {}", spec.name, spec.block.product(),
                 kMaxThreadsPerBlock);
  }
  if (spec.static_shared_bytes + spec.dynamic_shared_bytes > kMaxSharedBytesPerBlock) {
    return Error("kernel {}: {} bytes of shared memory exceed {}", spec.name,
                 spec.static_shared_bytes + spec.dynamic_shared_bytes, kMaxSharedBytesPerBlock);
  }
  if (!options.run_ptxas) return kernel;
  std::optional<std::string> ptxas = FindPtxas(options.ptxas_path);
  if (!ptxas) {
    if (options.require_ptxas) return Error("kernel {}: ptxas not found", spec.name);
    return kernel;
  }
  start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(PtxasInfo info, RunPtxas(*ptxas, kernel.ptx, spec.name, options.target));
  kernel.ptxas = std::move(info);
  kernel.ptxas_seconds = seconds_since(start);
  return kernel;
}

namespace {

std::string CanonicalComputation(const ir::Computation& c) {
  std::map<const ir::Instruction*, int64_t> numbers;
  std::string out = "{\n";
  for (const auto& inst : c.instructions()) {
    numbers[inst.get()] = static_cast<int64_t>(numbers.size());
    if (inst.get() == c.root()) out += "ROOT ";
    out += CanonicalInstruction(*inst, numbers);
    out += '\n';
  }
  return out + "}";
}

}  // namespace

std::string CanonicalInstruction(const ir::Instruction& inst,
                                 const std::map<const ir::Instruction*, int64_t>& numbers) {
  std::string line = ir::PrintInstruction(inst, /*origin=*/false);
  // "%name = " prefix.
  line.erase(0, inst.name().size() + 4);
  if (inst.opcode() != ir::Opcode::kParameter && inst.opcode() != ir::Opcode::kConstant) {
    // "shape opcode(%a, %b)..." -> "shape opcode(3, 5)..." (-1: not in the computation).
    std::string names;
    for (int64_t i = 0; i < inst.operand_count(); ++i)
      names += (i ? ", %" : "%") + inst.operand(i)->name();
    size_t open = inst.shape().ToString().size() + 1 + ir::OpcodeName(inst.opcode()).size();
    std::vector<std::string> ids;
    for (const ir::Instruction* op : inst.operands()) {
      auto it = numbers.find(op);
      ids.push_back(it == numbers.end() ? "-1" : std::to_string(it->second));
    }
    if (line.compare(open, 1, "(") == 0 && line.compare(open + 1, names.size(), names) == 0) {
      line.replace(open + 1, names.size(), fmt::format("{}", fmt::join(ids, ", ")));
    }
  }
  if (const ir::Computation* called = inst.called_computation()) {
    std::string calls = ", calls=%" + called->name();
    if (size_t at = line.find(calls); at != std::string::npos) line.erase(at, calls.size());
    line += ", calls=" + CanonicalComputation(*called);
  }
  return line;
}

namespace {

// A kernel to compile: Note [kernel deduplication] maps several to one.
struct KernelJob {
  const ir::Instruction* inst;
  EmitterKind emitter;
  std::string name;
  // Note [epilogue fallback]: the gemm fusion it stands in for, with
  // the gemm's operand and result its own operand 0 and result 0 stand for.
  const ir::Instruction* fallback_for = nullptr;
  KernelSpec::GemmFallback fallback = KernelSpec::GemmFallback::kNone;
  int64_t gemm_operand = -1, gemm_output = -1;
  size_t module = 0;  // CompileFusions of several modules: the module it is compiled for
};

}  // namespace

std::string KernelKey(const ir::Instruction& inst, EmitterKind emitter) {
  std::string key = fmt::format("emitter {}\n", static_cast<int>(emitter));
  key += CanonicalInstruction(inst, {});
  for (const ir::Instruction* op : inst.operands()) {
    key += '\n';
    key += op->shape().ToString();
  }
  return key;
}

namespace {

// Note [compile order]: a rough cost of compiling `inst`'s kernel, its fused
// instructions (an attention kernel counts as 300, which its tiles are in
// PTX), so that the costliest distinct kernels start first and the shortest
// fill the end: on 2 cores the compile is as long as its last thread.
int64_t CompileCost(const ir::Instruction& inst, EmitterKind emitter) {
  if (emitter == EmitterKind::kAttention || emitter == EmitterKind::kAttentionBackward ||
      emitter == EmitterKind::kAttentionBackwardKeys) {
    return 300;
  }
  const ir::Computation* fused = inst.called_computation();
  return fused == nullptr ? 1 : fused->instruction_count();
}

// The kernels of one module: every launch, in entry order, and the index in
// the distinct kernels of its code.
struct ModuleJobs {
  std::vector<KernelJob> jobs;
  std::vector<size_t> code;
  CompiledKernels result;  // skipped fusions; kernels filled last
  std::vector<std::unique_ptr<ir::Module>> fallback_modules;  // alive until compiled
};

// Lists the kernels of `module` into `out`; `add(out, inst, emitter, name)`
// records one.
Status ListKernels(
    const ir::Module& module, ModuleJobs& out,
    const std::function<void(ModuleJobs&, const ir::Instruction&, EmitterKind, std::string)>& add) {
  if (module.entry() == nullptr) return Error("module {}: no entry computation", module.name());
  std::set<std::string> names;
  for (const auto& inst : module.entry()->instructions()) {
    ir::Opcode op = inst->opcode();
    if (op == ir::Opcode::kFusion && inst->attrs().fusion_kind == ir::FusionKind::kGemm) {
      // Gemms run on cuBLASLt (reported as skipped below); some carry a kernel.
      ASSIGN_OR_RETURN(std::optional<GemmFallbackFusion> fallback, BiasGradientFallback(*inst));
      if (fallback) {
        std::string name = SanitizeName(inst->name()) + "_bgrad";
        for (int i = 1; names.count(name); ++i)
          name = fmt::format("{}_bgrad_{}", SanitizeName(inst->name()), i);
        names.insert(name);
        add(out, *fallback->fusion, EmitterKind::kColumnReduction, name);
        out.jobs.back().fallback_for = inst.get();
        out.jobs.back().fallback = KernelSpec::GemmFallback::kBiasGradient;
        out.jobs.back().gemm_operand = fallback->gemm_operand;
        out.jobs.back().gemm_output = fallback->gemm_output;
        out.fallback_modules.push_back(std::move(fallback->module));
      }
      ASSIGN_OR_RETURN(std::optional<GemmFallbackFusion> epilogue, EpilogueFallback(*inst));
      if (epilogue) {
        std::string name = SanitizeName(inst->name()) + "_epilogue";
        for (int i = 1; names.count(name); ++i)
          name = fmt::format("{}_epilogue_{}", SanitizeName(inst->name()), i);
        names.insert(name);
        add(out, *epilogue->fusion, EmitterKind::kLoop, name);
        out.jobs.back().fallback_for = inst.get();
        out.jobs.back().fallback = KernelSpec::GemmFallback::kEpilogue;
        out.jobs.back().gemm_operand = epilogue->gemm_operand;
        out.fallback_modules.push_back(std::move(epilogue->module));
      }
    }
    if (op != ir::Opcode::kFusion && op != ir::Opcode::kGather && op != ir::Opcode::kScatterAdd) {
      continue;
    }
    StatusOr<EmitterKind> emitter = ChooseEmitter(*inst);
    if (!emitter.ok()) {
      out.result.skipped.push_back(
          {inst->name(), inst->attrs().fusion_kind, std::string(emitter.status().message())});
      continue;
    }
    std::string name = SanitizeName(inst->name());
    for (int i = 1; names.count(name); ++i)
      name = fmt::format("{}_{}", SanitizeName(inst->name()), i);
    names.insert(name);
    if (*emitter == EmitterKind::kScatterAdd) {  // Note [multi-kernel instructions]
      std::string init = name + "_init";
      names.insert(init);
      add(out, *inst, EmitterKind::kScatterAddInit, init);
    }
    if (*emitter == EmitterKind::kAttentionBackward && HasBothBackwardParts(*inst)) {
      std::string keys = name + "_keys";  // Note [packed attention gradient]
      names.insert(keys);
      add(out, *inst, EmitterKind::kAttentionBackwardKeys, keys);
    }
    if (*emitter == EmitterKind::kMixedReductionColumns) {  // Note [multi-kernel instructions]
      std::string rows = name + "_rows";
      names.insert(rows);
      add(out, *inst, EmitterKind::kMixedReductionRows, rows);
    }
    if ((*emitter == EmitterKind::kColumnReduction ||
         *emitter == EmitterKind::kMixedReductionColumns) &&
        ColumnReductionChunks(*inst) > 1) {
      std::string partials = name + "_partials";  // Note [split column reductions]
      names.insert(partials);
      add(out, *inst, EmitterKind::kColumnReductionPartials, partials);
      emitter = EmitterKind::kColumnReductionFinal;
    }
    add(out, *inst, *emitter, name);
  }
  return Status::Ok();
}

// The launches of module `index` from the compiled distinct kernels. A
// kernel's code is moved into the last module that launches it (`last_user`)
// and copied into earlier ones; its seconds are counted once, in the first
// (`timed`).
void AssembleKernels(ModuleJobs& m, size_t index,
                     std::vector<std::optional<StatusOr<CompiledKernel>>>& compiled,
                     const std::vector<size_t>& last_user, std::vector<bool>& timed) {
  std::map<size_t, int64_t> first_use;
  for (size_t j = 0; j < m.jobs.size(); ++j) {
    CompiledKernel kernel;
    const size_t c = m.code[j];
    auto [it, first] = first_use.try_emplace(c, static_cast<int64_t>(j));
    if (first) {
      kernel = last_user[c] == index ? std::move(*compiled[c]).value() : compiled[c]->value();
      if (timed[c]) kernel.lower_seconds = kernel.ptxas_seconds = 0;
      timed[c] = true;
    } else {  // Note [kernel deduplication]
      const CompiledKernel& code = m.result.kernels[it->second];
      kernel.spec = code.spec;
      kernel.code_of = it->second;
    }
    const KernelJob& job = m.jobs[j];
    kernel.spec.fusion = job.inst->name();
    if (job.fallback_for != nullptr) {  // Note [epilogue fallback]
      kernel.spec.fusion = job.fallback_for->name();
      kernel.spec.gemm_fallback = job.fallback;
      for (KernelParam& p : kernel.spec.params) {
        if (job.fallback == KernelSpec::GemmFallback::kBiasGradient) {
          p.index = p.role == KernelParam::Role::kOperand ? job.gemm_operand : job.gemm_output;
        } else if (p.role == KernelParam::Role::kOperand && p.index == job.gemm_operand) {
          // The dot's result: the plain gemm writes it to scratch.
          p.role = KernelParam::Role::kScratch;
          p.index = 0;
        }
      }
    }
    m.result.kernels.push_back(std::move(kernel));
  }
}

}  // namespace

StatusOr<CompiledKernels> CompileFusions(const ir::Module& module, const CodegenOptions& options) {
  ASSIGN_OR_RETURN(std::vector<CompiledKernels> kernels,
                   CompileFusions({CodegenModule{&module, options.host_symbol_prefix}}, options));
  return std::move(kernels[0]);
}

namespace {

// Compiles the distinct kernels `unique`, costliest first (Note [compile
// order]), on options.threads threads (each kernel has its own MLIR and
// LLVM contexts, see lowering.h); each one's code or error, in `unique`'s
// order.
std::vector<std::optional<StatusOr<CompiledKernel>>> CompileInParallel(
    const std::vector<KernelJob>& unique, const std::vector<CodegenModule>& modules,
    const CodegenOptions& options) {
  std::vector<size_t> order(unique.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return CompileCost(*unique[a].inst, unique[a].emitter) >
           CompileCost(*unique[b].inst, unique[b].emitter);
  });
  std::vector<std::optional<StatusOr<CompiledKernel>>> compiled(unique.size());
  std::atomic<size_t> next{0};
  std::mutex progress_mutex;
  int64_t done = 0;
  auto worker = [&] {
    for (size_t n; (n = next.fetch_add(1)) < order.size();) {
      const KernelJob& job = unique[order[n]];
      CodegenOptions module_options = options;
      module_options.host_symbol_prefix = modules[job.module].host_symbol_prefix;
      compiled[order[n]] = CompileKernel(*job.inst, job.emitter, job.name, module_options);
      if (options.progress) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        options.progress(++done, static_cast<int64_t>(unique.size()));
      }
    }
  };
  int64_t threads = options.threads > 0 ? options.threads
                                        : std::max<int64_t>(1, std::thread::hardware_concurrency());
  threads = std::min<int64_t>(threads, static_cast<int64_t>(unique.size()));
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  return compiled;
}

}  // namespace

StatusOr<std::vector<CompiledKernels>> CompileFusions(const std::vector<CodegenModule>& modules,
                                                      const CodegenOptions& options) {
  RETURN_IF_ERROR(CheckCodegenOptions(options));
  // The distinct kernels of all modules. Within a module, equal keys share
  // one kernel (Note [kernel deduplication]); across modules a kernel's code
  // is compiled once when its key and its name agree (the validation entry
  // repeats the train step's forward kernels), and each module keeps a copy.
  std::vector<KernelJob> unique;
  std::map<std::string, size_t> by_named_key;
  std::vector<ModuleJobs> per_module(modules.size());
  for (size_t m = 0; m < modules.size(); ++m) {
    std::map<std::string, size_t> by_key;
    auto add = [&](ModuleJobs& out, const ir::Instruction& inst, EmitterKind emitter,
                   std::string name) {
      std::string key = options.deduplicate ? KernelKey(inst, emitter) : name;
      auto it = by_key.find(key);
      if (it == by_key.end()) {
        auto [named, inserted] = by_named_key.try_emplace(key + "\n" + name, unique.size());
        if (inserted) {
          unique.push_back({&inst, emitter, name});
          unique.back().module = m;
        }
        it = by_key.emplace(std::move(key), named->second).first;
      }
      out.jobs.push_back({&inst, emitter, std::move(name)});
      out.code.push_back(it->second);
    };
    RETURN_IF_ERROR(ListKernels(*modules[m].module, per_module[m], add));
  }

  std::vector<std::optional<StatusOr<CompiledKernel>>> compiled =
      CompileInParallel(unique, modules, options);
  // The first failure in launch order, whatever order the kernels compiled in.
  for (const ModuleJobs& m : per_module) {
    for (size_t c : m.code) {
      if (!compiled[c]->ok()) return compiled[c]->status();
    }
  }

  std::vector<size_t> last_user(unique.size());
  for (size_t m = 0; m < per_module.size(); ++m) {
    for (size_t c : per_module[m].code) last_user[c] = m;
  }
  std::vector<CompiledKernels> result;
  std::vector<bool> timed(unique.size());
  for (size_t m = 0; m < per_module.size(); ++m) {
    AssembleKernels(per_module[m], m, compiled, last_user, timed);
    result.push_back(std::move(per_module[m].result));
  }
  return result;
}

}  // namespace gptc::codegen
