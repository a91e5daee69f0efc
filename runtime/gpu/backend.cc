#include "runtime/gpu/backend.h"

#include <atomic>

namespace gptc::rt::gpu {

namespace {

const RuntimeApi& CudaRuntime() {
  static const RuntimeApi api{
      .GetDeviceCount = &::cudaGetDeviceCount,
      .SetDevice = &::cudaSetDevice,
      .GetDeviceProperties = &::cudaGetDeviceProperties,
      .DriverGetVersion = &::cudaDriverGetVersion,
      .RuntimeGetVersion = &::cudaRuntimeGetVersion,
      .MemGetInfo = &::cudaMemGetInfo,
      .GetLastError = &::cudaGetLastError,
      .GetErrorName = &::cudaGetErrorName,
      .GetErrorString = &::cudaGetErrorString,
      .Malloc = &::cudaMalloc,
      .Free = &::cudaFree,
      .HostAlloc = &::cudaHostAlloc,
      .FreeHost = &::cudaFreeHost,
      .Memcpy = &::cudaMemcpy,
      .MemcpyAsync = &::cudaMemcpyAsync,
      .Memset = &::cudaMemset,
      .MemsetAsync = &::cudaMemsetAsync,
      .StreamCreateWithFlags = &::cudaStreamCreateWithFlags,
      .StreamDestroy = &::cudaStreamDestroy,
      .StreamSynchronize = &::cudaStreamSynchronize,
      .StreamWaitEvent = &::cudaStreamWaitEvent,
      .StreamBeginCapture = &::cudaStreamBeginCapture,
      .StreamEndCapture = &::cudaStreamEndCapture,
      .EventCreate = &::cudaEventCreate,
      .EventCreateWithFlags = &::cudaEventCreateWithFlags,
      .EventRecord = &::cudaEventRecord,
      .EventSynchronize = &::cudaEventSynchronize,
      .EventElapsedTime = &::cudaEventElapsedTime,
      .EventDestroy = &::cudaEventDestroy,
      .GraphInstantiate = &::cudaGraphInstantiate,
      .GraphLaunch = &::cudaGraphLaunch,
      .GraphDestroy = &::cudaGraphDestroy,
      .GraphExecDestroy = &::cudaGraphExecDestroy,
  };
  return api;
}

const Backend& CudaBackend() {
  static const Backend backend{.name = "cuda",
                               .runtime = &CudaRuntime(),
                               .driver = LoadCudaDriverApi,
                               .cublaslt = LoadNvidiaCublasLt,
                               .observer = nullptr};
  return backend;
}

std::atomic<const Backend*> active{nullptr};

}  // namespace

const Backend& ActiveBackend() {
  const Backend* b = active.load(std::memory_order_acquire);
  return b != nullptr ? *b : CudaBackend();
}

Status InstallBackend(const Backend& backend) {
  const Backend* expected = nullptr;
  if (!active.compare_exchange_strong(expected, &backend, std::memory_order_acq_rel)) {
    return Error("the {} backend is installed already (one device at a time per process)",
                 expected->name);
  }
  return Status::Ok();
}

void UninstallBackend(const Backend& backend) {
  const Backend* expected = &backend;
  active.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel);
}

bool UsingRealCuda() { return &ActiveBackend() == &CudaBackend(); }

StatusOr<const DriverApi*> GetDriverApi() { return ActiveBackend().driver(); }

StatusOr<const CublasLtApi*> GetCublasLt() { return ActiveBackend().cublaslt(); }

std::string RuntimeApi::ErrorText(cudaError_t error) const {
  return fmt::format("{} ({})", GetErrorName(error), GetErrorString(error));
}

std::string CudaErrorText(cudaError_t error) { return Cuda().ErrorText(error); }

}  // namespace gptc::rt::gpu
