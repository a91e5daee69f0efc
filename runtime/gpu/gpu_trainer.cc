#include "runtime/gpu/gpu_trainer.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <ranges>
#include <span>

#include "compiler/support/text.h"
#include "runtime/gpu/autotune.h"
#include "runtime/gpu/backend.h"
#include "runtime/gpu/cublaslt_api.h"
#include "runtime/gpu/cuda_api.h"
#include "runtime/gpu/device_buffer.h"
#include "runtime/gpu/executor.h"
#include "runtime/gpu/gpu_trainer_impl.h"
#include "runtime/gpu/kernel_modules.h"
#include "runtime/gpu/plan_reader.h"
#include "runtime/init.h"

namespace gptc::rt::gpu {

using program::EntryRole;
using program::SlotRole;

GpuTrainer::GpuTrainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuTrainer::~GpuTrainer() = default;

StatusOr<std::unique_ptr<GpuTrainer>> GpuTrainer::Create(const program::Artifact& artifact,
                                                         std::string_view artifact_path,
                                                         const program::TrainProgram* program,
                                                         uint64_t seed, const GpuOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->artifact_path = std::string(artifact_path);
  impl->artifact_checksum = artifact.checksum;
  impl->program = program;
  impl->options = options;
  impl->backend = options.backend != nullptr ? options.backend : &ActiveBackend();
  impl->cuda = impl->backend->runtime;
  RETURN_IF_ERROR(impl->Load(artifact, seed));
  return std::unique_ptr<GpuTrainer>(new GpuTrainer(std::move(impl)));
}

// Note [entries of a step]: with grad-accum 1, one entry `train_step` does
// everything. With grad-accum k, `accumulate` runs once per micro-batch,
// adding its gradients into accumulators that stay in its arena (donated in
// place), and `apply` clips, all-reduces (--dp) and updates. The state
// (parameters, AdamW moments) lives in apply's arena, so a step also copies
// the parameters into accumulate's (once per step), zeroes its accumulators,
// and copies them into apply's after the k-th micro-batch: device-to-device
// copies of 2 x 4 bytes per parameter (about 1 GB a step for gpt2-124m;
// llm.c, which accumulates in place, needs none).

Status GpuTrainer::Impl::Load(const program::Artifact& artifact, uint64_t seed) {
  // The artifact, before touching the device.
  if (!artifact.manifest.flags.codegen) {
    return Error(
        "{}: was compiled with --no-codegen (no kernels): only --device cpu runs it; compile it "
        "without --no-codegen for the GPU",
        Where());
  }
  if (!artifact.manifest.complete) {
    return Error(
        "{}: the artifact is incomplete (complete:false: some instructions have no "
        "kernel yet, see gptc inspect); the GPU device cannot run it, --device cpu can",
        Where());
  }
  RETURN_IF_ERROR(CheckCommunicatorWorld(program->world_size, options.communicator, Where()));
  StatusOr<std::vector<EntryPlan>> read = ReadPlan(artifact.plan);
  if (!read.ok()) return read.status().WithPrefix(Where());
  std::vector<EntryPlan> plans = std::move(read).value();
  std::vector<EntryPlan> ordered;
  for (const program::TrainEntry& entry : program->entries) {
    auto it = std::find_if(plans.begin(), plans.end(),
                           [&](const EntryPlan& p) { return p.role == entry.role; });
    if (it == plans.end()) return Error("{}: the plan has no entry {}", Where(), entry.name());
    entries.push_back(EntryState{.entry = &entry});
    ordered.push_back(std::move(*it));
  }
  const bool accumulates = program->grad_accum > 1;
  for (EntryState& e : entries) {
    const EntryRole role = e.entry->role;
    if (role == (accumulates ? EntryRole::kApply : EntryRole::kTrainStep)) state_entry = &e;
    if (role == (accumulates ? EntryRole::kAccumulate : EntryRole::kTrainStep)) micro_entry = &e;
  }
  if (state_entry == nullptr || micro_entry == nullptr) {
    return Error(
        "{}: grad-accum {} needs the entr{}, the program has {}", Where(), program->grad_accum,
        accumulates ? "ies accumulate and apply" : "y train_step",
        fmt::join(program->entries | std::views::transform(&program::TrainEntry::name), ", "));
  }

  ASSIGN_OR_RETURN(device, OpenDevice(*cuda, options.device));
  RETURN_IF_ERROR(
      CheckTargetRuns(artifact.manifest.target, device.capability, device.name, Where()));
  RETURN_IF_ERROR(PlanMemory(ordered));

  ASSIGN_OR_RETURN(cu, backend->driver());
  ASSIGN_OR_RETURN(lt, backend->cublaslt());
  if (cublasStatus_t s = lt->Create(&lt_handle); s != CUBLAS_STATUS_SUCCESS) {
    lt_handle = nullptr;
    return Error("{}: cublasLtCreate ({}): {}", Where(), lt->path, lt->StatusText(s));
  }
  RETURN_IF_ERROR(cuda->Check(cuda->StreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                              "cudaStreamCreateWithFlags"));
  for (cudaEvent_t* e : {&uploaded, &done}) {
    RETURN_IF_ERROR(cuda->Check(cuda->EventCreateWithFlags(e, cudaEventDisableTiming),
                                "cudaEventCreateWithFlags"));
  }
  if (workspace_bytes > 0) {
    RETURN_IF_ERROR(cuda->Check(workspace.Allocate(*cuda, workspace_bytes),
                                fmt::format("{}: cudaMalloc({}, cuBLASLt workspace)", Where(),
                                            FormatBytes(workspace_bytes))));
  }
  Progress(fmt::format("loading {} kernels", artifact.manifest.kernels.size()));
  ASSIGN_OR_RETURN(modules, KernelModules::Load(*cu, artifact, Where(), device));

  RETURN_IF_ERROR(CreateExecutors(ordered));
  RETURN_IF_ERROR(FindSlots());

  // The initial state: the same counter-based values as the CPU device.
  TrainerState state;
  for (size_t i = 0; i < program->params.size(); ++i) {
    const program::ParamSpec& spec = program->params[i];
    state.values.push_back(InitParameter(spec, seed, i));
    state.adam_m.emplace_back(spec.shape.num_elements(), 0.0f);
    state.adam_v.emplace_back(spec.shape.num_elements(), 0.0f);
  }
  return UploadState(state);
}

Status GpuTrainer::Impl::PlanMemory(const std::vector<EntryPlan>& ordered) {
  for (const EntryPlan& p : ordered) {
    for (const Thunk& t : p.thunks) {
      if (t.kind() == ThunkKind::kGemm) {
        workspace_bytes =
            std::max(workspace_bytes, std::get<GemmThunk>(t.body).config.workspace_bytes);
      }
    }
  }
  StatusOr<std::vector<int>> hosts = CheckArenaHosts(ordered, micro_entry->entry->role);
  if (!hosts.ok()) return hosts.status().WithPrefix(Where());
  for (size_t i = 0; i < hosts->size(); ++i) {
    if ((*hosts)[i] >= 0) entries[i].host = &entries[(*hosts)[i]];
  }
  std::vector<MemoryNeed> needs;
  for (size_t i = 0; i < ordered.size(); ++i) {
    if (entries[i].host == nullptr) {
      needs.push_back(
          {fmt::format("arena of {}", ordered[i].name()), ArenaBytes(ordered, i), true});
    }
  }
  needs.push_back({"cuBLASLt workspace", workspace_bytes});
  return CheckMemoryFits(needs, options.reserve_bytes, device, Where());
}

Status GpuTrainer::Impl::CreateExecutors(std::vector<EntryPlan>& ordered) {
  if (options.autotune.mode != AutotuneMode::kOff) autotuner = MakeAutotuner();
  ExecutorResources resources{.backend = backend,
                              .stream = stream,
                              .lt_handle = lt_handle,
                              .modules = modules.get(),
                              .communicator = options.communicator,
                              .workspace = workspace.ptr,
                              .workspace_bytes = static_cast<size_t>(workspace_bytes),
                              .autotuner = autotuner.get()};
  // Zeros: nothing reads memory it did not write, but zeros keep runs
  // reproducible. On the work stream, as every later upload: the legacy
  // default stream would race them (the stream is non-blocking). The
  // autotuning's gemms run on 0x3c bytes instead (0.0115 in bf16 and f32:
  // finite and normal): tensor cores multiplying zeros draw less power, so
  // they would time faster than on the run's values.
  const int fill = autotuner != nullptr ? 0x3c : 0;
  std::vector<int64_t> arena_bytes;
  for (size_t i = 0; i < entries.size(); ++i) {
    arena_bytes.push_back(std::max<int64_t>(ArenaBytes(ordered, i), 256));
  }
  for (int pass : {0, 1, 2}) {  // allocate, create executors, zero after the autotuning
    for (size_t i = 0; i < entries.size(); ++i) {
      EntryState& e = entries[i];
      const int64_t bytes = arena_bytes[i];
      if (pass == 0 && e.host == nullptr) {
        RETURN_IF_ERROR(cuda->Check(e.arena.Allocate(*cuda, bytes),
                                    fmt::format("{}: cudaMalloc({}, arena of entry {})", Where(),
                                                FormatBytes(bytes), e.entry->name())));
        RETURN_IF_ERROR(cuda->Check(cuda->MemsetAsync(e.arena.ptr, fill, bytes, stream),
                                    "cudaMemsetAsync(arena)"));
      } else if (pass == 1) {
        if (&e == state_entry || &e == micro_entry)
          RETURN_IF_ERROR(
              CheckTrainerSignature(e.entry->signature, ordered[i]).WithPrefix(Where()));
        char* arena = static_cast<char*>((e.host != nullptr ? e.host : &e)->arena.ptr);
        Progress(fmt::format("preparing entry {} ({} thunks)", e.entry->name(),
                             ordered[i].thunks.size()));
        StatusOr<std::unique_ptr<EntryExecutor>> ex =
            EntryExecutor::Create(resources, std::move(ordered[i]), arena);
        if (!ex.ok()) return ex.status().WithPrefix(Where());
        e.executor = std::move(ex).value();
        // Note [epilogue fallback]: the run goes on, slower; say so once per gemm.
        for (const std::string& w : e.executor->warnings()) fmt::print(stderr, "warning: {}\n", w);
      } else if (pass == 2 && fill != 0 && e.host == nullptr) {
        RETURN_IF_ERROR(cuda->Check(cuda->MemsetAsync(e.arena.ptr, 0, bytes, stream),
                                    "cudaMemsetAsync(arena, after the autotuning)"));
      }
    }
  }

  if (autotuner != nullptr) {
    std::vector<std::string> warnings;
    autotuner->Finish(warnings);
    for (const std::string& w : warnings) fmt::print(stderr, "warning: {}\n", w);
  }
  return Status::Ok();
}

int64_t GpuTrainer::Impl::ArenaBytes(const std::vector<EntryPlan>& ordered, size_t i) const {
  int64_t bytes = ordered[i].arena_size;
  for (size_t g = 0; g < ordered.size(); ++g) {
    if (entries[g].host == &entries[i]) bytes = std::max(bytes, ordered[g].arena_size);
  }
  return bytes;
}

std::unique_ptr<GemmAutotuner> GpuTrainer::Impl::MakeAutotuner() const {
  AutotuneOptions tuning = options.autotune;
  // Note [emulated time]: the emulator's timings are stand-ins that repeats
  // would not change.
  if (backend->stand_in_clock) tuning.warmup = 0, tuning.reps = 1;
  tuning.progress = options.progress;
  std::vector<std::string> warnings;
  auto tuner = std::make_unique<GemmAutotuner>(
      *cuda, tuning,
      fmt::format("{} | driver {} | cuBLASLt {}", device.name, device.driver_version, lt->version),
      warnings);
  for (const std::string& w : warnings) fmt::print(stderr, "warning: {}\n", w);
  return tuner;
}

Status GpuTrainer::Impl::FindSlots() {
  const EntryPlan& mp = micro_entry->executor->plan();
  const EntryPlan& sp = state_entry->executor->plan();
  size_t staged = 0;
  auto stage = [&](const EntryPlan& plan, SlotRole role, StagedInput& input) -> Status {
    input.slot = plan.FindInput(role);
    if (input.slot == nullptr) {
      return Error("{}: entry {} has no {} input", Where(), plan.name(),
                   program::SlotRoleName(role));
    }
    input.offset = staged;
    staged += (input.slot->slice.size + 255) / 256 * 256;
    return Status::Ok();
  };
  // Every micro-batch has its own staging, so all of a step's copies can be
  // in flight at once.
  tokens.resize(program->grad_accum);
  targets.resize(program->grad_accum);
  for (int64_t k = 0; k < program->grad_accum; ++k) {
    RETURN_IF_ERROR(stage(mp, SlotRole::kTokens, tokens[k]));
    RETURN_IF_ERROR(stage(mp, SlotRole::kTargets, targets[k]));
  }
  RETURN_IF_ERROR(stage(sp, SlotRole::kStep, step));
  RETURN_IF_ERROR(stage(sp, SlotRole::kLr, lr));
  loss = mp.FindOutput(SlotRole::kLoss);
  grad_norm = sp.FindOutput(SlotRole::kGradNorm);
  if (loss == nullptr || grad_norm == nullptr) {
    return Error("{}: entries {}/{} lack a loss or grad_norm output", Where(), mp.name(),
                 sp.name());
  }
  for (const PlanSlot* s : {loss, grad_norm, step.slot, lr.slot}) {
    if (s->shape != ir::Shape::Scalar(ir::DType::kF32)) {
      return Error("{}: slot %{} ({}) is {}, expected f32[]", Where(), s->name,
                   program::SlotRoleName(s->role), s->shape.ToString());
    }
  }
  if (micro_entry != state_entry) {
    for (size_t p = 0; p < program->params.size(); ++p) {
      const PlanSlot* from = mp.FindInput(SlotRole::kGradAcc, static_cast<int64_t>(p));
      const PlanSlot* to = sp.FindInput(SlotRole::kGradAcc, static_cast<int64_t>(p));
      if (from == nullptr || to == nullptr || from->shape != to->shape) {
        return Error(
            "{}: the accumulator of {} is not an input of both accumulate and apply "
            "with one shape",
            Where(), program->params[p].name);
      }
      grad_acc.emplace_back(from, to);
    }
  }
  RETURN_IF_ERROR(cuda->Check(staging.Allocate(*cuda, staged), "cudaHostAlloc(staging)"));
  // The loss of each micro-batch, then the grad norm.
  return cuda->Check(readback.Allocate(*cuda, 4 * (program->grad_accum + 1)),
                     "cudaHostAlloc(readback)");
}

Status GpuTrainer::Impl::WaitFor(cudaEvent_t event, std::string_view what) {
  cudaError_t e = cuda->EventSynchronize(event);
  if (e == cudaSuccess) return Status::Ok();
  return Error(
      "{}: {} (an asynchronous error of an earlier kernel or copy; rerun with "
      "--debug-sync to find the thunk)",
      what, cuda->ErrorText(e));
}

Status GpuTrainer::Impl::RunEntry(EntryState& e, std::vector<ThunkTime>& times) {
  EntryExecutor& ex = *e.executor;
  if (options.profile) {
    ASSIGN_OR_RETURN(std::vector<ThunkTime> t, ex.Profile(stream));
    times.insert(times.end(), t.begin(), t.end());
    return Status::Ok();
  }
  if (options.sync_each_thunk) return ex.RunChecked(stream);
  if (options.use_graph && ex.has_graph()) return ex.Launch(stream);
  RETURN_IF_ERROR(ex.Run(stream));
  // Capture after an eager run, whose calls did any lazy initialization
  // (module loading, cuBLASLt's first call) outside the capture.
  return options.use_graph ? ex.Capture(stream) : Status::Ok();
}

StatusOr<StepResult> GpuTrainer::Step(std::span<const MicroBatch> micro_batches, double lr) {
  Impl& m = *impl_;
  const int64_t step = m.steps_done + 1;
  const int64_t k = m.program->grad_accum;
  RETURN_IF_ERROR(m.Stage(micro_batches, step, lr));
  char* staging = m.staging.data();
  auto upload = [&](EntryState& e, const StagedInput& in) {
    return m.cuda->Check(
        m.cuda->MemcpyAsync(e.executor->At(in.slot->slice), staging + in.offset,
                            in.slot->shape.num_elements() * 4, cudaMemcpyHostToDevice, m.stream),
        fmt::format("step {}: cudaMemcpyAsync(%{} to the device)", step, in.slot->name));
  };
  char* readback = m.readback.data();
  auto download = [&](EntryState& e, const PlanSlot* slot, int64_t at) {
    return m.cuda->Check(
        m.cuda->MemcpyAsync(readback + 4 * at, e.executor->At(slot->slice), 4,
                            cudaMemcpyDeviceToHost, m.stream),
        fmt::format("step {}: cudaMemcpyAsync(%{} to the host)", step, slot->name));
  };
  std::vector<ThunkTime> times;
  auto run = [&](EntryState& e) {
    return m.RunEntry(e, times).WithPrefix(fmt::format("step {}", step));
  };

  RETURN_IF_ERROR(upload(*m.state_entry, m.step));
  RETURN_IF_ERROR(upload(*m.state_entry, m.lr));
  if (m.micro_entry != m.state_entry) {  // Note [entries of a step]
    RETURN_IF_ERROR(m.CopyParamsInto(*m.micro_entry));
    for (const auto& [acc, unused] : m.grad_acc) {
      RETURN_IF_ERROR(m.cuda->Check(
          m.cuda->MemsetAsync(m.micro_entry->executor->At(acc->slice), 0,
                              acc->shape.num_elements() * ir::DTypeBytes(acc->shape.dtype()),
                              m.stream),
          fmt::format("step {}: cudaMemsetAsync(%{})", step, acc->name)));
    }
  }
  // From the first launch on, the parameters may change on the device.
  ++m.params_version;
  for (int64_t i = 0; i < k; ++i) {
    RETURN_IF_ERROR(upload(*m.micro_entry, m.tokens[i]));
    RETURN_IF_ERROR(upload(*m.micro_entry, m.targets[i]));
    if (i == k - 1) {
      RETURN_IF_ERROR(m.cuda->Check(m.cuda->EventRecord(m.uploaded, m.stream), "cudaEventRecord"));
      m.upload_pending = true;
    }
    RETURN_IF_ERROR(run(*m.micro_entry));
    RETURN_IF_ERROR(download(*m.micro_entry, m.loss, i));
  }
  if (m.micro_entry != m.state_entry) {
    for (const auto& [from, to] : m.grad_acc) {
      RETURN_IF_ERROR(m.cuda->Check(
          m.cuda->MemcpyAsync(m.state_entry->executor->At(to->slice),
                              m.micro_entry->executor->At(from->slice),
                              from->shape.num_elements() * ir::DTypeBytes(from->shape.dtype()),
                              cudaMemcpyDeviceToDevice, m.stream),
          fmt::format("step {}: cudaMemcpyAsync(%{} from accumulate to apply)", step, to->name)));
    }
    RETURN_IF_ERROR(run(*m.state_entry));
  }
  RETURN_IF_ERROR(download(*m.state_entry, m.grad_norm, k));
  RETURN_IF_ERROR(m.cuda->Check(m.cuda->EventRecord(m.done, m.stream), "cudaEventRecord"));
  if (m.options.profile) (m.steps_done == 0 ? m.first_profile : m.profile).AddRun(times);
  ++m.steps_done;
  RETURN_IF_ERROR(m.WaitFor(m.done, fmt::format("step {}", step)));
  std::vector<float> values(k + 1);
  std::memcpy(values.data(), readback, 4 * (k + 1));
  StepResult r{.loss = 0, .grad_norm = values[k]};
  for (int64_t i = 0; i < k; ++i) r.loss += values[i] / static_cast<double>(k);
  return r;
}

Status GpuTrainer::Impl::Stage(std::span<const MicroBatch> micro_batches, int64_t number,
                               double rate) {
  const int64_t k = program->grad_accum;
  if (static_cast<int64_t>(micro_batches.size()) != k) {
    return Error("step {}: {} micro-batches given, grad_accum is {}", number, micro_batches.size(),
                 k);
  }
  for (const MicroBatch& batch : micro_batches) {
    for (auto [input, ids] :
         {std::pair{&tokens[0], &batch.tokens}, std::pair{&targets[0], &batch.targets}}) {
      const ir::Shape& shape = input->slot->shape;
      if (static_cast<int64_t>(ids->size()) != shape.num_elements()) {
        return Error("step {}: input %{}: {} values given, {} needs {}", number, input->slot->name,
                     ids->size(), shape.ToString(), shape.num_elements());
      }
    }
  }
  // The staging buffer is reused: the previous step's copies must be done.
  if (upload_pending) RETURN_IF_ERROR(WaitFor(uploaded, fmt::format("step {}", number)));
  char* at = staging.data();
  for (int64_t i = 0; i < k; ++i) {
    const MicroBatch& batch = micro_batches[i];
    std::memcpy(at + tokens[i].offset, batch.tokens.data(), batch.tokens.size() * 4);
    std::memcpy(at + targets[i].offset, batch.targets.data(), batch.targets.size() * 4);
  }
  const float step_value = static_cast<float>(number), lr_value = static_cast<float>(rate);
  std::memcpy(at + step.offset, &step_value, 4);
  std::memcpy(at + lr.offset, &lr_value, 4);
  return Status::Ok();
}

Status GpuTrainer::Impl::CopyParamsInto(EntryState& e) {
  if (e.params_version == params_version) return Status::Ok();
  const EntryPlan& from = state_entry->executor->plan();
  for (const PlanSlot& slot : e.executor->plan().inputs) {
    if (slot.role != SlotRole::kParam) continue;
    const PlanSlot* src = from.FindInput(SlotRole::kParam, slot.index);
    if (src == nullptr || src->shape != slot.shape) {
      return Error("entry {}: input %{} (param {}) has no matching train_step parameter",
                   e.entry->name(), slot.name, slot.index);
    }
    RETURN_IF_ERROR(cuda->Check(
        cuda->MemcpyAsync(e.executor->At(slot.slice), state_entry->executor->At(src->slice),
                          slot.shape.num_elements() * ir::DTypeBytes(slot.shape.dtype()),
                          cudaMemcpyDeviceToDevice, stream),
        fmt::format("entry {}: cudaMemcpyAsync(%{} from train_step)", e.entry->name(), slot.name)));
  }
  e.params_version = params_version;
  return Status::Ok();
}

int64_t GpuTrainer::steps_done() const { return impl_->steps_done; }

const DeviceInfo& GpuTrainer::device() const { return impl_->device; }

std::string GpuTrainer::DeviceDescription() const { return impl_->device.Describe(); }

std::string GpuTrainer::DeviceName() const { return impl_->device.name; }

std::string GpuTrainer::ProfileReport(int top_n) const {
  const Impl& m = *impl_;
  std::string out = (m.profile.runs() > 0 ? m.profile : m.first_profile).Format(top_n);
  if (m.autotuner != nullptr) {
    out += '\n';
    out += m.autotuner->Table();
  }
  return out;
}

std::string GpuTrainer::ProfileJson() const {
  const Impl& m = *impl_;
  const ProfileTable& p = m.profile.runs() > 0 ? m.profile : m.first_profile;
  const double runs = static_cast<double>(std::max<int64_t>(p.runs(), 1));
  nlohmann::json rows = nlohmann::json::array();
  for (const ProfileTable::Row& r : p.rows()) {
    rows.push_back({{"entry", r.entry},
                    {"kind", r.kind},
                    {"name", r.name},
                    {"meta", r.meta},
                    {"ms_per_step", r.ms / runs},
                    {"calls_per_step", static_cast<double>(r.calls) / runs}});
  }
  nlohmann::json tuning = nlohmann::json::array();
  if (m.autotuner != nullptr) {
    for (const GemmChoice& c : m.autotuner->choices()) {
      tuning.push_back({{"key", c.key},
                        {"thunks", c.thunks},
                        {"path", TunedPathName(c.path)},
                        {"algorithm", c.algorithm},
                        {"candidates", c.candidates},
                        {"us", c.us},
                        {"first_us", c.first_us},
                        {"tflops", c.us > 0 ? c.flops / c.us / 1e6 : 0.0},
                        {"from_cache", c.from_cache}});
    }
  }
  const nlohmann::json out = {{"format", "gptc-profile-1"},
                              {"artifact", m.artifact_path},
                              {"artifact_checksum", fmt::format("{:016x}", m.artifact_checksum)},
                              {"device", m.device.name},
                              {"emulated", false},
                              {"steps", p.runs()},
                              {"rows", rows},
                              {"gemm_tuning", tuning}};
  return out.dump(1) + "\n";
}

std::string GpuTrainer::LoadSummary() const {
  const Impl& m = *impl_;
  std::string arenas;
  int64_t gemms = 0;
  for (const EntryState& e : m.entries) {
    arenas += fmt::format("{}{} {}{}", arenas.empty() ? "" : ", ", e.entry->name(),
                          FormatBytes(e.executor->plan().arena_size),
                          e.host != nullptr ? fmt::format(" in {}'s", e.host->entry->name()) : "");
    gemms += e.executor->plan().CountByKind()[static_cast<int>(ThunkKind::kGemm)];
  }
  return fmt::format(
      "loaded: arenas {} + cuBLASLt workspace {}; {} kernels ({} cubin, {} PTX "
      "JIT); {} gemms (cuBLASLt {} from {}){}; {}",
      arenas, FormatBytes(m.workspace_bytes), m.modules->cubins_loaded() + m.modules->ptx_jitted(),
      m.modules->cubins_loaded(), m.modules->ptx_jitted(), gemms, m.lt->version, m.lt->path,
      m.autotuner != nullptr ? "; " + m.autotuner->Summary() : "",
      m.options.profile           ? "profiling every thunk (no graph)"
      : m.options.sync_each_thunk ? "synchronizing after every thunk (no graph)"
      : m.options.use_graph       ? "CUDA graph after the first step"
                                  : "eager (no graph)");
}

}  // namespace gptc::rt::gpu
