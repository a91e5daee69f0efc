// Owners of device and pinned host memory, freed through the backend that
// allocated them (Note [CUDA backends] in backend.h).
//
// Internal to runtime/gpu: this header includes the CUDA headers.
#ifndef GPTC_RUNTIME_GPU_DEVICE_BUFFER_H_
#define GPTC_RUNTIME_GPU_DEVICE_BUFFER_H_

#include <cstddef>

#include "runtime/gpu/backend.h"
#include "runtime/gpu/cuda_api.h"

namespace gptc::rt::gpu {

// cudaMalloc'd memory, freed with the owner.
struct DeviceBuffer {
  void* ptr = nullptr;
  const RuntimeApi* cuda = nullptr;  // the backend it came from
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(o.ptr), cuda(o.cuda) { o.ptr = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  ~DeviceBuffer() {
    if (ptr != nullptr) cuda->Free(ptr);
  }
  cudaError_t Allocate(const RuntimeApi& on, size_t bytes) {
    cuda = &on;
    return on.Malloc(&ptr, bytes);
  }
};

// cudaHostAlloc'd (pinned) memory: asynchronous copies from and to it.
struct PinnedBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  const RuntimeApi* cuda = nullptr;  // the backend it came from
  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& o) noexcept : ptr(o.ptr), bytes(o.bytes), cuda(o.cuda) {
    o.ptr = nullptr;
  }
  PinnedBuffer& operator=(PinnedBuffer&&) = delete;
  ~PinnedBuffer() {
    if (ptr != nullptr) cuda->FreeHost(ptr);
  }
  cudaError_t Allocate(const RuntimeApi& on, size_t size) {
    cuda = &on, bytes = size;
    return on.HostAlloc(&ptr, size, cudaHostAllocDefault);
  }
  char* data() const { return static_cast<char*>(ptr); }
};

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_DEVICE_BUFFER_H_
