#include "tests/runtime/gpu/gpu_test_util.h"

#include <fmt/ranges.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "compiler/eval/evaluator.h"
#include "compiler/ir/computation.h"
#include "passes/train_step.h"
#include "runtime/gpu/backend.h"

namespace gptc::rt::gpu::testing {

namespace fs = std::filesystem;

TinyVariantInfo Info(TinyVariant variant) {
  switch (variant) {
    case TinyVariant::kPlain:
      return {"gpt2-tiny-b2-s64.gptx", "GPTC_GPU_TEST_ARTIFACT", "--batch 2 --seq 64"};
    case TinyVariant::kGradAccum:
      return {"gpt2-tiny-b1-s64-ga2.gptx", "GPTC_GPU_TEST_ARTIFACT_GA2",
              "--batch 1 --seq 64 --grad-accum 2"};
  }
  return {};
}

std::vector<std::string> TinyArtifactCandidates(TinyVariant variant) {
  const TinyVariantInfo info = Info(variant);
  std::vector<std::string> out;
  if (const char* env = std::getenv(info.variable); env != nullptr && *env != '\0') {
    out.emplace_back(env);
  }
#ifdef GPTC_GPU_TEST_DIR
  out.push_back((fs::path(GPTC_GPU_TEST_DIR) / info.file).string());
#endif
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {  // next to the binary, or one folder up (scripts/gpu-bundle's .gpu/bin/)
    out.push_back((exe.parent_path() / info.file).string());
    out.push_back((exe.parent_path().parent_path() / info.file).string());
  }
  return out;
}

namespace {

StatusOr<Tiny> Load(TinyVariant variant) {
  const TinyVariantInfo info = Info(variant);
  Tiny t;
  std::vector<std::string> candidates = TinyArtifactCandidates(variant);
  for (const std::string& c : candidates) {
    if (fs::exists(c)) {
      t.path = c;
      break;
    }
  }
  if (t.path.empty()) {
    const std::string tried = fmt::format("{}", fmt::join(candidates, ", "));
    return Error(
        "no test artifact (tried {}); compile one with gptc compile --model gpt2-tiny "
        "{} -o {} and set {}",
        tried, info.flags, info.file, info.variable);
  }
  ASSIGN_OR_RETURN(t.artifact, program::ReadArtifact(t.path));
  ASSIGN_OR_RETURN(t.loaded, LoadProgram(t.artifact, t.path));
  ASSIGN_OR_RETURN(std::vector<EntryPlan> plans, ReadPlan(t.artifact.plan));
  for (const program::TrainEntry& entry : t.loaded.program.entries) {
    auto it = std::find_if(plans.begin(), plans.end(),
                           [&](const EntryPlan& p) { return p.name() == entry.name(); });
    if (it == plans.end()) return Error("{}: the plan has no entry {}", t.path, entry.name());
    t.plans.push_back(*it);
  }
  ASSIGN_OR_RETURN(analysis::ProgramBuffers buffers,
                   analysis::AssignProgramBuffers(t.loaded.program));
  t.assignments = std::move(buffers.assignments);
  return t;
}

}  // namespace

const Tiny* LoadTiny(std::string* why, TinyVariant variant) {
  // Each read once, when first asked for.
  const StatusOr<Tiny>* tiny = nullptr;
  if (variant == TinyVariant::kPlain) {
    static const StatusOr<Tiny>* plain = new StatusOr<Tiny>(Load(TinyVariant::kPlain));
    tiny = plain;
  } else {
    static const StatusOr<Tiny>* accumulating = new StatusOr<Tiny>(Load(TinyVariant::kGradAccum));
    tiny = accumulating;
  }
  if (!tiny->ok()) {
    *why = tiny->status().message();
    return nullptr;
  }
  return &tiny->value();
}

bool HaveGpu() { return UsingRealCuda() && CountDevices() > 0; }

std::string TestBackendName(TestBackend backend) {
  return backend == TestBackend::kGpu ? "Gpu" : "Emu";
}

StatusOr<std::unique_ptr<TestDevice>> TestDevice::Open(TestBackend backend,
                                                       std::vector<const Tiny*> tinies,
                                                       std::string* why) {
  std::unique_ptr<TestDevice> d(new TestDevice(backend));
  if (backend == TestBackend::kGpu) {
    if (!HaveGpu()) {
      *why = "no GPU found: " + NoGpuReason();
      return std::unique_ptr<TestDevice>();
    }
    return d;
  }
  ASSIGN_OR_RETURN(d->emu_,
                   emu::EmuDevice::Create(tinies[0]->artifact, tinies[0]->path, emu::EmuOptions{}));
  for (size_t i = 1; i < tinies.size(); ++i) {
    RETURN_IF_ERROR(d->emu_->AddArtifact(tinies[i]->artifact, tinies[i]->path));
  }
  return d;
}

TestDevice::~TestDevice() = default;

const Backend& TestDevice::cuda_backend() const {
  return emu_ != nullptr ? emu_->backend() : ActiveBackend();
}

void TestDevice::MarkHostWritten(const void* p, size_t bytes) const {
  if (emu_ != nullptr) emu_->MarkHostWritten(p, bytes);
}

std::string NoGpuReason() {
  Status s = CheckGpuAvailable();
  return s.ok() ? "a GPU is present" : s.message();
}

StatusOr<std::vector<eval::Literal>> EvaluateInstruction(const ir::Instruction& inst,
                                                         std::span<const eval::Literal> operands) {
  // A computation of its own: parameters for the operands, then a copy of `inst`.
  ir::Computation c("single." + inst.name());
  std::vector<ir::Instruction*> params;
  for (int64_t i = 0; i < inst.operand_count(); ++i) {
    ir::Attrs attrs;
    attrs.index = i;
    params.push_back(c.AddInstruction(std::make_unique<ir::Instruction>(
        fmt::format("p{}", i), ir::Opcode::kParameter, inst.operand(i)->shape(),
        std::vector<ir::Instruction*>{}, attrs)));
  }
  auto copy = std::make_unique<ir::Instruction>(inst.name(), inst.opcode(), inst.shape(), params,
                                                inst.attrs());
  copy->set_called_computation(inst.called_computation());
  c.set_root(c.AddInstruction(std::move(copy)));
  ASSIGN_OR_RETURN(eval::Literal result, eval::EvaluateComputation(c, operands));
  std::vector<eval::Literal> out;
  if (result.shape.is_tuple()) {
    out = std::move(result.elements);
  } else {
    out.push_back(std::move(result));
  }
  return out;
}

Comparison Compare(std::span<const double> gpu, std::span<const double> ref, double rtol) {
  Comparison c;
  double sum_sq = 0;
  int64_t finite = 0;
  for (double r : ref) {
    if (std::isfinite(r)) {
      sum_sq += r * r;
      ++finite;
    }
  }
  const double rms = finite > 0 ? std::sqrt(sum_sq / finite) : 0;
  for (size_t i = 0; i < ref.size() && i < gpu.size(); ++i) {
    const double g = gpu[i], r = ref[i];
    double err = 0;
    if (std::isnan(r) || std::isnan(g)) {
      err = std::isnan(r) && std::isnan(g) ? 0 : INFINITY;
    } else if (std::isinf(r) || std::isinf(g)) {
      err = g == r ? 0 : INFINITY;
    } else {
      const double scale = std::abs(r) + rms;
      err = scale > 0 ? std::abs(g - r) / scale : std::abs(g - r);
    }
    if (c.worst_index < 0 || err > c.worst) {
      c.worst = err;
      c.worst_index = static_cast<int64_t>(i);
      c.gpu = g;
      c.ref = r;
    }
    if (err > rtol) {
      if (c.failures == 0) c.first_failure = static_cast<int64_t>(i);
      ++c.failures;
    }
  }
  if (gpu.size() != ref.size()) c.failures += 1;
  return c;
}

double DefaultRtol(ir::DType dtype) {
  double scale = 1;
  if (const char* env = std::getenv("GPTC_GPU_TEST_RTOL_SCALE")) scale = std::atof(env);
  switch (dtype) {
    case ir::DType::kBF16:
      return 2e-2 * scale;
    case ir::DType::kF16:
      return 5e-3 * scale;
    case ir::DType::kF32:
      return 1e-4 * scale;
    default:
      return 0;
  }
}

StatusOr<std::unique_ptr<GpuHarness>> GpuHarness::Create(const TestDevice& device,
                                                         const Tiny& tiny) {
  std::unique_ptr<GpuHarness> h(new GpuHarness(device));
  const Backend& backend = device.cuda_backend();
  ASSIGN_OR_RETURN(h->device_, OpenDevice(h->cuda_, 0));
  RETURN_IF_ERROR(CheckTargetRuns(tiny.artifact.manifest.target, h->device_.capability,
                                  h->device_.name, tiny.path));
  ASSIGN_OR_RETURN(const DriverApi* cu, backend.driver());
  ASSIGN_OR_RETURN(h->lt_, backend.cublaslt());
  if (cublasStatus_t s = h->lt_->Create(&h->lt_handle_); s != CUBLAS_STATUS_SUCCESS) {
    h->lt_handle_ = nullptr;
    return Error("cublasLtCreate: {}", h->lt_->StatusText(s));
  }
  RETURN_IF_ERROR(h->cuda_.Check(h->cuda_.StreamCreateWithFlags(&h->stream_, cudaStreamNonBlocking),
                                 "cudaStreamCreateWithFlags"));
  ASSIGN_OR_RETURN(h->modules_, KernelModules::Load(*cu, tiny.artifact, tiny.path, h->device_));
  constexpr size_t kWorkspace = 32 << 20;
  RETURN_IF_ERROR(
      h->cuda_.Check(h->cuda_.Malloc(&h->workspace_, kWorkspace), "cudaMalloc(workspace)"));
  ExecutorResources resources{.backend = &backend,
                              .stream = h->stream_,
                              .lt_handle = h->lt_handle_,
                              .modules = h->modules_.get(),
                              .workspace = h->workspace_,
                              .workspace_bytes = kWorkspace};
  for (const EntryPlan& plan : tiny.plans) {
    void* arena = nullptr;
    RETURN_IF_ERROR(h->cuda_.Check(h->cuda_.Malloc(&arena, std::max<int64_t>(plan.arena_size, 256)),
                                   fmt::format("cudaMalloc(arena of {})", plan.name())));
    h->arenas_.push_back(arena);
    RETURN_IF_ERROR(h->cuda_.Check(h->cuda_.MemsetAsync(arena, 0, plan.arena_size, h->stream_),
                                   "cudaMemsetAsync(arena)"));
    ASSIGN_OR_RETURN(std::unique_ptr<EntryExecutor> ex,
                     EntryExecutor::Create(resources, plan, static_cast<char*>(arena),
                                           {.allow_unsupported = true}));
    h->executors_.push_back(std::move(ex));
  }
  return h;
}

GpuHarness::~GpuHarness() {
  if (stream_ != nullptr) cuda_.StreamSynchronize(stream_);
  executors_.clear();
  modules_.reset();
  for (void* a : arenas_) cuda_.Free(a);
  if (workspace_ != nullptr) cuda_.Free(workspace_);
  if (lt_handle_ != nullptr) lt_->Destroy(lt_handle_);
  if (stream_ != nullptr) cuda_.StreamDestroy(stream_);
}

Status GpuHarness::Upload(size_t e, const ArenaSlice& slice, const std::string& bytes) {
  if (static_cast<int64_t>(bytes.size()) > slice.size) {
    return Error("upload of {} bytes into a slice of {}", bytes.size(), slice.size);
  }
  RETURN_IF_ERROR(cuda_.Check(cuda_.MemcpyAsync(executors_[e]->At(slice), bytes.data(),
                                                bytes.size(), cudaMemcpyHostToDevice, stream_),
                              "cudaMemcpyAsync(upload)"));
  RETURN_IF_ERROR(cuda_.Check(cuda_.StreamSynchronize(stream_), "cudaStreamSynchronize(upload)"));
  // The emulated device's checks: these bytes are now the operand's value.
  test_device_.MarkHostWritten(executors_[e]->At(slice), bytes.size());
  return Status::Ok();
}

StatusOr<std::string> GpuHarness::Download(size_t e, const ArenaSlice& slice) {
  std::string bytes(slice.size, '\0');
  RETURN_IF_ERROR(cuda_.Check(cuda_.MemcpyAsync(bytes.data(), executors_[e]->At(slice),
                                                bytes.size(), cudaMemcpyDeviceToHost, stream_),
                              "cudaMemcpyAsync(download)"));
  RETURN_IF_ERROR(cuda_.Check(cuda_.StreamSynchronize(stream_), "cudaStreamSynchronize(download)"));
  return bytes;
}

Status GpuHarness::Run(size_t e, const std::vector<size_t>& indices) {
  for (size_t i : indices) {
    RETURN_IF_ERROR(executors_[e]->RunThunk(i, stream_));
    RETURN_IF_ERROR(cuda_.Check(cuda_.StreamSynchronize(stream_),
                                executors_[e]->plan().thunks[i].Describe() + ": synchronize"));
  }
  return Status::Ok();
}

}  // namespace gptc::rt::gpu::testing
