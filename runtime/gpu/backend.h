// The CUDA the GPU runtime runs on: NVIDIA's (the CUDA runtime linked
// statically, the driver and cuBLASLt found at run time), or the emulated
// device of runtime/emu/ (gptrun --device emu), which implements the same
// functions on the host.
//
// Note [CUDA backends]
// A Backend is a value: tables of the CUDA runtime, driver and cuBLASLt
// functions (each NVIDIA's, or bound to an emulated device: Note [bound API
// functions] in api_fn.h). The trainer and the executors receive theirs
// (GpuOptions::backend, ExecutorResources::backend) and make every CUDA
// call through it, so that the very code that drives a GPU (executor,
// trainer, gemm runner and autotuner, CUDA graphs, all-reduce buckets) runs
// unchanged on the emulator, in every CI run. What is one per process is
// the installed backend (ActiveBackend, Cuda(): CUDA's unless an emulated
// device installed its own), as CUDA's current device is: the default of
// whoever is given none, and of the free functions that report errors
// (CudaErrorText) and count devices. A backend may also watch the plan
// (ThunkObserver): the emulator's memory checks need to know which thunk
// each kernel, copy and gemm belongs to.
//
// Internal to runtime/gpu and runtime/emu (CUDA headers).
#ifndef GPTC_RUNTIME_GPU_BACKEND_H_
#define GPTC_RUNTIME_GPU_BACKEND_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "compiler/support/status.h"
#include "runtime/gpu/api_fn.h"
#include "runtime/gpu/cublaslt_api.h"
#include "runtime/gpu/cuda_api.h"

namespace gptc::program {
struct ArenaSlice;
struct EntryPlan;
}  // namespace gptc::program

namespace gptc::rt::gpu {

using program::ArenaSlice;
using program::EntryPlan;

// The CUDA runtime functions runtime/gpu calls, as a table (the signatures of
// cuda_runtime_api.h).
struct RuntimeApi {
  ApiFn<decltype(::cudaGetDeviceCount)> GetDeviceCount;
  ApiFn<decltype(::cudaSetDevice)> SetDevice;
  ApiFn<decltype(::cudaGetDeviceProperties)> GetDeviceProperties;
  ApiFn<decltype(::cudaDriverGetVersion)> DriverGetVersion;
  ApiFn<decltype(::cudaRuntimeGetVersion)> RuntimeGetVersion;
  ApiFn<decltype(::cudaMemGetInfo)> MemGetInfo;
  ApiFn<decltype(::cudaGetLastError)> GetLastError;
  ApiFn<decltype(::cudaGetErrorName)> GetErrorName;
  ApiFn<decltype(::cudaGetErrorString)> GetErrorString;
  ApiFn<decltype(::cudaMalloc)> Malloc;
  ApiFn<decltype(::cudaFree)> Free;
  ApiFn<decltype(::cudaHostAlloc)> HostAlloc;
  ApiFn<decltype(::cudaFreeHost)> FreeHost;
  ApiFn<decltype(::cudaMemcpy)> Memcpy;
  ApiFn<decltype(::cudaMemcpyAsync)> MemcpyAsync;
  ApiFn<decltype(::cudaMemset)> Memset;
  ApiFn<decltype(::cudaMemsetAsync)> MemsetAsync;
  ApiFn<decltype(::cudaStreamCreateWithFlags)> StreamCreateWithFlags;
  ApiFn<decltype(::cudaStreamDestroy)> StreamDestroy;
  ApiFn<decltype(::cudaStreamSynchronize)> StreamSynchronize;
  ApiFn<decltype(::cudaStreamWaitEvent)> StreamWaitEvent;
  ApiFn<decltype(::cudaStreamBeginCapture)> StreamBeginCapture;
  ApiFn<decltype(::cudaStreamEndCapture)> StreamEndCapture;
  ApiFn<decltype(::cudaEventCreate)> EventCreate;
  ApiFn<decltype(::cudaEventCreateWithFlags)> EventCreateWithFlags;
  ApiFn<decltype(::cudaEventRecord)> EventRecord;
  ApiFn<decltype(::cudaEventSynchronize)> EventSynchronize;
  ApiFn<decltype(::cudaEventElapsedTime)> EventElapsedTime;
  ApiFn<decltype(::cudaEventDestroy)> EventDestroy;
  ApiFn<decltype(::cudaGraphInstantiate)> GraphInstantiate;
  ApiFn<decltype(::cudaGraphLaunch)> GraphLaunch;
  ApiFn<decltype(::cudaGraphDestroy)> GraphDestroy;
  ApiFn<decltype(::cudaGraphExecDestroy)> GraphExecDestroy;

  // "cudaErrorMemoryAllocation (out of memory)", in this backend's words.
  std::string ErrorText(cudaError_t error) const;
  // Ok, or "CALL: cudaError... (text)".
  Status Check(cudaError_t error, std::string_view call) const {
    if (error == cudaSuccess) return Status::Ok();
    return Error("{}: {}", call, ErrorText(error));
  }
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
  // Once the work enqueued on `stream` so far is done, the inputs of `plan`
  // at `slices` hold what another entry wrote there, not a copy into them
  // (Note [arena guests] in compiler/program/plan.h).
  virtual cudaError_t InputsInPlace(const EntryPlan& plan, std::span<const ArenaSlice> slices,
                                    cudaStream_t stream) = 0;
};

struct Backend {
  std::string name;  // "cuda", "emulated"
  const RuntimeApi* runtime = nullptr;
  // Its driver entry points and cuBLASLt, found on first use (CUDA's after
  // the runtime is initialized).
  std::function<StatusOr<const DriverApi*>()> driver;
  std::function<StatusOr<const CublasLtApi*>()> cublaslt;
  ThunkObserver* observer = nullptr;
  // Its events time a stand-in clock (the emulator's, Note [emulated time]
  // in runtime/emu/emu_state.h): a timing needs no warm-up or repeats.
  bool stand_in_clock = false;
};

// The process's installed backend: CUDA's unless an emulated device is
// installed. What a trainer or an executor is not given runs on it.
const Backend& ActiveBackend();
// Installs `backend` (which must stay alive until UninstallBackend) in place
// of CUDA's. Errors: another backend is installed.
Status InstallBackend(const Backend& backend);
// Puts CUDA's back, when `backend` is the one installed.
void UninstallBackend(const Backend& backend);
// The active backend's CUDA runtime functions.
inline const RuntimeApi& Cuda() { return *ActiveBackend().runtime; }
// Whether the active backend is CUDA's (a real GPU, when there is one).
bool UsingRealCuda();

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_BACKEND_H_
