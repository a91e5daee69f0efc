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
// codegen for --target (codegen::kTargets), thunk plans, parameter specs.
// --timings prints the seconds of every stage. An artifact (unless --no-logits)
// and the IR text with --logits also carry the sampling entry `logits` (batch
// 1, the same seq; gptrun's samples), the validation entry `eval` (the
// train step's batch and seq: forward and loss only) and the scoring entry
// `score` (the same shape: each row's masked loss sum, for gptrun eval). --no-codegen writes
// an artifact without kernels (complete: false) that only the CPU device runs.
// --dp N (alias --world N) compiles the step of one of N data-parallel ranks
// (passes/data_parallel.h): --batch is then the per-rank micro-batch, the
// global batch is N * batch (* grad-accum), and the manifest records world_size.
// Artifacts go through the compile cache (Note [compile cache] in
// compile_cache.h) unless --no-cache; --cached compiles into the cache only,
// and --json prints the run's record instead of the summary lines (Note
// [compile record] in tools/common/compile_record.h; gptrun --model reads
// it). The work itself is CompileProgram (compile_program.h); this file
// turns flags into its options and prints.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "compiler/codegen/target.h"
#include "compiler/program/container.h"
#include "compiler/support/file.h"
#include "compiler/support/text.h"
#include "models/config.h"
#include "tools/common/compile_record.h"
#include "tools/common/flags.h"
#include "tools/common/progress.h"
#include "tools/common/trusted_libraries.h"
#include "tools/gptc/commands.h"
#include "tools/gptc/compile_cache.h"
#include "tools/gptc/compile_program.h"

namespace gptc::tools {

namespace {

// Note [temporary artifact]: --cached without a cache and without -o: the
// artifact in the temp directory under a name nobody can foresee
// (mkstemps(3), created exclusively, mode 0600), so that another user cannot
// block the run by creating it first, nor plant a file for it to read; the
// caller (gptrun --model) removes it when done.
StatusOr<std::string> WriteTemporaryArtifact(const std::string& bytes) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
  if (ec) dir = "/tmp";
  std::string path = (dir / "gptc-XXXXXX.gptx").string();
  const int fd = mkstemps(path.data(), 5);
  if (fd < 0) {
    return Error("{}: cannot create a temporary artifact: {}", path, std::strerror(errno));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      unlink(path.c_str());
      return Error("{}: {}", path, std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) {
    unlink(path.c_str());
    return Error("{}: {}", path, std::strerror(errno));
  }
  return path;
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
  const program::AdamWOptions adamw;  // the defaults --help shows are the pipeline's
  auto str = [](auto v) { return fmt::format("{}", v); };
  Flags flags("gptc compile", "--model NAME [flags]", kCompileAbout);
  flags.Section("model and shape")
      .Value("model", "NAME", "the model config (gptc models lists them)")
      .Value("batch", "N|auto",
             "sequences per step (per rank with --dp); auto: the largest power of two whose "
             "arenas fit --memory-budget under --remat auto",
             "4")
      .Value("tokens-per-step", "N",
             "with --batch auto: gradient accumulation to make N tokens a step (e.g. 524288)")
      .Value("seq", "T", "tokens per sequence (default: the model's context length)")
      .Value("score-seq", "T",
             "the score entry's window (gptrun eval, --hellaswag): rows of T tokens, as many as "
             "--batch rows of --seq make; shorter rows hold more examples a pass (default: --seq)")
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
      .Value("zero", "STAGE",
             "with --dp: 1 shards the AdamW moments and f32 master weights over the ranks "
             "(ZeRO-1: gradients reduce-scattered, parameters all-gathered); 0 keeps them whole",
             "0")
      .Value("grad-comm", "DTYPE",
             "with --zero 1: the gradients' dtype in the reduce-scatter, f32 or bf16 (half the "
             "bytes, rounded as llm.c's; docs/DATA_PARALLEL.md)",
             "f32")
      .Value("bucket-mib", "MIB",
             "with --dp: the all-reduce buckets' cap, as PyTorch DDP's bucket_cap_mb (a larger "
             "gradient is a bucket of its own)",
             "25")
      .Value("first-bucket-mib", "MIB",
             "with --dp: the first bucket's cap, as DDP's 1 (communication starts sooner); "
             "default: as --bucket-mib")
      .Value("weight-decay", "WD", "AdamW weight decay (matrices only)", str(adamw.weight_decay))
      .Value("clip-norm", "C", "global gradient-norm clip; 0 for none", str(adamw.clip_norm))
      .Value("beta1", "B1", "AdamW beta1", str(adamw.beta1))
      .Value("beta2", "B2", "AdamW beta2", str(adamw.beta2))
      .Value("eps", "E", "AdamW epsilon", str(adamw.eps))
      .Value("precision", "bf16|f32", "bf16: mixed precision (f32 master weights); f32: all f32",
             "bf16")
      .Value("remat", "none|dots|wide|block|auto|PLAN",
             "what the backward recomputes instead of keeping; PLAN: a policy per block "
             "(block:0-3,none:4-11); auto: the plan per block with the least estimated step "
             "time whose arena fits --memory-budget",
             "none")
      .Value("memory-budget", "BYTES|GPU",
             "--remat auto: what all entries' arenas may take together, e.g. 80GiB (what "
             "gptrun allocates at load, scratch included); h100, h200 or a100: that card's "
             "memory less 1.5 GiB for the CUDA context, gptrun's reserve and the cuBLASLt "
             "workspace");
  flags.Section("output")
      .Value("output", "FILE",
             "FILE.gptx: the artifact; any other name: the IR text (default: MODEL.ir)")
      .Short('o')
      .Value("target", codegen::TargetNames("|", "|"), "the GPU architecture of the kernels",
             std::string(codegen::TargetName(codegen::kTargets[0].target)))
      .Value("attention-mma", "mma.sync|wgmma",
             "the attention kernels' tensor-core instructions: wgmma (Hopper's asynchronous "
             "warpgroup MMA on swizzled tiles) needs --target sm_90a",
             "mma.sync")
      .Bool("emu",
            "add the kernels compiled for this host, for gptrun --device emu, and record "
            "that library as trusted here ($XDG_CACHE_HOME/gptc/trusted-emu; docs/EMULATOR.md)")
      .Bool("no-codegen", "an artifact without kernels, that only gptrun --device cpu runs")
      .Conflicts("emu")
      .Bool("no-logits",
            "an artifact without the sampling (logits), validation (eval) and scoring (score) "
            "entries")
      .Bool("logits", "IR text: add the logits, eval and score entries")
      .Conflicts("no-logits")
      .Bool("forward-only", "IR text: write the traced forward module only")
      .Bool("no-optimize", "IR text: skip the simplify/cse/remat/fusion/schedule stages")
      .Bool("no-cache", "compile even if the compile cache has the artifact, and do not store it")
      .Bool("cached",
            "compile an artifact into the compile cache only (-o optional): the last line is "
            "`cache: reused|stored|none PATH` (none: no usable cache, a warning says why, and "
            "PATH is -o or a file in the temp directory)")
      .Bool("json",
            "print one JSON object (format gptc-compile-1: the artifact, how the cache served "
            "it, its flags, summary and warnings) instead of the summary lines; gptrun --model "
            "reads it");
  flags.Section("reports")
      .Bool("fusion-report", "print each entry's kernels with their roofline time")
      .Bool("memory-report", "print each entry's largest buffers and arena size")
      .Value("roofline-gpu", "h100|h200|a100", "the GPU whose peaks the fusion report uses", "h100")
      .Value("dump-dir", "DIR",
             "write the IR after every stage (0000.traced.ir, ...) and the reports there")
      .Bool("timings", "print the seconds of every stage and pass");
  return flags;
}

// The model, its shapes and the train step's options from the flags; errors
// are usage errors naming the flag.
Status ParseModel(const Flags& flags, CompileOptions& o) {
  ASSIGN_OR_RETURN(o.config, models::FindGptConfig(flags.Get("model")));
  models::ConfigOverrides overrides;
  for (auto [name, field] :
       {std::pair{"layers", &overrides.layers}, std::pair{"heads", &overrides.heads},
        std::pair{"width", &overrides.width}}) {
    ASSIGN_OR_RETURN(*field, OptionalInt(flags, name));
  }
  o.config = models::ApplyOverrides(o.config, overrides);
  o.batch_auto = flags.Get("batch") == "auto";
  if (!o.batch_auto) {
    ASSIGN_OR_RETURN(o.batch, flags.GetInt("batch"));
  }
  ASSIGN_OR_RETURN(o.seq, flags.GetInt("seq", o.config.positions));
  if (flags.Has("score-seq")) {
    ASSIGN_OR_RETURN(o.score_seq, flags.GetInt("score-seq"));
    if (o.score_seq < 1 || o.score_seq > o.seq) {
      return Error("--score-seq must be between 1 and --seq {}, got {}", o.seq, o.score_seq);
    }
  }
  if (flags.Has("tokens-per-step")) {
    if (!o.batch_auto) return Error("--tokens-per-step needs --batch auto");
    ASSIGN_OR_RETURN(o.tokens_per_step, flags.GetInt("tokens-per-step"));
    if (o.tokens_per_step < 1 || o.tokens_per_step % o.seq != 0) {
      return Error("--tokens-per-step must be a positive multiple of --seq {}, got {}", o.seq,
                   o.tokens_per_step);
    }
  }
  return models::ValidateTraceShape(o.config, o.batch_auto ? 1 : o.batch, o.seq);
}

Status ParseTraining(const Flags& flags, CompileOptions& o) {
  passes::TrainStepOptions& train = o.train;
  ASSIGN_OR_RETURN(train.grad_accum, flags.GetInt("grad-accum"));
  if (train.grad_accum < 1) return Error("--grad-accum must be >= 1, got {}", train.grad_accum);
  for (const char* name : {"dp", "world"}) {  // --world is an alias of --dp
    if (!flags.Has(name)) continue;
    ASSIGN_OR_RETURN(int64_t world, flags.GetInt(name, 1));
    if (world < 1) return Error("--{} must be a number of ranks >= 1, got {}", name, world);
    if (std::string_view(name) == "world" && flags.Has("dp") && train.world_size != world) {
      return Error("--dp {} and --world {} disagree", train.world_size, world);
    }
    train.world_size = world;
  }
  ASSIGN_OR_RETURN(train.zero_stage, flags.GetInt("zero", 0));
  if (train.zero_stage != 0 && train.zero_stage != 1) {
    return Error("--zero must be 0 or 1, got {}", train.zero_stage);
  }
  if (train.zero_stage == 1 && train.world_size < 2) {
    return Error("--zero 1 shards over data-parallel ranks: give --dp N with N >= 2");
  }
  const std::string grad_comm = flags.Get("grad-comm");
  if (grad_comm != "f32" && grad_comm != "bf16") {
    return Error("--grad-comm must be f32 or bf16, got '{}'", grad_comm);
  }
  if (grad_comm == "bf16" && train.zero_stage == 0) {
    return Error("--grad-comm bf16 needs --zero 1 (the all-reduce of --zero 0 runs in f32)");
  }
  train.grad_comm = grad_comm == "bf16" ? ir::DType::kBF16 : ir::DType::kF32;
  ASSIGN_OR_RETURN(const int64_t bucket_mib, flags.GetInt("bucket-mib", 25));
  if (bucket_mib < 1 || bucket_mib > (int64_t{1} << 20)) {
    return Error("--bucket-mib must be in [1, 1048576], got {}", bucket_mib);
  }
  train.all_reduce_bucket_bytes = bucket_mib << 20;
  if (flags.Has("first-bucket-mib")) {
    ASSIGN_OR_RETURN(const int64_t first_mib, flags.GetInt("first-bucket-mib", 0));
    if (first_mib < 1 || first_mib > (int64_t{1} << 20)) {
      return Error("--first-bucket-mib must be in [1, 1048576], got {}", first_mib);
    }
    train.first_bucket_bytes = first_mib << 20;
  }
  program::AdamWOptions& adamw = train.adamw;
  for (auto [name, field] :
       {std::pair{"weight-decay", &adamw.weight_decay}, std::pair{"clip-norm", &adamw.clip_norm},
        std::pair{"beta1", &adamw.beta1}, std::pair{"beta2", &adamw.beta2},
        std::pair{"eps", &adamw.eps}}) {
    ASSIGN_OR_RETURN(*field, flags.GetDouble(name, *field));
  }
  for (double beta : {adamw.beta1, adamw.beta2}) {
    if (!(beta >= 0 && beta < 1)) return Error("--beta1/--beta2 must be in [0, 1)");
  }
  // NaN fails every comparison: each check is written to refuse it.
  if (!(adamw.eps > 0) || !std::isfinite(adamw.eps)) {
    return Error("--eps must be a finite number > 0, got {}", adamw.eps);
  }
  for (auto [name, value] :
       {std::pair{"weight-decay", adamw.weight_decay}, std::pair{"clip-norm", adamw.clip_norm}}) {
    if (!(value >= 0) || !std::isfinite(value)) {
      return Error("--{} must be a finite number >= 0, got {}", name, value);
    }
  }

  const std::string precision = flags.Get("precision");
  std::optional<passes::PrecisionPolicy> policy = passes::ParsePrecisionPolicy(precision);
  if (!policy) return Error("--precision must be bf16 or f32, got '{}'", precision);
  train.precision.policy = *policy;
  const std::string remat_text = flags.Get("remat");
  std::optional<passes::RematPolicy> remat = passes::ParseRematPolicy(remat_text);
  if (!remat && remat_text.find(':') != std::string::npos) {
    StatusOr<std::vector<passes::RematPolicy>> plan = passes::ParseRematPlan(remat_text);
    if (!plan.ok()) return plan.status().WithPrefix("--remat");
    if (static_cast<int64_t>(plan->size()) != o.config.layers) {
      return Error("--remat {} names {} but {} has {}", remat_text,
                   Plural(static_cast<int64_t>(plan->size()), "block"), o.config.name,
                   Plural(o.config.layers, "block"));
    }
    train.remat.layers = *plan;
    remat = passes::RematPolicy::kNone;  // the plan decides
  }
  if (!remat) {
    return Error(
        "--remat must be none, dots, wide, block, auto or a plan per block "
        "(block:0-3,none:4-11), got '{}'",
        remat_text);
  }
  train.remat.policy = *remat;
  // --batch auto searches batches and remat plans together, in the budget.
  if (o.batch_auto && *remat != passes::RematPolicy::kAuto) {
    return Error("--batch auto needs --remat auto and --memory-budget");
  }
  if (*remat == passes::RematPolicy::kAuto) {
    if (!flags.Has("memory-budget")) return Error("--remat auto needs --memory-budget");
    const std::string value = flags.Get("memory-budget");
    if (std::optional<program::GpuSpec> gpu = program::FindGpuSpec(value)) {
      o.memory_budget = gpu->memory_bytes - program::kGpuMemoryBesideArenas;
    } else {
      StatusOr<int64_t> budget = passes::ParseByteSize(value);
      if (!budget.ok()) {
        return budget.status().WithPrefix("--memory-budget (bytes, or h100, h200 or a100)");
      }
      o.memory_budget = *budget;
    }
  } else if (flags.Has("memory-budget")) {
    return Error("--memory-budget only applies to --remat auto");
  }
  train.optimize = !flags.Has("no-optimize");
  if (o.batch_auto) {
    if (flags.Has("grad-accum") && o.tokens_per_step > 0) {
      return Error("--tokens-per-step sets the gradient accumulation; drop --grad-accum");
    }
    if (train.world_size > 1 && o.tokens_per_step % (o.seq * train.world_size) != 0) {
      return Error("--tokens-per-step must be a multiple of --seq x --dp");
    }
  }
  return Status::Ok();
}

// Note [compile cache]: a hit is another artifact's when its manifest says
// other shapes or flags than the key's inputs (a file replaced in the cache
// by another valid artifact), or when its summary is missing: one field
// named, and the entry is compiled again.
Status CacheEntryMatches(const program::Manifest& m, const std::string& summary,
                         const CompileOptions& o) {
  if (summary.empty()) return Error("its summary file is empty");
  const models::GptConfig& c = o.config;
  const program::CompileFlags& f = m.flags;
  // --remat auto records "auto: PLAN", the plan it chose.
  const std::string remat = RematText(o.train.remat);
  const bool remat_same = remat.find(':') != std::string::npos
                              ? f.remat == remat
                              : f.remat.substr(0, f.remat.find(':')) == remat;
  const std::pair<const char*, bool> checks[] = {
      {"model", m.model.name == c.name && m.model.layers == c.layers && m.model.heads == c.heads &&
                    m.model.width == c.width && m.model.vocab == c.vocab &&
                    m.model.positions == c.positions},
      {"batch", o.batch_auto || f.batch == o.batch},
      {"seq", f.seq == o.seq},
      {"grad_accum", o.batch_auto || f.grad_accum == o.train.grad_accum},
      {"world_size", f.world_size == o.train.world_size},
      {"precision", passes::ParsePrecisionPolicy(f.precision) == o.train.precision.policy},
      {"remat", remat_same},
      {"codegen", f.codegen == o.codegen},
      {"attention_mma",
       !o.codegen || codegen::ParseAttentionMma(f.attention_mma) == o.attention_mma},
      {"target", codegen::ParseTarget(m.target) == o.target}};
  for (const auto& [field, same] : checks) {
    if (!same) return Error("its manifest's {} is not this compile's", field);
  }
  return Status::Ok();
}

// --dump-dir: the files an earlier compile dumped there (NNNN.STAGE.ir, and
// ENTRY.REPORT.txt for every entry a compile can have) go, so that a
// directory reused after another compile holds this one's alone; other
// files stay.
Status ClearEarlierDumps(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return Status::Ok();
  std::vector<std::string> reports;
  for (program::EntryRole role : program::kEntryRoles) {
    for (const char* report : {"buffer-assignment", "fusion-report", "memory-report"}) {
      reports.push_back(fmt::format("{}.{}.txt", program::EntryRoleName(role), report));
    }
  }
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool stage = name.size() > 8 && name.ends_with(".ir") && name[4] == '.' &&
                       std::all_of(name.begin(), name.begin() + 4, ::isdigit);
    if (!stage && std::find(reports.begin(), reports.end(), name) == reports.end()) continue;
    if (!e.is_regular_file() || !std::filesystem::remove(e.path(), ec)) {
      return Error("--dump-dir {}: cannot remove the earlier dump {}{}", dir, name,
                   ec ? ": " + ec.message() : "");
    }
  }
  return Status::Ok();
}

// What to write and report. `output` is the file to write (empty with
// --cached and no -o).
Status ParseOutput(const Flags& flags, CompileOptions& o, std::string& output) {
  std::optional<program::GpuSpec> gpu = program::FindGpuSpec(flags.Get("roofline-gpu"));
  if (!gpu) {
    return Error("--roofline-gpu must be h100, h200 or a100, got '{}'", flags.Get("roofline-gpu"));
  }
  o.roofline_gpu = *gpu;
  const bool cached = flags.Has("cached");
  output = flags.Get("output", cached ? "" : o.config.name + ".ir");
  if (!output.empty()) {
    // Before any work: a device, FIFO or directory is refused now, not after
    // the compile.
    RETURN_IF_ERROR(CheckOutputTarget(output));
  }
  o.artifact = cached || output.ends_with(".gptx");
  if (cached && !output.empty() && !output.ends_with(".gptx")) {
    return Error("--cached compiles an artifact: -o {} must end in .gptx", output);
  }
  if (cached && flags.Has("no-cache")) return Error("--cached and --no-cache contradict");
  if (flags.Has("json")) {
    if (!o.artifact) return Error("--json records an artifact: add -o FILE.gptx or --cached");
    for (const char* report : {"timings", "fusion-report", "memory-report"}) {
      if (flags.Has(report)) return Error("--json prints its record alone: drop --{}", report);
    }
  }
  o.forward_only = flags.Has("forward-only");
  if (o.artifact && (o.forward_only || !o.train.optimize)) {
    return Error(
        "-o {}: an artifact needs the optimized train step "
        "(drop --forward-only / --no-optimize)",
        output);
  }
  const std::string target = flags.Get("target");
  std::optional<codegen::Target> parsed_target = codegen::ParseTarget(target);
  if (!parsed_target) {
    return Error("--target must be {}, got '{}'", codegen::TargetNames(", ", " or "), target);
  }
  o.target = *parsed_target;
  const std::string mma = flags.Get("attention-mma");
  std::optional<codegen::AttentionMma> parsed_mma = codegen::ParseAttentionMma(mma);
  if (!parsed_mma) return Error("--attention-mma must be mma.sync or wgmma, got '{}'", mma);
  o.attention_mma = *parsed_mma;
  if (!codegen::TargetHas(o.target, o.attention_mma)) {
    const std::string_view needed =
        codegen::TargetName(*codegen::TargetRequiredBy(o.attention_mma));
    return Error("--attention-mma {} needs --target {} ({} is an {} instruction), not {}", mma,
                 needed, mma, needed, target);
  }
  o.emu = flags.Has("emu");
  o.codegen = !flags.Has("no-codegen");
  o.forward_entries = o.artifact ? !flags.Has("no-logits") : flags.Has("logits");
  o.dump_dir = flags.Get("dump-dir");
  o.print_fusion_report = flags.Has("fusion-report");
  o.print_memory_report = flags.Has("memory-report");
  return Status::Ok();
}

void PrintTimings(const std::vector<std::pair<std::string, double>>& timings,
                  const CompileResult* compiled) {
  std::string line = "timings:";
  for (const auto& [stage, t] : timings) line += fmt::format(" {} {:.3f}s", stage, t);
  if (compiled != nullptr) {
    line += "\npasses:";
    for (const auto& [name, t] : compiled->pass_seconds)
      line += fmt::format(" {} {:.3f}s", name, t);
    if (!compiled->slowest_kernels.empty()) {
      line += "\nslowest kernels:" + compiled->slowest_kernels;
    }
  }
  std::printf("%s\n", line.c_str());
}

// Note [trusted emulator libraries]: the emulator library of an artifact
// gptc writes is one gptrun may load on this machine.
void TrustEmuLibrary(std::string_view artifact, const std::function<void(std::string)>& warn) {
  std::optional<std::string_view> library = program::FindSection(artifact, "emu");
  if (!library) return;
  if (Status s = RecordTrustedLibrary(*library); !s.ok()) {
    warn(fmt::format(
        "its emulator library is not recorded as trusted ({}): gptrun --device emu will need "
        "--trust-artifact",
        s.message()));
  }
}

// One `gptc compile` after its flags: the cache lookup, the compile, the
// files written, and what it prints: the summary lines for people, or with
// --json the record alone (Note [compile record] in
// tools/common/compile_record.h).
class CompileRun {
 public:
  CompileRun(const Flags& flags, const CompileOptions& options, std::string output)
      : flags_(flags), options_(options), output_(std::move(output)) {}

  int Run() {
    // Note [compile cache]: artifacts only (IR text is quick to rebuild).
    if (options_.artifact && !flags_.Has("no-cache")) {
      if (std::optional<std::string> dir = CompileCache::DefaultDir()) cache_.emplace(*dir);
    }
    // Note [compile cache]: a cache that cannot be used is a warning for
    // --cached too; its artifact then goes to -o, or to the temp directory.
    if (flags_.Has("cached") && !cache_) {
      Warn("not cached: no cache directory ($XDG_CACHE_HOME and $HOME are unset)");
    }
    key_ = cache_ ? CompileCache::Key(CompileInputs(options_)) : "";
    const bool reports =
        !options_.dump_dir.empty() || options_.print_fusion_report || options_.print_memory_report;
    if (cache_ && !reports) {
      StatusOr<bool> served = ServeFromCache();
      if (!served.ok()) return Fail(1, served.status());
      if (*served) return 0;
    }
    return CompileAndStore();
  }

 private:
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  void Warn(std::string message) {
    std::fprintf(stderr, "gptc: warning: %s\n", message.c_str());
    record_.warnings.push_back(std::move(message));
  }

  // The cache's artifact, when it has a usable one: written to -o and
  // printed. False: compile it.
  StatusOr<bool> ServeFromCache() {
    std::optional<CompileCache::Entry> hit = cache_->Lookup(key_);
    if (!hit) return false;
    StatusOr<std::string> bytes = ReadFile(hit->path);
    if (!bytes.ok()) return false;  // an entry gone meanwhile
    // Note [compile cache]: a damaged entry (a flipped byte, a file cut
    // short) is compiled again, never handed out.
    StatusOr<program::Artifact> a = program::DecodeArtifact(*bytes, hit->path);
    Status usable = a.ok() ? CacheEntryMatches(a->manifest, hit->summary, options_) : a.status();
    if (!usable.ok()) {
      Warn(fmt::format("damaged compile cache entry: {}; compiling again",
                       usable.WithPrefix(hit->path).message()));
      return false;
    }
    if (!output_.empty()) RETURN_IF_ERROR(WriteFileAtomically(output_, *bytes));
    TrustEmuLibrary(*bytes, [this](std::string w) { Warn(std::move(w)); });
    record_.artifact = hit->path;
    record_.cache = CacheUse::kReused;
    record_.flags = a->manifest.flags;
    record_.summary = hit->summary;
    record_.note = hit->note;
    record_.seconds = Seconds();
    Print({{"cache", record_.seconds}}, nullptr);
    return true;
  }

  int CompileAndStore() {
    if (!options_.dump_dir.empty()) {
      if (Status s = ClearEarlierDumps(options_.dump_dir); !s.ok()) return Fail(1, s);
    }
    // Long compiles (gpt2-1558m: minutes) show their phase on a terminal.
    ProgressLine progress("gptc", TerminalProgress());
    StatusOr<CompileResult> compiled = CompileProgram(
        options_, [&](const std::string& what, bool force) { progress.Show(what, force); });
    progress.Clear();
    if (!compiled.ok()) return Fail(1, compiled.status());
    auto warn = [this](std::string w) { Warn(std::move(w)); };
    if (options_.artifact) TrustEmuLibrary(compiled->bytes, warn);
    auto t0 = std::chrono::steady_clock::now();
    if (!output_.empty()) {
      if (Status s = WriteFileAtomically(output_, compiled->bytes); !s.ok()) return Fail(1, s);
    }
    record_.artifact = output_;
    if (cache_) {
      Status s = cache_->Store(key_, compiled->bytes, compiled->summary, compiled->note);
      if (!s.ok()) {
        Warn(fmt::format("not cached: {}", s.message()));
      } else {
        record_.cache = CacheUse::kStored;
        record_.artifact = cache_->ArtifactPath(key_);
      }
    }
    // --cached without a usable cache: the artifact somewhere gptrun can read it.
    if (flags_.Has("cached") && record_.artifact.empty()) {
      StatusOr<std::string> temp = WriteTemporaryArtifact(compiled->bytes);
      if (!temp.ok()) return Fail(1, temp.status());
      record_.artifact = *temp;
      record_.temporary = true;
    }
    compiled->timings.emplace_back(
        "write", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    record_.flags = compiled->flags;
    record_.summary = compiled->summary;
    record_.note = compiled->note;
    record_.seconds = Seconds();
    Print(compiled->timings, &*compiled);
    return 0;
  }

  // The summary lines (the path is -o, else the artifact's), or the record.
  void Print(const std::vector<std::pair<std::string, double>>& timings,
             const CompileResult* compiled) {
    record_.output = output_;
    record_.target = std::string(codegen::TargetName(options_.target));
    if (flags_.Has("json")) {
      std::printf("%s\n", FormatCompileRecord(record_).c_str());
      return;
    }
    const std::string& path = output_.empty() ? record_.artifact : output_;
    const bool reused = record_.cache == CacheUse::kReused;
    std::printf(
        "%s, %.3f s -> %s%s\n", record_.summary.c_str(), record_.seconds, path.c_str(),
        reused ? fmt::format(" (reused the compile cache's {})", record_.artifact).c_str() : "");
    if (flags_.Has("timings")) PrintTimings(timings, compiled);
    if (!record_.note.empty()) std::printf("%s\n", record_.note.c_str());
    if (flags_.Has("cached")) {
      std::printf("cache: %s %s\n", std::string(CacheUseName(record_.cache)).c_str(),
                  record_.artifact.c_str());
    }
  }

  const Flags& flags_;
  const CompileOptions& options_;
  const std::string output_;  // -o, or empty (--cached)
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::optional<CompileCache> cache_;
  std::string key_;
  CompileRecord record_;
};

}  // namespace

int CompileCommand(int argc, char** argv) {
  Flags flags = DeclareCompileFlags();
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) {
    return Fail(s.WithCode(StatusCode::kUsage));
  }
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  if (!flags.positional().empty()) {
    return Fail(UsageError("compile: unexpected argument '{}'", flags.positional()[0]));
  }
  if (!flags.Has("model")) return Fail(UsageError("compile needs --model NAME (see gptc models)"));
  CompileOptions options;
  std::string output;
  for (Status s : {ParseModel(flags, options), ParseTraining(flags, options),
                   ParseOutput(flags, options, output)}) {
    if (!s.ok()) return Fail(s.WithCode(StatusCode::kUsage));
  }
  return CompileRun(flags, options, std::move(output)).Run();
}

}  // namespace gptc::tools
