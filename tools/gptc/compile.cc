// gptc compile: traces a model and compiles its train step.
//
// Pipeline: trace -> mixed-precision -> autodiff -> dce -> optimizer -> dce
// -> simplify -> cse -> dce -> remat -> fusion -> schedule (passes/train_step.h),
// then buffer assignment per entry. --fusion-report / --memory-report print
// the reports; with --dump-dir they are always written next to the dumps.
// The output is IR text: the `train_step` module, or with --grad-accum K > 1
// the `accumulate` and `apply` modules one after another (ir::ParseModules
// reads them). --forward-only writes the traced forward module instead. With
// --dump-dir every stage is also dumped, numbered in pipeline order
// (0000.traced.ir, 0001.after-autodiff.ir, 0002.after-dce.ir,
// 0003.after-optimizer.ir, ...).
// With `-o FILE.gptx` the output is the whole artifact instead (docs/ARTIFACT.md):
// codegen for --target (sm_90a, sm_90, sm_80), thunk plans, parameter specs.
// --timings prints the seconds of every stage. An artifact (unless --no-logits)
// and the IR text with --logits also carry the sampling entry `logits` (batch
// 1, the same seq; gptrun's samples) and the validation entry `eval` (the
// train step's batch and seq: forward and loss only). --no-codegen writes
// an artifact without kernels (complete: false) that only the CPU device runs.
// --dp N (alias --world N) compiles the step of one of N data-parallel ranks
// (passes/data_parallel.h): --batch is then the per-rank micro-batch, the
// global batch is N * batch (* grad-accum), and the manifest records world_size.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "compiler/ir/printer.h"
#include "compiler/pass/pipeline.h"
#include "compiler/support/file.h"
#include "models/config.h"
#include "models/gpt2.h"
#include "passes/buffer_assignment.h"
#include "passes/fusion.h"
#include "passes/fusion_report.h"
#include "passes/train_step.h"
#ifdef GPTC_HAVE_ARTIFACT_WRITER
#include "compiler/artifact/writer.h"
#endif
#include "tools/common/flags.h"
#include "tools/common/progress.h"
#include "tools/gptc/commands.h"

namespace gptc::tools {

namespace {

// Fusion and memory reports of every entry; written to the dump dir and
// printed when asked.
Status WriteReports(const passes::TrainProgram& program, const passes::GpuSpec& gpu,
                    const std::string& dump_dir, bool print_fusion, bool print_memory,
                    std::string& summary) {
  for (const passes::TrainEntry& e : program.entries) {
    std::string fusion = passes::RenderFusionReport(*e.module, gpu);
    ASSIGN_OR_RETURN(passes::BufferAssignment assignment,
                     passes::AssignBuffers(*e.module, passes::DonationOptions(e.signature)));
    std::string memory = assignment.MemoryReport(20, e.name);
    if (!dump_dir.empty()) {
      RETURN_IF_ERROR(WriteFileAtomically(fmt::format("{}/{}.fusion-report.txt", dump_dir, e.name),
                                          fusion));
      RETURN_IF_ERROR(WriteFileAtomically(fmt::format("{}/{}.memory-report.txt", dump_dir, e.name),
                                          memory));
      RETURN_IF_ERROR(WriteFileAtomically(
          fmt::format("{}/{}.buffer-assignment.txt", dump_dir, e.name), assignment.ToString()));
    }
    if (print_fusion) std::printf("== fusion report: %s\n%s", e.name.c_str(), fusion.c_str());
    if (print_memory) std::printf("== memory report: %s\n%s", e.name.c_str(), memory.c_str());
    int64_t kernels = 0;
    for (const auto& [kind, count] : passes::CountKernels(*e.module)) kernels += count;
    int64_t max_per_layer = 0;
    for (const auto& [layer, count] : passes::KernelsPerLayer(*e.module)) {
      max_per_layer = std::max(max_per_layer, count);
    }
    summary += fmt::format("; {}: {} fusions{}, arena {}", e.name, kernels,
                           max_per_layer > 0 ? fmt::format(" ({} per layer)", max_per_layer) : "",
                           FormatBytes(assignment.arena_size()));
  }
  return Status::Ok();
}

StatusOr<std::optional<int64_t>> OptionalInt(const Flags& flags, const std::string& name) {
  if (!flags.Has(name)) return std::optional<int64_t>();
  ASSIGN_OR_RETURN(int64_t v, flags.GetInt(name, 0));
  return std::optional<int64_t>(v);
}

constexpr char kCompileAbout[] =
    "Traces a model and compiles its AdamW train step. With -o FILE.gptx the output is the whole "
    "artifact (kernels for --target, thunk plans, parameter specs; docs/ARTIFACT.md) for gptrun; "
    "otherwise the optimized IR text. Prints one summary line.";

Flags DeclareCompileFlags() {
  const passes::AdamWOptions adamw;  // the defaults --help shows are the pipeline's
  auto str = [](auto v) { return fmt::format("{}", v); };
  Flags flags("gptc compile", "--model NAME [flags]", kCompileAbout);
  flags.Section("model and shape")
      .Value("model", "NAME", "the model config (gptc models lists them)")
      .Value("batch", "N", "sequences per step (per rank with --dp)", "4")
      .Value("seq", "T", "tokens per sequence (default: the model's context length)")
      .Value("layers", "L", "override the model's layer count")
      .Value("heads", "H", "override the model's head count")
      .Value("width", "C", "override the model's width");
  flags.Section("training")
      .Value("grad-accum", "K", "micro-batches accumulated per optimizer step", "1")
      .Value("dp", "N",
             "data-parallel over N ranks: gradients and loss averaged by all-reduce; --batch is "
             "per rank",
             "1")
      .Value("world", "N", "an alias of --dp")
      .Value("weight-decay", "WD", "AdamW weight decay (matrices only)", str(adamw.weight_decay))
      .Value("clip-norm", "C", "global gradient-norm clip; 0 for none", str(adamw.clip_norm))
      .Value("beta1", "B1", "AdamW beta1", str(adamw.beta1))
      .Value("beta2", "B2", "AdamW beta2", str(adamw.beta2))
      .Value("eps", "E", "AdamW epsilon", str(adamw.eps))
      .Value("precision", "bf16|f32", "bf16: mixed precision (f32 master weights); f32: all f32",
             "bf16")
      .Value("remat", "none|dots|block|auto",
             "what the backward recomputes instead of keeping (auto: the least that fits "
             "--memory-budget)",
             "none")
      .Value("memory-budget", "BYTES", "the arena budget of --remat auto, e.g. 40GiB");
  flags.Section("output")
      .Value("output", "FILE",
             "FILE.gptx: the artifact; any other name: the IR text (default: MODEL.ir)")
      .Short('o')
      .Value("target", "sm_90a|sm_90|sm_80", "the GPU architecture of the kernels", "sm_90a")
      .Bool("emu",
            "add the kernels compiled for this host, for gptrun --device emu "
            "(docs/EMULATOR.md)")
      .Bool("no-codegen", "an artifact without kernels, that only gptrun --device cpu runs")
      .Bool("no-logits", "an artifact without the sampling (logits) and validation (eval) entries")
      .Bool("logits", "IR text: add the logits and eval entries")
      .Bool("forward-only", "IR text: write the traced forward module only")
      .Bool("no-optimize", "IR text: skip the simplify/cse/remat/fusion/schedule stages");
  flags.Section("reports")
      .Bool("fusion-report", "print each entry's kernels with their roofline time")
      .Bool("memory-report", "print each entry's largest buffers and arena size")
      .Value("roofline-gpu", "h100|h200|a100", "the GPU whose peaks the fusion report uses", "h100")
      .Value("dump-dir", "DIR",
             "write the IR after every stage (0000.traced.ir, ...) and the reports there")
      .Bool("timings", "print the seconds of every stage and pass");
  return flags;
}

}  // namespace

int CompileCommand(int argc, char** argv) {
  Flags flags = DeclareCompileFlags();
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) {
    return Fail(kExitUsage, s);
  }
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  if (!flags.positional().empty()) {
    return Fail(kExitUsage, Error("compile: unexpected argument '{}'", flags.positional()[0]));
  }
  if (!flags.Has("model"))
    return Fail(kExitUsage, Error("compile needs --model NAME (see gptc models)"));

  StatusOr<models::GptConfig> config = models::FindGptConfig(flags.Get("model"));
  if (!config.ok()) return Fail(kExitUsage, config.status());
  models::ConfigOverrides overrides;
  for (auto [name, field] :
       {std::pair{"layers", &overrides.layers}, std::pair{"heads", &overrides.heads},
        std::pair{"width", &overrides.width}}) {
    StatusOr<std::optional<int64_t>> v = OptionalInt(flags, name);
    if (!v.ok()) return Fail(kExitUsage, v.status());
    *field = *v;
  }
  *config = models::ApplyOverrides(*config, overrides);
  StatusOr<int64_t> batch = flags.GetInt("batch");
  if (!batch.ok()) return Fail(kExitUsage, batch.status());
  StatusOr<int64_t> seq = flags.GetInt("seq", config->positions);
  if (!seq.ok()) return Fail(kExitUsage, seq.status());
  if (Status s = models::ValidateTraceShape(*config, *batch, *seq); !s.ok())
    return Fail(kExitUsage, s);

  passes::TrainStepOptions options;
  StatusOr<int64_t> accum = flags.GetInt("grad-accum");
  if (!accum.ok()) return Fail(kExitUsage, accum.status());
  if (*accum < 1) return Fail(kExitUsage, Error("--grad-accum must be >= 1, got {}", *accum));
  options.grad_accum = *accum;
  for (const char* name : {"dp", "world"}) {  // --world is an alias of --dp
    if (!flags.Has(name)) continue;
    StatusOr<int64_t> world = flags.GetInt(name, 1);
    if (!world.ok()) return Fail(kExitUsage, world.status());
    if (*world < 1) {
      return Fail(kExitUsage, Error("--{} must be a number of ranks >= 1, got {}", name, *world));
    }
    if (std::string_view(name) == "world" && flags.Has("dp") && options.world_size != *world) {
      return Fail(kExitUsage, Error("--dp {} and --world {} disagree", options.world_size, *world));
    }
    options.world_size = *world;
  }
  for (auto [name, field] : {std::pair{"weight-decay", &options.adamw.weight_decay},
                             std::pair{"clip-norm", &options.adamw.clip_norm},
                             std::pair{"beta1", &options.adamw.beta1},
                             std::pair{"beta2", &options.adamw.beta2},
                             std::pair{"eps", &options.adamw.eps}}) {
    StatusOr<double> v = flags.GetDouble(name, *field);
    if (!v.ok()) return Fail(kExitUsage, v.status());
    *field = *v;
  }
  for (double beta : {options.adamw.beta1, options.adamw.beta2}) {
    if (!(beta >= 0 && beta < 1))
      return Fail(kExitUsage, Error("--beta1/--beta2 must be in [0, 1)"));
  }
  // NaN fails every comparison: each check is written to refuse it.
  if (!(options.adamw.eps > 0) || !std::isfinite(options.adamw.eps)) {
    return Fail(kExitUsage, Error("--eps must be a finite number > 0, got {}", options.adamw.eps));
  }
  for (auto [name, value] : {std::pair{"weight-decay", options.adamw.weight_decay},
                             std::pair{"clip-norm", options.adamw.clip_norm}}) {
    if (!(value >= 0) || !std::isfinite(value)) {
      return Fail(kExitUsage, Error("--{} must be a finite number >= 0, got {}", name, value));
    }
  }

  std::string precision = flags.Get("precision");
  std::optional<passes::PrecisionPolicy> policy = passes::ParsePrecisionPolicy(precision);
  if (!policy)
    return Fail(kExitUsage, Error("--precision must be bf16 or f32, got '{}'", precision));
  options.precision.policy = *policy;
  std::string remat = flags.Get("remat");
  std::optional<passes::RematPolicy> remat_policy = passes::ParseRematPolicy(remat);
  if (!remat_policy) {
    return Fail(kExitUsage, Error("--remat must be none, dots, block or auto, got '{}'", remat));
  }
  options.remat.policy = *remat_policy;
  if (*remat_policy == passes::RematPolicy::kAuto) {
    if (!flags.Has("memory-budget"))
      return Fail(kExitUsage, Error("--remat auto needs --memory-budget"));
    StatusOr<int64_t> budget = passes::ParseByteSize(flags.Get("memory-budget"));
    if (!budget.ok()) return Fail(kExitUsage, budget.status().WithPrefix("--memory-budget"));
    options.remat.budget_bytes = *budget;
  } else if (flags.Has("memory-budget")) {
    return Fail(kExitUsage, Error("--memory-budget only applies to --remat auto"));
  }
  options.optimize = !flags.Has("no-optimize");
  std::optional<passes::GpuSpec> gpu = passes::FindGpuSpec(flags.Get("roofline-gpu"));
  if (!gpu) {
    return Fail(kExitUsage, Error("--roofline-gpu must be h100, h200 or a100, got '{}'",
                                  flags.Get("roofline-gpu")));
  }

  std::string output = flags.Get("output", config->name + ".ir");
  // Before any work: a device, FIFO or directory is refused now, not after
  // the compile (issue 16, defect 2).
  if (Status s = CheckOutputTarget(output); !s.ok()) return Fail(kExitUsage, s);
  const bool artifact = output.ends_with(".gptx");
  if (artifact && (flags.Has("forward-only") || !options.optimize)) {
    return Fail(kExitUsage, Error("-o {}: an artifact needs the optimized train step "
                                  "(drop --forward-only / --no-optimize)",
                                  output));
  }
  const std::string target = flags.Get("target");
  if (target != "sm_90a" && target != "sm_90" && target != "sm_80") {
    return Fail(kExitUsage, Error("--target must be sm_90a, sm_90 or sm_80, got '{}'", target));
  }
  std::vector<std::pair<std::string, double>> timings;
  auto pass_timings = std::make_shared<std::vector<std::pair<std::string, double>>>();
  options.pipeline.timings = pass_timings;
  // Long compiles (gpt2-1558m: minutes) show their phase on a terminal.
  ProgressLine progress("gptc", TerminalProgress());
  auto fail = [&](int code, const Status& s) {
    progress.Clear();
    return Fail(code, s);
  };
  options.pipeline.on_pass = [&](const std::string& pass) {
    // Every pass is shown (a few dozen lines); only codegen's kernels are
    // rate-limited.
    progress.Show(fmt::format("compiling {}: pass {}", config->name, pass), true);
  };
  auto lap_start = std::chrono::steady_clock::now();
  auto lap = [&](const char* stage) {
    auto now = std::chrono::steady_clock::now();
    timings.emplace_back(stage, std::chrono::duration<double>(now - lap_start).count());
    lap_start = now;
  };

  auto start = std::chrono::steady_clock::now();
  progress.Show(fmt::format("tracing {}", config->name), true);
  StatusOr<frontend::TracedModule> traced = models::TraceGpt2Forward(*config, *batch, *seq);
  if (!traced.ok()) return fail(1, traced.status());
  auto dumps = std::make_shared<pass::DumpWriter>(flags.Get("dump-dir"));
  if (Status s = dumps->Dump(*traced->module, "traced"); !s.ok()) return fail(1, s);
  const size_t num_params = traced->params.size();
  const int64_t param_values = traced->ParameterValues();
  lap("trace");

  std::vector<const ir::Module*> modules;
  StatusOr<passes::TrainProgram> program = Error("not compiled");
  std::string entries;
  if (flags.Has("forward-only")) {
    modules.push_back(traced->module.get());
  } else {
    options.dumps = dumps;
    const bool forward_entries = artifact ? !flags.Has("no-logits") : flags.Has("logits");
    // The validation entry runs the very forward the train step is built from.
    std::unique_ptr<ir::Module> forward = forward_entries ? traced->module->Clone() : nullptr;
    program = passes::BuildTrainProgram(std::move(traced->module), traced->params, options);
    if (!program.ok()) return fail(1, program.status());
    if (forward_entries) {
      // The sampling entry (batch 1, the train step's seq): gptrun's samples.
      StatusOr<frontend::TracedModule> logits = models::TraceGpt2Logits(*config, 1, *seq);
      if (!logits.ok()) return fail(1, logits.status());
      Status s = passes::AddLogitsEntry(*program, std::move(logits->module), options);
      if (!s.ok()) return fail(1, s.WithPrefix("logits entry"));
      s = passes::AddEvalEntry(*program, std::move(forward), options);
      if (!s.ok()) return fail(1, s.WithPrefix("eval entry"));
    }
    for (const passes::TrainEntry& e : program->entries) {
      modules.push_back(e.module.get());
      entries += fmt::format("{}{} ({} inputs -> {} outputs)", entries.empty() ? "" : ", ",
                             e.name, e.signature.inputs.size(), e.signature.outputs.size());
    }
  }
  if (program.ok()) lap("passes");
  // Seconds per pass name, summed over entries and repeated runs (dce).
  std::vector<std::pair<std::string, double>> pass_seconds;
  for (const auto& [name, seconds] : *pass_timings) {
    auto it = std::find_if(pass_seconds.begin(), pass_seconds.end(),
                           [&](const auto& p) { return p.first == name; });
    if (it == pass_seconds.end()) {
      pass_seconds.emplace_back(name, seconds);
    } else {
      it->second += seconds;
    }
  }
  std::string report_summary;
  if (program.ok() && options.optimize) {
    progress.Show("buffer assignment and reports", true);
    if (flags.Has("fusion-report") || flags.Has("memory-report")) progress.Clear();
    Status s = WriteReports(*program, *gpu, flags.Get("dump-dir"), flags.Has("fusion-report"),
                            flags.Has("memory-report"), report_summary);
    if (!s.ok()) return fail(1, s);
    lap("reports");
  }
  std::string note;
#ifdef GPTC_HAVE_ARTIFACT_WRITER
  if (artifact) {
    artifact::ArtifactOptions ao;
    ao.codegen.target = target;
    ao.compile_kernels = !flags.Has("no-codegen");
    ao.codegen.emit_host = flags.Has("emu");
    ao.model = {{"name", config->name},   {"layers", config->layers},
                {"heads", config->heads}, {"width", config->width},
                {"positions", config->positions}, {"vocab", config->vocab},
                {"padded_vocab", config->padded_vocab}};
    ao.flags = {{"batch", *batch},          {"seq", *seq},
                {"grad_accum", options.grad_accum}, {"precision", precision},
                {"remat", remat},           {"weight_decay", options.adamw.weight_decay},
                {"clip_norm", options.adamw.clip_norm}, {"beta1", options.adamw.beta1},
                {"beta2", options.adamw.beta2}, {"eps", options.adamw.eps},
                {"codegen", ao.compile_kernels}, {"world_size", options.world_size}};
    ao.progress = [&](const std::string& entry, int64_t done, int64_t total) {
      progress.Show(fmt::format("codegen {}: {}/{} kernels", entry, done, total), done == total);
    };
    StatusOr<artifact::BuiltArtifact> built = artifact::BuildArtifact(*program, ao);
    if (!built.ok()) return fail(1, built.status());
    for (const auto& t : built->timings) timings.push_back(t);
    auto t0 = std::chrono::steady_clock::now();
    if (Status s = WriteFileAtomically(output, built->bytes); !s.ok()) return fail(1, s);
    timings.emplace_back("write",
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                             .count());
    int64_t unsupported = 0;
    for (const auto& [what, n] : built->stats.unsupported) unsupported += n;
    // Note [epilogue fallback kernels]: the fallbacks launch only where
    // cuBLASLt refuses an epilogue, so they are counted apart.
    int64_t launches = 0, fallbacks = 0;
    for (const auto& [kind, n] : built->stats.kernels_by_kind) {
      (kind == "gemm fallback" ? fallbacks : launches) += n;
    }
    auto thunks = [&](const char* kind) {
      return built->stats.thunks.contains(kind) ? built->stats.thunks.at(kind) : 0;
    };
    const std::string kernels =
        ao.compile_kernels
            ? fmt::format("{} kernel launches{} of {} distinct kernels ({} assembled by ptxas)",
                          launches,
                          fallbacks > 0 ? fmt::format(" (+{} gemm fallbacks)", fallbacks) : "",
                          built->kernels, built->cubins)
            : "no kernels (--no-codegen)";
    report_summary += fmt::format("; {}, {} gemms, {} for {}", kernels, thunks("gemm"),
                                  FormatBytes(static_cast<int64_t>(built->bytes.size())), target);
    if (!ao.compile_kernels) {
      note = "note: --no-codegen: no kernels; only gptrun --device cpu runs this artifact";
    } else if (unsupported > 0) {
      note = fmt::format("note: {} kernels have no emitter yet; gptrun will refuse this artifact",
                         unsupported);
    }
  }
#else
  if (artifact)
    return fail(kExitUsage, Error("-o {}: this gptc was built without codegen", output));
#endif
  progress.Clear();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::string text;
  int64_t instructions = 0;
  size_t computations = 0;
  for (const ir::Module* m : modules) {
    text += ir::PrintModule(*m);
    for (const auto& c : m->computations()) instructions += c->instruction_count();
    computations += m->computations().size();
  }
  if (!artifact) {
    if (Status s = WriteFileAtomically(output, text); !s.ok()) return fail(1, s);
  }

  std::string what =
      flags.Has("forward-only")
          ? fmt::format("traced {}", config->name)
          : fmt::format("compiled {} train step", config->name);
  std::string accum_note =
      flags.Has("forward-only") ? "" : fmt::format("; grad-accum {}", options.grad_accum);
  if (!flags.Has("forward-only") && options.world_size > 1) {
    accum_note += fmt::format("; dp {} (batch per rank)", options.world_size);
  }
  std::printf(
      "%s (%lld layers, %lld heads, width %lld; batch %lld, seq %lld%s): %s instructions in "
      "%zu computations, %zu parameters (%s values)%s%s%s, %.3f s -> %s\n",
      what.c_str(), static_cast<long long>(config->layers),
      static_cast<long long>(config->heads), static_cast<long long>(config->width),
      static_cast<long long>(*batch), static_cast<long long>(*seq), accum_note.c_str(),
      WithThousands(instructions).c_str(), computations, num_params,
      WithThousands(param_values).c_str(), entries.empty() ? "" : ", entries ",
      entries.c_str(), report_summary.c_str(), seconds, output.c_str());
  if (flags.Has("timings")) {
    std::string line = "timings:";
    for (const auto& [stage, t] : timings) line += fmt::format(" {} {:.3f}s", stage, t);
    line += "\npasses:";
    for (const auto& [name, t] : pass_seconds) line += fmt::format(" {} {:.3f}s", name, t);
    std::printf("%s\n", line.c_str());
  }
  if (!note.empty()) std::printf("%s\n", note.c_str());
  return 0;
}

}  // namespace gptc::tools
