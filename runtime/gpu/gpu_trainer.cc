#include "runtime/gpu/gpu_trainer.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "runtime/gpu/cublaslt_api.h"
#include "runtime/gpu/cuda_api.h"
#include "runtime/gpu/executor.h"
#include "runtime/gpu/host_values.h"
#include "runtime/gpu/kernel_modules.h"
#include "runtime/gpu/plan_reader.h"
#include "runtime/init.h"

namespace gptc::rt::gpu {

namespace {

// cudaMalloc'd memory, freed with the owner.
struct DeviceBuffer {
  void* ptr = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(o.ptr) { o.ptr = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

// cudaHostAlloc'd (pinned) memory: asynchronous copies from and to it.
struct PinnedBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& o) noexcept : ptr(o.ptr), bytes(o.bytes) { o.ptr = nullptr; }
  PinnedBuffer& operator=(PinnedBuffer&&) = delete;
  ~PinnedBuffer() {
    if (ptr != nullptr) cudaFreeHost(ptr);
  }
  char* data() const { return static_cast<char*>(ptr); }
};

struct EntryState {
  const passes::TrainEntry* entry = nullptr;
  DeviceBuffer arena;
  std::unique_ptr<EntryExecutor> executor;
  // Which parameter values the arena's param slots hold (entries other than
  // the train step get a copy before they run); -1: none yet.
  int64_t params_version = -1;
};

// The per-step inputs the host writes, in the pinned staging buffer.
struct StagedInput {
  const PlanSlot* slot = nullptr;
  size_t offset = 0;  // in the staging buffer
};

}  // namespace

struct GpuTrainer::Impl {
  std::string artifact_path;
  const passes::TrainProgram* program = nullptr;
  GpuOptions options;
  DeviceInfo device;
  const DriverApi* cu = nullptr;
  const CublasLtApi* lt = nullptr;
  cublasLtHandle_t lt_handle = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t uploaded = nullptr, done = nullptr;
  std::unique_ptr<KernelModules> modules;
  DeviceBuffer workspace;
  int64_t workspace_bytes = 0;
  std::vector<EntryState> entries;  // the train step first
  PinnedBuffer staging, readback;
  StagedInput tokens, targets, step, lr;
  const PlanSlot* loss = nullptr;
  const PlanSlot* grad_norm = nullptr;
  bool upload_pending = false;
  int64_t steps_done = 0;
  int64_t params_version = 0;
  ProfileTable first_profile, profile;

  ~Impl() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    entries.clear();  // executors (graphs, constant pools) and arenas
    modules.reset();
    if (lt_handle != nullptr) lt->Destroy(lt_handle);
    for (cudaEvent_t e : {uploaded, done}) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  EntryState& train() { return entries[0]; }
  Status Load(const Artifact& artifact, uint64_t seed);
  Status CheckTrainSignature(const EntryPlan& plan);
  Status UploadState(const TrainerState& state);
  Status WaitFor(cudaEvent_t event, std::string_view what);
  Status CopyParamsInto(EntryState& e);
  std::string Where() const { return artifact_path; }
};

GpuTrainer::GpuTrainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuTrainer::~GpuTrainer() = default;

StatusOr<std::unique_ptr<GpuTrainer>> GpuTrainer::Create(const Artifact& artifact,
                                                         std::string_view artifact_path,
                                                         const passes::TrainProgram* program,
                                                         uint64_t seed, const GpuOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->artifact_path = std::string(artifact_path);
  impl->program = program;
  impl->options = options;
  RETURN_IF_ERROR(impl->Load(artifact, seed));
  return std::unique_ptr<GpuTrainer>(new GpuTrainer(std::move(impl)));
}

Status GpuTrainer::Impl::CheckTrainSignature(const EntryPlan& plan) {
  const passes::EntrySignature& sig = entries[0].entry->signature;
  if (plan.inputs.size() != sig.inputs.size() || plan.outputs.size() != sig.outputs.size()) {
    return Error("{}: plan entry {} has {} inputs / {} outputs, the program {} / {}", Where(),
                 plan.name, plan.inputs.size(), plan.outputs.size(), sig.inputs.size(),
                 sig.outputs.size());
  }
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    const PlanSlot& s = plan.inputs[i];
    if (s.shape != sig.inputs[i].shape || s.role != passes::SlotRoleName(sig.inputs[i].role)) {
      return Error("{}: plan entry {} input {} (%{}) is {} {}, the program's is {} {}", Where(),
                   plan.name, i, s.name, s.role, s.shape.ToString(),
                   passes::SlotRoleName(sig.inputs[i].role), sig.inputs[i].shape.ToString());
    }
    if (s.role != "param" && s.role != "adam_m" && s.role != "adam_v" && s.role != "tokens" &&
        s.role != "targets" && s.role != "step" && s.role != "lr") {
      return Error("{}: entry {} input {} (%{}) has role {}, which the GPU trainer cannot feed",
                   Where(), plan.name, i, s.name, s.role);
    }
  }
  return Status::Ok();
}

Status GpuTrainer::Impl::Load(const Artifact& artifact, uint64_t seed) {
  // The artifact, before touching the device.
  if (!artifact.manifest.value("complete", false)) {
    return Error(
        "{}: the artifact is incomplete (complete:false: some instructions have no "
        "kernel yet, see gptc inspect); the GPU device cannot run it, --device cpu can",
        Where());
  }
  if (program->grad_accum != 1) {
    return Error(
        "{}: compiled with --grad-accum {}; the GPU device runs grad-accum 1 artifacts "
        "only for now (each entry of an accumulate/apply pair has its own arena): "
        "recompile with --grad-accum 1 (and a larger --batch), or use --device cpu",
        Where(), program->grad_accum);
  }
  RETURN_IF_ERROR(CheckCommunicatorWorld(program->world_size, options.communicator, Where()));
  ASSIGN_OR_RETURN(std::vector<EntryPlan> plans, ReadPlan(artifact.plan));
  std::vector<EntryPlan> ordered;
  for (const passes::TrainEntry& entry : program->entries) {
    auto it = std::find_if(plans.begin(), plans.end(),
                           [&](const EntryPlan& p) { return p.name == entry.name; });
    if (it == plans.end()) return Error("{}: the plan has no entry {}", Where(), entry.name);
    entries.push_back(EntryState{.entry = &entry});
    ordered.push_back(std::move(*it));
  }
  if (entries.empty() || entries[0].entry->name != "train_step") {
    return Error("{}: the first entry is not train_step", Where());
  }

  ASSIGN_OR_RETURN(device, OpenDevice(options.device));
  RETURN_IF_ERROR(CheckTargetRuns(artifact.manifest.value("target", ""), device.capability,
                                  device.name, Where()));
  for (const EntryPlan& p : ordered) {
    for (const Thunk& t : p.thunks) {
      if (t.kind == ThunkKind::kGemm) {
        workspace_bytes =
            std::max(workspace_bytes, std::get<GemmThunk>(t.body).config.workspace_bytes);
      }
    }
  }
  std::vector<MemoryNeed> needs;
  for (const EntryPlan& p : ordered) needs.push_back({"arena of " + p.name, p.arena_size});
  needs.push_back({"cuBLASLt workspace", workspace_bytes});
  RETURN_IF_ERROR(CheckMemoryFits(needs, options.reserve_bytes, device, Where()));

  ASSIGN_OR_RETURN(cu, GetDriverApi());
  ASSIGN_OR_RETURN(lt, GetCublasLt());
  if (cublasStatus_t s = lt->Create(&lt_handle); s != CUBLAS_STATUS_SUCCESS) {
    lt_handle = nullptr;
    return Error("{}: cublasLtCreate ({}): {}", Where(), lt->path, lt->StatusText(s));
  }
  RETURN_IF_ERROR(CudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                            "cudaStreamCreateWithFlags"));
  for (cudaEvent_t* e : {&uploaded, &done}) {
    RETURN_IF_ERROR(
        CudaCheck(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
  }
  if (workspace_bytes > 0) {
    RETURN_IF_ERROR(CudaCheck(cudaMalloc(&workspace.ptr, workspace_bytes),
                              fmt::format("{}: cudaMalloc({}, cuBLASLt workspace)", Where(),
                                          FormatBytes(workspace_bytes))));
  }
  ASSIGN_OR_RETURN(modules, KernelModules::Load(*cu, artifact, Where(), device));

  ExecutorResources resources{.cu = cu,
                              .lt = lt,
                              .lt_handle = lt_handle,
                              .modules = modules.get(),
                              .communicator = options.communicator,
                              .workspace = workspace.ptr,
                              .workspace_bytes = static_cast<size_t>(workspace_bytes)};
  for (size_t i = 0; i < entries.size(); ++i) {
    EntryState& e = entries[i];
    const int64_t bytes = std::max<int64_t>(ordered[i].arena_size, 256);
    RETURN_IF_ERROR(CudaCheck(cudaMalloc(&e.arena.ptr, bytes),
                              fmt::format("{}: cudaMalloc({}, arena of entry {})", Where(),
                                          FormatBytes(bytes), e.entry->name)));
    // Zeros: nothing reads memory it did not write, but zeros keep runs reproducible.
    RETURN_IF_ERROR(CudaCheck(cudaMemset(e.arena.ptr, 0, bytes), "cudaMemset(arena)"));
    if (i == 0) RETURN_IF_ERROR(CheckTrainSignature(ordered[0]));
    StatusOr<std::unique_ptr<EntryExecutor>> ex =
        EntryExecutor::Create(resources, std::move(ordered[i]), static_cast<char*>(e.arena.ptr));
    if (!ex.ok()) return ex.status().WithPrefix(Where());
    e.executor = std::move(ex).value();
  }

  // The per-step inputs and outputs of the train step.
  const EntryPlan& plan = train().executor->plan();
  size_t staged = 0;
  for (auto [role, input] : {std::pair{"tokens", &tokens}, std::pair{"targets", &targets},
                             std::pair{"step", &step}, std::pair{"lr", &lr}}) {
    input->slot = plan.FindInput(role);
    if (input->slot == nullptr) {
      return Error("{}: entry train_step has no {} input", Where(), role);
    }
    input->offset = staged;
    staged += (input->slot->slice.size + 255) / 256 * 256;
  }
  loss = plan.FindOutput("loss");
  grad_norm = plan.FindOutput("grad_norm");
  if (loss == nullptr || grad_norm == nullptr) {
    return Error("{}: entry train_step lacks a loss or grad_norm output", Where());
  }
  for (const PlanSlot* s : {loss, grad_norm, step.slot, lr.slot}) {
    if (s->shape != ir::Shape::Scalar(ir::DType::kF32)) {
      return Error("{}: train_step slot %{} ({}) is {}, expected f32[]", Where(), s->name, s->role,
                   s->shape.ToString());
    }
  }
  staging.bytes = staged;
  RETURN_IF_ERROR(CudaCheck(cudaHostAlloc(&staging.ptr, staged, cudaHostAllocDefault),
                            "cudaHostAlloc(staging)"));
  readback.bytes = 8;
  RETURN_IF_ERROR(
      CudaCheck(cudaHostAlloc(&readback.ptr, 8, cudaHostAllocDefault), "cudaHostAlloc(readback)"));

  // The initial state: the same counter-based values as the CPU device.
  TrainerState state;
  for (size_t i = 0; i < program->params.size(); ++i) {
    const frontend::ParamSpec& spec = program->params[i];
    state.values.push_back(InitParameter(spec, seed, i));
    state.adam_m.emplace_back(spec.shape.num_elements(), 0.0f);
    state.adam_v.emplace_back(spec.shape.num_elements(), 0.0f);
  }
  return UploadState(state);
}

Status GpuTrainer::Impl::UploadState(const TrainerState& state) {
  const EntryPlan& plan = train().executor->plan();
  const size_t n = program->params.size();
  if (state.values.size() != n || state.adam_m.size() != n || state.adam_v.size() != n) {
    return Error("trainer state has {} parameters, the program {}", state.values.size(), n);
  }
  RETURN_IF_ERROR(CudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
  for (size_t i = 0; i < n; ++i) {
    const frontend::ParamSpec& spec = program->params[i];
    for (auto [role, values] :
         {std::pair{"param", &state.values[i]}, std::pair{"adam_m", &state.adam_m[i]},
          std::pair{"adam_v", &state.adam_v[i]}}) {
      const PlanSlot* slot = plan.FindInput(role, static_cast<int64_t>(i));
      if (slot == nullptr)
        return Error("{}: train_step has no {} input for {}", Where(), role, spec.name);
      const size_t bytes = values->size() * sizeof(float);
      if (static_cast<int64_t>(values->size()) != spec.shape.num_elements() ||
          static_cast<int64_t>(bytes) > slot->slice.size) {
        return Error("trainer state: {} {} has {} values, {} needs {}", role, spec.name,
                     values->size(), spec.shape.ToString(), spec.shape.num_elements());
      }
      RETURN_IF_ERROR(
          CudaCheck(cudaMemcpyAsync(train().executor->At(slot->slice), values->data(), bytes,
                                    cudaMemcpyHostToDevice, stream),
                    fmt::format("cudaMemcpyAsync({} {} to the device)", role, spec.name)));
    }
  }
  // The sources are pageable host vectors: wait before they go away.
  RETURN_IF_ERROR(CudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize (state upload)"));
  steps_done = state.steps_done;
  ++params_version;
  return Status::Ok();
}

Status GpuTrainer::Impl::WaitFor(cudaEvent_t event, std::string_view what) {
  cudaError_t e = cudaEventSynchronize(event);
  if (e == cudaSuccess) return Status::Ok();
  return Error(
      "{}: {} (an asynchronous error of an earlier kernel or copy; rerun with "
      "--debug-sync to find the thunk)",
      what, CudaErrorText(e));
}

StatusOr<StepResult> GpuTrainer::Step(std::span<const MicroBatch> micro_batches, double lr) {
  Impl& m = *impl_;
  const int64_t step = m.steps_done + 1;
  if (micro_batches.size() != 1) {
    return Error("step {}: {} micro-batches given, grad_accum is 1", step, micro_batches.size());
  }
  const MicroBatch& batch = micro_batches[0];
  for (auto [input, ids] :
       {std::pair{&m.tokens, &batch.tokens}, std::pair{&m.targets, &batch.targets}}) {
    const ir::Shape& shape = input->slot->shape;
    if (static_cast<int64_t>(ids->size()) != shape.num_elements()) {
      return Error("step {}: input %{}: {} values given, {} needs {}", step, input->slot->name,
                   ids->size(), shape.ToString(), shape.num_elements());
    }
  }
  // The staging buffer is reused: the previous step's copies must be done.
  if (m.upload_pending) RETURN_IF_ERROR(m.WaitFor(m.uploaded, fmt::format("step {}", step)));
  char* staging = m.staging.data();
  std::memcpy(staging + m.tokens.offset, batch.tokens.data(), batch.tokens.size() * 4);
  std::memcpy(staging + m.targets.offset, batch.targets.data(), batch.targets.size() * 4);
  const float step_value = static_cast<float>(step), lr_value = static_cast<float>(lr);
  std::memcpy(staging + m.step.offset, &step_value, 4);
  std::memcpy(staging + m.lr.offset, &lr_value, 4);
  EntryExecutor& ex = *m.train().executor;
  for (const StagedInput* in : {&m.tokens, &m.targets, &m.step, &m.lr}) {
    RETURN_IF_ERROR(CudaCheck(
        cudaMemcpyAsync(ex.At(in->slot->slice), staging + in->offset,
                        in->slot->shape.num_elements() * 4, cudaMemcpyHostToDevice, m.stream),
        fmt::format("step {}: cudaMemcpyAsync(%{} to the device)", step, in->slot->name)));
  }
  RETURN_IF_ERROR(CudaCheck(cudaEventRecord(m.uploaded, m.stream), "cudaEventRecord"));
  m.upload_pending = true;

  Status run;
  if (m.options.profile) {
    StatusOr<std::vector<ThunkTime>> times = ex.Profile(m.stream);
    run = times.status();
    if (times.ok()) (m.steps_done == 0 ? m.first_profile : m.profile).AddRun(*times);
  } else if (m.options.sync_each_thunk) {
    run = ex.RunChecked(m.stream);
  } else if (m.options.use_graph && ex.has_graph()) {
    run = ex.Launch(m.stream);
  } else {
    run = ex.Run(m.stream);
    // Capture after the eager first step, whose calls did any lazy
    // initialization (module loading, cuBLASLt's first call) outside the capture.
    if (run.ok() && m.options.use_graph) run = ex.Capture(m.stream);
  }
  if (!run.ok()) return run.WithPrefix(fmt::format("step {}", step));

  char* readback = m.readback.data();
  RETURN_IF_ERROR(CudaCheck(
      cudaMemcpyAsync(readback, ex.At(m.loss->slice), 4, cudaMemcpyDeviceToHost, m.stream),
      "cudaMemcpyAsync(loss to the host)"));
  RETURN_IF_ERROR(CudaCheck(
      cudaMemcpyAsync(readback + 4, ex.At(m.grad_norm->slice), 4, cudaMemcpyDeviceToHost, m.stream),
      "cudaMemcpyAsync(grad norm to the host)"));
  RETURN_IF_ERROR(CudaCheck(cudaEventRecord(m.done, m.stream), "cudaEventRecord"));
  // The parameters changed on the device whatever the outcome below.
  ++m.steps_done;
  ++m.params_version;
  RETURN_IF_ERROR(m.WaitFor(m.done, fmt::format("step {}", step)));
  float values[2];
  std::memcpy(values, readback, 8);
  return StepResult{.loss = values[0], .grad_norm = values[1]};
}

Status GpuTrainer::Impl::CopyParamsInto(EntryState& e) {
  if (e.params_version == params_version) return Status::Ok();
  const EntryPlan& from = train().executor->plan();
  for (const PlanSlot& slot : e.executor->plan().inputs) {
    if (slot.role != "param") continue;
    const PlanSlot* src = from.FindInput("param", slot.index);
    if (src == nullptr || src->shape != slot.shape) {
      return Error("entry {}: input %{} (param {}) has no matching train_step parameter",
                   e.entry->name, slot.name, slot.index);
    }
    RETURN_IF_ERROR(CudaCheck(
        cudaMemcpyAsync(e.executor->At(slot.slice), train().executor->At(src->slice),
                        slot.shape.num_elements() * ir::DTypeBytes(slot.shape.dtype()),
                        cudaMemcpyDeviceToDevice, stream),
        fmt::format("entry {}: cudaMemcpyAsync(%{} from train_step)", e.entry->name, slot.name)));
  }
  e.params_version = params_version;
  return Status::Ok();
}

StatusOr<std::vector<eval::Literal>> GpuTrainer::Evaluate(const passes::TrainEntry& entry,
                                                          const MicroBatch& batch) {
  Impl& m = *impl_;
  if (!entry.signature.donations.empty()) {
    return Error("{}: the entry updates state; run it with Step", entry.name);
  }
  EntryState* e = nullptr;
  for (EntryState& s : m.entries) {
    if (s.entry->name == entry.name) e = &s;
  }
  if (e == nullptr) return Error("{}: not an entry of this trainer's program", entry.name);
  EntryExecutor& ex = *e->executor;
  RETURN_IF_ERROR(m.CopyParamsInto(*e));
  for (const PlanSlot& slot : ex.plan().inputs) {
    if (slot.role == "param") continue;
    if (slot.role != "tokens") {
      return Error("{}: input %{} has role {}, which Evaluate cannot feed", entry.name, slot.name,
                   slot.role);
    }
    if (static_cast<int64_t>(batch.tokens.size()) != slot.shape.num_elements()) {
      return Error("{}: input %{}: {} values given, {} needs {}", entry.name, slot.name,
                   batch.tokens.size(), slot.shape.ToString(), slot.shape.num_elements());
    }
    RETURN_IF_ERROR(
        CudaCheck(cudaMemcpyAsync(ex.At(slot.slice), batch.tokens.data(), batch.tokens.size() * 4,
                                  cudaMemcpyHostToDevice, m.stream),
                  fmt::format("{}: cudaMemcpyAsync(%{} to the device)", entry.name, slot.name)));
  }
  Status run = m.options.sync_each_thunk ? ex.RunChecked(m.stream) : ex.Run(m.stream);
  if (!run.ok()) return run.WithPrefix(entry.name);
  std::vector<std::string> bytes;
  for (const PlanSlot& slot : ex.plan().outputs) {
    bytes.emplace_back(slot.shape.num_elements() * ir::DTypeBytes(slot.shape.dtype()), '\0');
    RETURN_IF_ERROR(
        CudaCheck(cudaMemcpyAsync(bytes.back().data(), ex.At(slot.slice), bytes.back().size(),
                                  cudaMemcpyDeviceToHost, m.stream),
                  fmt::format("{}: cudaMemcpyAsync(%{} to the host)", entry.name, slot.name)));
  }
  RETURN_IF_ERROR(CudaCheck(cudaEventRecord(m.done, m.stream), "cudaEventRecord"));
  RETURN_IF_ERROR(m.WaitFor(m.done, entry.name));
  std::vector<eval::Literal> out;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const ir::Shape& shape = ex.plan().outputs[i].shape;
    out.push_back(eval::Literal{.shape = shape, .values = DecodeValues(shape.dtype(), bytes[i])});
  }
  return out;
}

int64_t GpuTrainer::steps_done() const { return impl_->steps_done; }

StatusOr<TrainerState> GpuTrainer::ExportState() {
  Impl& m = *impl_;
  const EntryPlan& plan = m.train().executor->plan();
  TrainerState state;
  state.steps_done = m.steps_done;
  for (size_t i = 0; i < m.program->params.size(); ++i) {
    const int64_t n = m.program->params[i].shape.num_elements();
    for (auto [role, to] : {std::pair{"param", &state.values}, std::pair{"adam_m", &state.adam_m},
                            std::pair{"adam_v", &state.adam_v}}) {
      const PlanSlot* slot = plan.FindInput(role, static_cast<int64_t>(i));
      if (slot == nullptr) return Error("train_step has no {} input {}", role, i);
      to->emplace_back(n);
      RETURN_IF_ERROR(CudaCheck(
          cudaMemcpyAsync(to->back().data(), m.train().executor->At(slot->slice), n * 4,
                          cudaMemcpyDeviceToHost, m.stream),
          fmt::format("cudaMemcpyAsync({} {} to the host)", role, m.program->params[i].name)));
    }
  }
  RETURN_IF_ERROR(CudaCheck(cudaEventRecord(m.done, m.stream), "cudaEventRecord"));
  RETURN_IF_ERROR(m.WaitFor(m.done, "state export"));
  return state;
}

Status GpuTrainer::ImportState(const TrainerState& state) { return impl_->UploadState(state); }

const DeviceInfo& GpuTrainer::device() const { return impl_->device; }

std::string GpuTrainer::DeviceDescription() const { return impl_->device.Describe(); }

std::string GpuTrainer::DeviceName() const { return impl_->device.name; }

std::string GpuTrainer::ProfileReport(int top_n) const {
  const Impl& m = *impl_;
  return (m.profile.runs() > 0 ? m.profile : m.first_profile).Format(top_n);
}

std::string GpuTrainer::LoadSummary() const {
  const Impl& m = *impl_;
  std::string arenas;
  int64_t gemms = 0;
  for (const EntryState& e : m.entries) {
    arenas += fmt::format("{}{} {}", arenas.empty() ? "" : ", ", e.entry->name,
                          FormatBytes(e.executor->plan().arena_size));
    gemms += e.executor->plan().CountByKind()[static_cast<int>(ThunkKind::kGemm)];
  }
  return fmt::format(
      "loaded: arenas {} + cuBLASLt workspace {}; {} kernels ({} cubin, {} PTX "
      "JIT); {} gemms (cuBLASLt {} from {}); {}",
      arenas, FormatBytes(m.workspace_bytes), m.modules->cubins_loaded() + m.modules->ptx_jitted(),
      m.modules->cubins_loaded(), m.modules->ptx_jitted(), gemms, m.lt->version, m.lt->path,
      m.options.profile           ? "profiling every thunk (no graph)"
      : m.options.sync_each_thunk ? "synchronizing after every thunk (no graph)"
      : m.options.use_graph       ? "CUDA graph after the first step"
                                  : "eager (no graph)");
}

}  // namespace gptc::rt::gpu
