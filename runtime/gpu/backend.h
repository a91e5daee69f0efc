// The CUDA the GPU runtime runs on: NVIDIA's (the CUDA runtime linked
// statically, the driver and cuBLASLt found at run time), or the emulated
// device of runtime/emu/ (gptrun --device emu), which implements the same
// functions on the host.
//
// Note [CUDA backends]
// Every CUDA runtime call of runtime/gpu goes through Cuda(), every driver
// and cuBLASLt call through GetDriverApi() and GetCublasLt(), so that the
// very code that drives a GPU (executor, trainer, gemm runner, CUDA graphs,
// all-reduce buckets) runs unchanged on the emulator, in every CI run. The
// process has one backend at a time, CUDA by default; runtime/emu installs
// its own with SetBackend while an emulated device exists. A backend may
// also watch the plan (ThunkObserver): the emulator's memory checks need to
// know which thunk each kernel, copy and gemm belongs to.
//
// Internal to runtime/gpu and runtime/emu (CUDA headers).
#ifndef GPTC_RUNTIME_GPU_BACKEND_H_
#define GPTC_RUNTIME_GPU_BACKEND_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "compiler/support/status.h"
#include "runtime/gpu/cublaslt_api.h"
#include "runtime/gpu/cuda_api.h"

namespace gptc::program {
struct EntryPlan;
}  // namespace gptc::program

namespace gptc::rt::gpu {

using program::EntryPlan;

// The CUDA runtime functions runtime/gpu calls, as a table (the signatures of
// cuda_runtime_api.h).
struct RuntimeApi {
  decltype(&::cudaGetDeviceCount) GetDeviceCount = nullptr;
  decltype(&::cudaSetDevice) SetDevice = nullptr;
  decltype(&::cudaGetDeviceProperties) GetDeviceProperties = nullptr;
  decltype(&::cudaDriverGetVersion) DriverGetVersion = nullptr;
  decltype(&::cudaRuntimeGetVersion) RuntimeGetVersion = nullptr;
  decltype(&::cudaMemGetInfo) MemGetInfo = nullptr;
  decltype(&::cudaGetLastError) GetLastError = nullptr;
  decltype(&::cudaGetErrorName) GetErrorName = nullptr;
  decltype(&::cudaGetErrorString) GetErrorString = nullptr;
  decltype(&::cudaMalloc) Malloc = nullptr;
  decltype(&::cudaFree) Free = nullptr;
  decltype(&::cudaHostAlloc) HostAlloc = nullptr;
  decltype(&::cudaFreeHost) FreeHost = nullptr;
  decltype(&::cudaMemcpy) Memcpy = nullptr;
  decltype(&::cudaMemcpyAsync) MemcpyAsync = nullptr;
  decltype(&::cudaMemset) Memset = nullptr;
  decltype(&::cudaMemsetAsync) MemsetAsync = nullptr;
  decltype(&::cudaStreamCreateWithFlags) StreamCreateWithFlags = nullptr;
  decltype(&::cudaStreamDestroy) StreamDestroy = nullptr;
  decltype(&::cudaStreamSynchronize) StreamSynchronize = nullptr;
  decltype(&::cudaStreamWaitEvent) StreamWaitEvent = nullptr;
  decltype(&::cudaStreamBeginCapture) StreamBeginCapture = nullptr;
  decltype(&::cudaStreamEndCapture) StreamEndCapture = nullptr;
  decltype(&::cudaEventCreate) EventCreate = nullptr;
  decltype(&::cudaEventCreateWithFlags) EventCreateWithFlags = nullptr;
  decltype(&::cudaEventRecord) EventRecord = nullptr;
  decltype(&::cudaEventSynchronize) EventSynchronize = nullptr;
  decltype(&::cudaEventElapsedTime) EventElapsedTime = nullptr;
  decltype(&::cudaEventDestroy) EventDestroy = nullptr;
  decltype(&::cudaGraphInstantiate) GraphInstantiate = nullptr;
  decltype(&::cudaGraphLaunch) GraphLaunch = nullptr;
  decltype(&::cudaGraphDestroy) GraphDestroy = nullptr;
  decltype(&::cudaGraphExecDestroy) GraphExecDestroy = nullptr;
};

// Told what the executors run (Note [CUDA backends]). Null on a GPU.
class ThunkObserver {
 public:
  virtual ~ThunkObserver() = default;
  // An executor of `plan` over `arena` exists from EntryCreated until
  // EntryDestroyed; `plan` stays valid in between.
  virtual void EntryCreated(const EntryPlan& plan, const char* arena) = 0;
  virtual void EntryDestroyed(const EntryPlan& plan) = 0;
  // Called before the executor enqueues thunk `index` of `plan` on `stream`
  // (also while the stream is captured into a graph, whose replays must
  // repeat it): the next operation on `stream` is that thunk's, or none
  // when `runs_work` is false (a copy onto itself, an all-reduce of one rank
  // in place).
  virtual cudaError_t BeforeThunk(const EntryPlan& plan, int64_t index, cudaStream_t stream,
                                  bool runs_work) = 0;
};

struct Backend {
  std::string name;  // "cuda", "emulated"
  const RuntimeApi* runtime = nullptr;
  StatusOr<const DriverApi*> (*driver)() = nullptr;
  StatusOr<const CublasLtApi*> (*cublaslt)() = nullptr;
  ThunkObserver* observer = nullptr;
};

// The process's backend (CUDA unless an emulated device is installed).
const Backend& ActiveBackend();
// Installs `backend` (which must outlive its use), or CUDA's for null.
void SetBackend(const Backend* backend);
// The active backend's CUDA runtime functions.
inline const RuntimeApi& Cuda() { return *ActiveBackend().runtime; }
// Whether the active backend is CUDA's (a real GPU, when there is one).
bool UsingRealCuda();

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_BACKEND_H_
