// Shared by the GPU tests (gpu_tests). They read a pre-compiled artifact
// instead of compiling in-process, so that gpu_tests links no LLVM/MLIR and
// runs on the GPU machine (which has none): the kernels come from the
// artifact's ptx/cubin sections, the reference from its `ir` section, parsed
// by compiler/ir and run by the evaluator.
//
// The artifacts (TinyVariant): gpt2-tiny with batch 2, seq 64, and the same
// global batch as 2 micro-batches of 1 (--grad-accum 2). Each is looked for
// at its variable ($GPTC_GPU_TEST_ARTIFACT, $GPTC_GPU_TEST_ARTIFACT_GA2),
// then where the build compiled it, then next to the gpu_tests binary or one
// folder up (scripts/gpu-bundle's .gpu/).
//
// Without a GPU every test that needs one skips, saying why.
#ifndef GPTC_TESTS_RUNTIME_GPU_GPU_TEST_UTIL_H_
#define GPTC_TESTS_RUNTIME_GPU_GPU_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compiler/analysis/arena_guests.h"
#include "compiler/eval/literal.h"
#include "compiler/ir/instruction.h"
#include "compiler/program/container.h"
#include "runtime/emu/emu_device.h"
#include "runtime/gpu/backend.h"
#include "runtime/gpu/cublaslt_api.h"
#include "runtime/gpu/cuda_api.h"
#include "runtime/gpu/device.h"
#include "runtime/gpu/executor.h"
#include "runtime/gpu/kernel_modules.h"
#include "runtime/gpu/plan_reader.h"
#include "runtime/program_loader.h"

namespace gptc::rt::gpu::testing {

enum class TinyVariant { kPlain, kGradAccum };
struct TinyVariantInfo {
  const char* file;      // "gpt2-tiny-b2-s64.gptx"
  const char* variable;  // "GPTC_GPU_TEST_ARTIFACT"
  const char* flags;     // of gptc compile --model gpt2-tiny
};
TinyVariantInfo Info(TinyVariant variant);

// Where the test artifact is looked for, in order.
std::vector<std::string> TinyArtifactCandidates(TinyVariant variant = TinyVariant::kPlain);

struct Tiny {
  std::string path;
  program::Artifact artifact;
  LoadedProgram loaded;
  std::vector<EntryPlan> plans;  // parallel to loaded.program.entries
  // Per entry: the buffer assignment recomputed from the parsed IR.
  std::vector<analysis::BufferAssignment> assignments;
};

// The artifact, read once; null (with `why`) when it is missing or broken.
const Tiny* LoadTiny(std::string* why, TinyVariant variant = TinyVariant::kPlain);

bool HaveGpu();
std::string NoGpuReason();

#define GPTC_SKIP_WITHOUT_GPU()                                                  \
  if (!::gptc::rt::gpu::testing::HaveGpu()) {                                    \
    GTEST_SKIP() << "no GPU found: " << ::gptc::rt::gpu::testing::NoGpuReason(); \
  }

// The device a test of the GPU runtime runs on: the GPU, or the emulated
// device (runtime/emu/: the artifact's kernels compiled for this host, with
// memory and race checks), which every CI run has.
enum class TestBackend { kGpu, kEmu };
std::string TestBackendName(TestBackend backend);  // "Gpu", "Emu" (test names)
inline void PrintTo(TestBackend backend, std::ostream* os) { *os << TestBackendName(backend); }

// While alive, the backend's CUDA is the process's: the emulated device of
// `tiny`'s emulator library, or the GPU's (nothing to set up).
class TestDevice {
 public:
  // Null with `why` when the backend is not at hand (no GPU; an artifact
  // without an emulator library is an error). The emulated device runs the
  // kernels of every artifact in `tinies`.
  static StatusOr<std::unique_ptr<TestDevice>> Open(TestBackend backend,
                                                    std::vector<const Tiny*> tinies,
                                                    std::string* why);
  ~TestDevice();
  TestBackend backend() const { return backend_; }
  // Its CUDA (Note [CUDA backends] in runtime/gpu/backend.h).
  const Backend& cuda_backend() const;
  // The emulated device's checks: host bytes now fill [p, p + bytes) (a
  // no-op on a GPU).
  void MarkHostWritten(const void* p, size_t bytes) const;

 private:
  explicit TestDevice(TestBackend backend) : backend_(backend) {}
  TestBackend backend_;
  std::unique_ptr<emu::EmuDevice> emu_;
};

// Opens the parameter's device for the artifacts `{tiny, ...}` in a TEST_P
// (skips without a GPU).
#define GPTC_OPEN_TEST_DEVICE(var, ...)                                                \
  std::string var##_why;                                                               \
  StatusOr<std::unique_ptr<::gptc::rt::gpu::testing::TestDevice>> var##_or =           \
      ::gptc::rt::gpu::testing::TestDevice::Open(GetParam(), __VA_ARGS__, &var##_why); \
  ASSERT_TRUE(var##_or.ok()) << var##_or.status().message();                           \
  if (*var##_or == nullptr) GTEST_SKIP() << var##_why;                                 \
  std::unique_ptr<::gptc::rt::gpu::testing::TestDevice> var = std::move(var##_or).value()

// The reference value of `inst` (any entry instruction: a fusion, a dot, a
// gather...) on `operands`, with the evaluator; one literal per result leaf.
StatusOr<std::vector<eval::Literal>> EvaluateInstruction(const ir::Instruction& inst,
                                                         std::span<const eval::Literal> operands);

// Element-wise comparison with a relative tolerance: element i passes when
// |gpu - ref| <= rtol * (|ref| + rms(ref)) (the rms term keeps values near 0
// from failing on absolute noise); NaN matches NaN, an integer dtype must
// match exactly.
struct Comparison {
  double worst = 0;  // max |gpu - ref| / (|ref| + rms(ref))
  int64_t worst_index = -1;
  double gpu = 0, ref = 0;  // at worst_index
  int64_t failures = 0;
  int64_t first_failure = -1;
  bool ok() const { return failures == 0; }
};
Comparison Compare(std::span<const double> gpu, std::span<const double> ref, double rtol);
// bf16/f16 ~1e-2, f32 ~1e-4, integers 0; scaled by $GPTC_GPU_TEST_RTOL_SCALE.
double DefaultRtol(ir::DType dtype);

// A device, the artifact's kernels and cuBLASLt, and one arena per entry,
// for running thunks one at a time.
class GpuHarness {
 public:
  // On `device`, which outlives the harness.
  static StatusOr<std::unique_ptr<GpuHarness>> Create(const TestDevice& device, const Tiny& tiny);
  ~GpuHarness();

  // The executor of entry `e` (unsupported thunks allowed; they fail if run).
  EntryExecutor& executor(size_t e) { return *executors_[e]; }
  Status Upload(size_t e, const ArenaSlice& slice, const std::string& bytes);
  StatusOr<std::string> Download(size_t e, const ArenaSlice& slice);
  // Runs thunks `indices` of entry `e` in order and waits.
  Status Run(size_t e, const std::vector<size_t>& indices);
  cudaStream_t stream() const { return stream_; }
  const DeviceInfo& device() const { return device_; }

 private:
  explicit GpuHarness(const TestDevice& device)
      : test_device_(device), cuda_(*device.cuda_backend().runtime) {}
  const TestDevice& test_device_;
  const RuntimeApi& cuda_;
  DeviceInfo device_;
  cudaStream_t stream_ = nullptr;
  const CublasLtApi* lt_ = nullptr;
  cublasLtHandle_t lt_handle_ = nullptr;
  std::unique_ptr<KernelModules> modules_;
  void* workspace_ = nullptr;
  std::vector<void*> arenas_;
  std::vector<std::unique_ptr<EntryExecutor>> executors_;
};

}  // namespace gptc::rt::gpu::testing

#endif  // GPTC_TESTS_RUNTIME_GPU_GPU_TEST_UTIL_H_
