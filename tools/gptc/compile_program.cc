#include "tools/gptc/compile_program.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>

#include "compiler/analysis/arena_guests.h"
#include "compiler/analysis/kernel_count.h"
#include "compiler/ir/printer.h"
#include "compiler/pass/pipeline.h"
#include "compiler/program/model_config.h"
#include "compiler/program/rank_state.h"
#include "compiler/support/file.h"
#include "compiler/support/text.h"
#include "models/gpt2.h"
#include "passes/fusion.h"
#include "tools/gptc/remat_auto.h"
#ifdef GPTC_HAVE_ARTIFACT_WRITER
#include "compiler/artifact/writer.h"
#endif

namespace gptc::tools {
namespace {

// What the summary line says of one entry.
struct EntryRow {
  std::string entry;
  int64_t fusions = 0, max_per_layer = 0;
  // The buffer assignment's arena; with an artifact, its plan's (the
  // fallback scratch included), the figure gptrun and gptc inspect show.
  int64_t arena = 0;
  std::string_view host;  // Note [arena guests]: the entry whose arena it runs in
};

// Fusion and memory reports of every entry; written to the dump dir and
// printed when asked. Appends each entry's row to `rows`.
Status WriteReports(const program::TrainProgram& program, const CompileOptions& options,
                    const analysis::ProgramBuffers& buffers, std::vector<EntryRow>& rows) {
  // The train step's state (a forward-only program has none).
  if (options.print_memory_report && !options.forward_only) {
    std::printf("%s", program::RenderRankState(program.params, program.grad_accum,
                                               program.world_size, program.zero_stage)
                          .c_str());
  }
  for (size_t i = 0; i < program.entries.size(); ++i) {
    const program::TrainEntry& e = program.entries[i];
    const analysis::BufferAssignment& assignment = buffers.assignments[i];
    const int64_t arena_size = assignment.arena_size();
    const int host = buffers.hosts[i];
    const std::string_view host_name = host >= 0 ? program.entries[host].name() : "";
    const std::string& dir = options.dump_dir;
    // The reports cost a tenth of a large model's compile: rendered only
    // when someone reads them.
    std::string fusion, memory;
    if (!dir.empty() || options.print_fusion_report) {
      fusion = analysis::RenderFusionReport(*e.module, options.roofline_gpu);
    }
    if (!dir.empty() || options.print_memory_report) {
      memory = assignment.MemoryReport(
          20, host < 0 ? std::string(e.name())
                       : fmt::format("{} (in the arena of {})", e.name(), host_name));
    }
    if (!dir.empty()) {
      RETURN_IF_ERROR(
          WriteFileAtomically(fmt::format("{}/{}.fusion-report.txt", dir, e.name()), fusion));
      RETURN_IF_ERROR(
          WriteFileAtomically(fmt::format("{}/{}.memory-report.txt", dir, e.name()), memory));
      RETURN_IF_ERROR(WriteFileAtomically(fmt::format("{}/{}.buffer-assignment.txt", dir, e.name()),
                                          assignment.ToString()));
    }
    if (options.print_fusion_report) {
      std::printf("== fusion report: %s\n%s", std::string(e.name()).c_str(), fusion.c_str());
    }
    if (options.print_memory_report) {
      std::printf("== memory report: %s\n%s", std::string(e.name()).c_str(), memory.c_str());
    }
    int64_t kernels = 0;
    for (const auto& [kind, count] : analysis::CountKernels(*e.module)) kernels += count;
    int64_t max_per_layer = 0;
    for (const auto& [layer, count] : analysis::KernelsPerLayer(*e.module)) {
      max_per_layer = std::max(max_per_layer, count);
    }
    rows.push_back({.entry = std::string(e.name()),
                    .fusions = kernels,
                    .max_per_layer = max_per_layer,
                    .arena = arena_size,
                    .host = host_name});
  }
  return Status::Ok();
}

// The entries' part of the summary line: "; train_step: 54 fusions (19 per
// layer), arena 76.58 MiB; ...".
std::string FormatEntryRows(const std::vector<EntryRow>& rows) {
  std::string out;
  for (const EntryRow& r : rows) {
    out += fmt::format("; {}: {} fusions{}, arena {}{}", r.entry, r.fusions,
                       r.max_per_layer > 0 ? fmt::format(" ({} per layer)", r.max_per_layer) : "",
                       FormatBytes(r.arena), r.host.empty() ? "" : fmt::format(" in {}'s", r.host));
  }
  return out;
}

// Seconds per pass name, summed over entries and repeated runs (dce).
std::vector<std::pair<std::string, double>> SumPerPass(
    const std::vector<std::pair<std::string, double>>& runs) {
  std::vector<std::pair<std::string, double>> sums;
  for (const auto& [name, seconds] : runs) {
    auto it =
        std::find_if(sums.begin(), sums.end(), [&](const auto& p) { return p.first == name; });
    if (it == sums.end()) {
      sums.emplace_back(name, seconds);
    } else {
      it->second += seconds;
    }
  }
  return sums;
}

#ifdef GPTC_HAVE_ARTIFACT_WRITER
// " NAME 1.234s (ptxas 0.9s), ..." for the `count` kernels that took longest
// to compile (of all threads' time, not the wall clock).
std::string SlowestKernels(std::vector<artifact::BuiltArtifact::KernelSeconds> kernels,
                           size_t count) {
  auto total = [](const auto& k) { return k.lower + k.ptxas; };
  std::sort(kernels.begin(), kernels.end(),
            [&](const auto& a, const auto& b) { return total(a) > total(b); });
  std::string out;
  for (size_t i = 0; i < std::min(count, kernels.size()); ++i) {
    out += fmt::format("{} {} {:.3f}s (ptxas {:.3f}s)", i ? "," : "", kernels[i].name,
                       total(kernels[i]), kernels[i].ptxas);
  }
  return out;
}

// The artifact of `program`; appends the kernel counts to the summary.
Status BuildArtifactBytes(const program::TrainProgram& program, const CompileOptions& options,
                          const analysis::ProgramBuffers& buffers, const CompileProgress& progress,
                          std::vector<EntryRow>& rows, CompileResult& result) {
  const models::GptConfig& config = options.config;
  const passes::TrainStepOptions& train = options.train;
  artifact::ArtifactOptions ao;
  ao.codegen.target = codegen::TargetName(options.target);
  ao.codegen.attention_mma = options.attention_mma;
  ao.compile_kernels = options.codegen;
  ao.codegen.emit_host = options.emu;
  ao.buffers = &buffers;
  ao.model = {.name = config.name,
              .layers = config.layers,
              .heads = config.heads,
              .width = config.width,
              .positions = config.positions,
              .vocab = config.vocab,
              .padded_vocab = config.padded_vocab};
  ao.flags = {.batch = options.batch,
              .seq = options.seq,
              .grad_accum = train.grad_accum,
              .world_size = train.world_size,
              .precision = std::string(passes::PrecisionPolicyName(train.precision.policy)),
              .remat = RematText(train.remat),
              .codegen = ao.compile_kernels,
              .attention_mma = std::string(codegen::AttentionMmaName(options.attention_mma)),
              .adamw = train.adamw};
  // The manifest's typed record of each block's policy (readers take it,
  // never the flag's text).
  const passes::RematOptions& applied = train.remat;
  for (int64_t l = 0; l < config.layers && !options.forward_only; ++l) {
    ao.flags.remat_layers.emplace_back(passes::RematPolicyName(
        l < static_cast<int64_t>(applied.layers.size()) ? applied.layers[l] : applied.policy));
  }
  if (progress) {
    ao.progress = [&](int64_t done, int64_t total) {
      progress(fmt::format("codegen: {}/{} kernels", done, total), done == total);
    };
  }
  ASSIGN_OR_RETURN(artifact::BuiltArtifact built, artifact::BuildArtifact(program, ao));
  result.flags = ao.flags;
  for (const auto& t : built.timings) result.timings.push_back(t);
  for (size_t i = 0; i < rows.size() && i < built.arena_bytes.size(); ++i) {
    rows[i].arena = built.arena_bytes[i];
  }
  result.slowest_kernels = SlowestKernels(built.kernel_seconds, 3);
  int64_t unsupported = 0;
  for (const auto& [what, n] : built.stats.unsupported) unsupported += n;
  // Note [epilogue fallback]: the fallbacks launch only where
  // cuBLASLt refuses an epilogue, so they are counted apart.
  const int64_t fallbacks = built.fallback_kernels;
  int64_t launches = -fallbacks;
  for (const auto& [kind, n] : built.stats.kernels_by_kind) launches += n;
  auto thunks = [&](const char* kind) {
    return built.stats.thunks.contains(kind) ? built.stats.thunks.at(kind) : 0;
  };
  const std::string kernels =
      ao.compile_kernels
          ? fmt::format("{} kernel launches{} of {} distinct kernels ({} assembled by ptxas)",
                        launches,
                        fallbacks > 0 ? fmt::format(" (+{} gemm fallbacks)", fallbacks) : "",
                        built.kernels, built.cubins)
          : "no kernels (--no-codegen)";
  result.summary += fmt::format("; {}, {} gemms, {} for {}", kernels, thunks("gemm"),
                                FormatBytes(static_cast<int64_t>(built.bytes.size())),
                                codegen::TargetName(options.target));
  if (!ao.compile_kernels) {
    result.note = "note: --no-codegen: no kernels; only gptrun --device cpu runs this artifact";
  } else if (unsupported > 0) {
    result.note = fmt::format(
        "note: {} kernels have no emitter yet; gptrun will refuse this artifact", unsupported);
  }
  result.bytes = std::move(built.bytes);
  return Status::Ok();
}
#endif

// The sizes the summary line gives of the compiled modules.
struct ModuleSizes {
  int64_t instructions = 0;
  size_t computations = 0, params = 0;
  int64_t param_values = 0;
};

// "compiled gpt2-124m train step (12 layers, ...; batch 16, seq 1024;
// grad-accum 1): N instructions in M computations, ...", up to the entries'
// rows; `remat_note` follows the entries.
std::string SummaryHead(const CompileOptions& options, const ModuleSizes& sizes,
                        const std::string& entries, const std::string& remat_note) {
  const models::GptConfig& config = options.config;
  std::string what = options.forward_only ? fmt::format("traced {}", config.name)
                                          : fmt::format("compiled {} train step", config.name);
  std::string accum_note =
      options.forward_only ? "" : fmt::format("; grad-accum {}", options.train.grad_accum);
  if (!options.forward_only && options.train.world_size > 1) {
    accum_note += fmt::format("; dp {} (batch per rank)", options.train.world_size);
  }
  return fmt::format(
      "{} ({} layers, {} heads, width {}; batch {}, seq {}{}): {} instructions in {} "
      "computations, {} parameters ({} values){}{}{}",
      what, config.layers, config.heads, config.width, options.batch, options.seq, accum_note,
      WithThousands(sizes.instructions), sizes.computations, sizes.params,
      WithThousands(sizes.param_values), entries.empty() ? "" : ", entries ", entries,
      options.batch_note + remat_note);
}

using PassTimings = std::vector<std::pair<std::string, double>>;

// The logits, eval (`forward`, the traced forward's clone) and score
// entries, in a program of their own: on the second core while the caller builds the train
// step (their passes share no state with it; their pass times go to
// `timings`), or, with a dump dir (whose writer numbers the files in pass
// order), on the caller's thread when it asks for them.
std::future<StatusOr<program::TrainProgram>> BuildForwardEntries(
    const CompileOptions& options, passes::TrainStepOptions train,
    std::unique_ptr<ir::Module> forward, const frontend::TracedModule& traced,
    std::shared_ptr<PassTimings> timings) {
  const bool apart = options.dump_dir.empty();
  if (apart) {
    train.dumps = nullptr;
    train.pipeline.timings = std::move(timings);
    train.pipeline.on_pass = nullptr;
  }
  return std::async(
      apart ? std::launch::async : std::launch::deferred,
      [&options, &traced, train = std::move(train),
       forward = std::move(forward)]() mutable -> StatusOr<program::TrainProgram> {
        program::TrainProgram entries{.params = traced.params};
        RETURN_IF_ERROR(AddForwardEntries(entries, options, train, std::move(forward), traced));
        return entries;
      });
}

// The seconds of each stage, in the order they ran.
class StageClock {
 public:
  explicit StageClock(std::vector<std::pair<std::string, double>>& timings) : timings_(timings) {}
  // Records the seconds since the last lap as `stage`'s.
  void Lap(const char* stage) {
    auto now = std::chrono::steady_clock::now();
    timings_.emplace_back(stage, std::chrono::duration<double>(now - start_).count());
    start_ = now;
  }

 private:
  std::vector<std::pair<std::string, double>>& timings_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// The traced forward (--forward-only) or the train program built from it.
struct BuiltModules {
  program::TrainProgram program;
  std::unique_ptr<ir::Module> forward;  // --forward-only: the traced module itself
  std::vector<const ir::Module*> modules;
  std::string entries;  // "train_step (N inputs -> M outputs), ..."
  size_t params = 0;
  int64_t param_values = 0;
};

// Traces the model and, unless --forward-only, runs the passes that build the
// train program (and, beside it, its logits, eval and score entries).
StatusOr<BuiltModules> TraceAndBuild(const CompileOptions& options, passes::TrainStepOptions& train,
                                     const std::function<void(const std::string&)>& show,
                                     StageClock& clock, PassTimings& pass_timings) {
  const models::GptConfig& config = options.config;
  show(fmt::format("tracing {}", config.name));
  ASSIGN_OR_RETURN(frontend::TracedModule traced,
                   models::TraceGpt2Forward(config, options.batch, options.seq));
  auto dumps = std::make_shared<pass::DumpWriter>(options.dump_dir);
  RETURN_IF_ERROR(dumps->Dump(*traced.module, "traced"));
  BuiltModules built{.params = traced.params.size(), .param_values = traced.ParameterValues()};
  clock.Lap("trace");
  if (options.forward_only) {
    built.forward = std::move(traced.module);
    built.modules.push_back(built.forward.get());
    return built;
  }
  train.dumps = dumps;
  // The validation entry runs the very forward the train step is built from.
  std::unique_ptr<ir::Module> forward = options.forward_entries ? traced.module->Clone() : nullptr;
  // Each module of an IR file has its own name (gptc eval --module picks one).
  if (forward) forward->set_name(config.name + ".eval");
  auto forward_timings = std::make_shared<PassTimings>();
  std::future<StatusOr<program::TrainProgram>> forward_entries;
  if (forward) {
    forward_entries =
        BuildForwardEntries(options, train, std::move(forward), traced, forward_timings);
  }
  ASSIGN_OR_RETURN(built.program, passes::BuildTrainProgram(std::move(traced.module), traced.params,
                                                            traced.inputs, train));
  if (forward_entries.valid()) {
    ASSIGN_OR_RETURN(program::TrainProgram entries, forward_entries.get());
    for (program::TrainEntry& e : entries.entries) built.program.entries.push_back(std::move(e));
    pass_timings.insert(pass_timings.end(), forward_timings->begin(), forward_timings->end());
  }
  for (const program::TrainEntry& e : built.program.entries) {
    built.modules.push_back(e.module.get());
    built.entries +=
        fmt::format("{}{} ({} inputs -> {} outputs)", built.entries.empty() ? "" : ", ", e.name(),
                    e.signature.inputs.size(), e.signature.outputs.size());
  }
  clock.Lap("passes");
  return built;
}

// The summary's note of the plan --remat auto chose: "; remat auto: PLAN
// (est. +X ms a step recomputing)"; empty for a plan given as a flag.
std::string RematNote(const CompileOptions& options, const PlanBudget& budget) {
  const passes::RematOptions& remat = options.train.remat;
  if (remat.policy != passes::RematPolicy::kAuto || remat.layers.empty()) return "";
  return fmt::format("; remat {} (est. {:+.3f} ms a step recomputing)", RematText(remat),
                     budget.recompute_us / 1e3);
}

}  // namespace

StatusOr<PlannedCompile> CompileWithPlan(const CompileOptions& options,
                                         const CompileProgress& progress,
                                         const PlanBudget& budget) {
#ifndef GPTC_HAVE_ARTIFACT_WRITER
  if (options.artifact) return Error("this gptc was built without codegen: no artifact");
#endif
  // Every pass is shown (a few dozen lines); only codegen's kernels are
  // rate-limited.
  auto show = [&](const std::string& what) {
    if (progress) progress(what, true);
  };
  PlannedCompile planned;
  CompileResult& result = planned.result;
  StageClock clock(result.timings);
  passes::TrainStepOptions train = options.train;
  auto pass_timings = std::make_shared<PassTimings>();
  train.pipeline.timings = pass_timings;
  train.pipeline.on_pass = [&](const std::string& pass) {
    show(fmt::format("compiling {}: pass {}", options.config.name, pass));
  };
  ASSIGN_OR_RETURN(BuiltModules built, TraceAndBuild(options, train, show, clock, *pass_timings));
  result.pass_seconds = SumPerPass(*pass_timings);
  // Whether `arenas` bytes are over the budget (when there is one); records
  // by how much.
  auto over_budget = [&](int64_t arenas) {
    if (budget.arena_bytes <= 0 || arenas <= budget.arena_bytes) return false;
    planned.over = arenas - budget.arena_bytes;
    return true;
  };

  std::vector<EntryRow> rows;
  analysis::ProgramBuffers buffers;
  if (!options.forward_only && (train.optimize || options.artifact)) {
    show("buffer assignment and reports");
    ASSIGN_OR_RETURN(buffers, analysis::AssignProgramBuffers(built.program));
    if (over_budget(buffers.ArenaBytes())) return planned;
    if (train.optimize) RETURN_IF_ERROR(WriteReports(built.program, options, buffers, rows));
    clock.Lap("reports");
  }

  ModuleSizes sizes{.params = built.params, .param_values = built.param_values};
  std::string text;
  for (const ir::Module* m : built.modules) {
    if (!options.artifact) text += ir::PrintModule(*m);
    for (const auto& c : m->computations()) sizes.instructions += c->instruction_count();
    sizes.computations += m->computations().size();
  }
  result.summary = SummaryHead(options, sizes, built.entries, RematNote(options, budget));
#ifdef GPTC_HAVE_ARTIFACT_WRITER
  if (options.artifact) {
    // The artifact's part follows the entries', whose arenas it sets.
    const std::string head = std::move(result.summary);
    result.summary.clear();
    RETURN_IF_ERROR(BuildArtifactBytes(built.program, options, buffers, progress, rows, result));
    std::vector<int64_t> arenas;
    for (const EntryRow& r : rows) arenas.push_back(r.arena);
    if (over_budget(program::ArenaAllocationBytes(arenas, buffers.hosts))) return planned;
    result.summary = head + FormatEntryRows(rows) + result.summary;
    return planned;
  }
#endif
  result.summary += FormatEntryRows(rows);
  result.bytes = std::move(text);
  return planned;
}

Status AddForwardEntries(program::TrainProgram& program, const CompileOptions& options,
                         const passes::TrainStepOptions& train, std::unique_ptr<ir::Module> forward,
                         const frontend::TracedModule& traced) {
  ASSIGN_OR_RETURN(frontend::TracedModule logits,
                   models::TraceGpt2Logits(options.config, 1, options.seq));
  RETURN_IF_ERROR(passes::AddLogitsEntry(program, std::move(logits.module), logits.inputs, train)
                      .WithPrefix("logits entry"));
  RETURN_IF_ERROR(passes::AddEvalEntry(program, std::move(forward), traced.inputs, train)
                      .WithPrefix("eval entry"));
  // Note [score window]: the train step's tokens in rows of --score-seq.
  const int64_t window = options.score_seq > 0 ? options.score_seq : options.seq;
  const int64_t rows = std::max<int64_t>(1, options.batch * options.seq / window);
  ASSIGN_OR_RETURN(frontend::TracedModule score,
                   models::TraceGpt2Score(options.config, rows, window));
  return passes::AddScoreEntry(program, std::move(score.module), score.inputs, train)
      .WithPrefix("score entry");
}

namespace {

// The largest batch --batch auto tries without --tokens-per-step.
constexpr int64_t kMaxAutoBatch = 1024;

// --batch auto: `options` at the largest power-of-two batch (dividing the
// rows of --tokens-per-step, when given) whose least arenas under any plan
// fit the budget, with the grad-accum that makes the tokens a step; `note`
// says what was chosen.
StatusOr<CompileOptions> ChooseBatch(const CompileOptions& options, const CompileProgress& progress,
                                     std::string& note) {
  const int64_t world = options.train.world_size;
  const int64_t rows = options.tokens_per_step / (options.seq * world);  // 0: not given
  std::vector<int64_t> batches;
  for (int64_t b = 1; b <= (rows > 0 ? rows : kMaxAutoBatch); b *= 2) {
    if (rows == 0 || rows % b == 0) batches.push_back(b);
  }
  auto at = [&](int64_t b) {
    CompileOptions o = options;
    o.batch = b;
    o.batch_auto = false;
    if (rows > 0) o.train.grad_accum = rows / b;
    return o;
  };
  // The least memory any plan needs at batch b.
  auto least = [&](int64_t b) -> StatusOr<int64_t> {
    if (progress) progress(fmt::format("batch auto: the least memory at batch {}", b), true);
    const CompileOptions o = at(b);
    ASSIGN_OR_RETURN(RematCostModel model, MeasureRematCosts(o));
    return SmallestRematPlan(model).arena_bytes;
  };
  ASSIGN_OR_RETURN(int64_t smallest, least(1));
  if (smallest > options.memory_budget) {
    return ResourceError(
        "batch auto: even batch 1 needs {} ({} bytes) under every plan, over the memory budget {} "
        "({} bytes)",
        FormatBytes(smallest), smallest, FormatBytes(options.memory_budget), options.memory_budget);
  }
  // Memory grows with the batch: the last that fits, by bisection; batches[lo]
  // fits, batches[hi] does not (or is past the end).
  size_t lo = 0, hi = batches.size();
  while (hi - lo > 1) {
    const size_t mid = (lo + hi) / 2;
    ASSIGN_OR_RETURN(int64_t bytes, least(batches[mid]));
    (bytes <= options.memory_budget ? lo : hi) = mid;
  }
  const CompileOptions chosen = at(batches[lo]);
  note = fmt::format("; batch auto: {}{}", chosen.batch,
                     rows > 0 ? fmt::format(" x grad-accum {} x seq {}{} = {} tokens a step",
                                            chosen.train.grad_accum, options.seq,
                                            world > 1 ? fmt::format(" x dp {}", world) : "",
                                            WithThousands(options.tokens_per_step))
                              : "");
  return chosen;
}

}  // namespace

StatusOr<CompileResult> CompileProgram(const CompileOptions& options,
                                       const CompileProgress& progress) {
  if (options.batch_auto) {
    std::string note;
    ASSIGN_OR_RETURN(CompileOptions chosen, ChooseBatch(options, progress, note));
    chosen.batch_note = std::move(note);
    return CompileProgram(chosen, progress);
  }
  if (options.train.remat.policy == passes::RematPolicy::kAuto && !options.forward_only) {
    return RematAuto(options, progress).Compile();
  }
  ASSIGN_OR_RETURN(PlannedCompile compiled, CompileWithPlan(options, progress, PlanBudget{}));
  return std::move(compiled.result);
}

}  // namespace gptc::tools
