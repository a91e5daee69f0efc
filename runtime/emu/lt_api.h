// The cuBLASLt API of the emulated device, with cublasLt.h's signatures,
// as the runtime's gpu::CublasLtApi table (runtime/gpu/cublaslt_api.h) —
// so runtime/gpu/gemm.cc drives it exactly as it drives NVIDIA's library:
// descriptors and layouts whose attributes are checked as cuBLASLt checks
// them (the size of every value; attributes the emulator does not model are
// refused), a heuristic that answers no algorithm where cuBLASLt's rules
// refuse the matmul (Note [emulated cuBLASLt rules] in gemm_semantics.h),
// and cublasLtMatmul handing the work to the device's executor.
#ifndef GPTC_RUNTIME_EMU_LT_API_H_
#define GPTC_RUNTIME_EMU_LT_API_H_

#include <cuda_runtime_api.h>

#include <functional>
#include <string>
#include <vector>

#include "runtime/emu/gemm_semantics.h"
#include "runtime/gpu/cublaslt_api.h"

namespace gptc::rt::emu {

// One matmul ready to run: the bytes it touches and the arithmetic.
struct MatmulWork {
  std::vector<ByteRange> reads, writes;
  std::function<void()> run;
  std::string summary;  // "m=64 n=128 k=64 batch=1 A CUDA_R_16BF N ... epilogue BIAS"
  // What the emulated device's clock advances by (Note [emulated gemm
  // algorithms] in lt_api.cc).
  double stand_in_us = 0;
};
// Runs (or enqueues on `stream`) a matmul; what cublasLtMatmul returns.
using MatmulExecutor = std::function<cublasStatus_t(cudaStream_t stream, MatmulWork work)>;

// The API; `executor` (which outlives the table) runs every matmul; null:
// at once, on the caller.
gpu::CublasLtApi EmulatedCublasLt(const MatmulExecutor* executor);

// Why the last call that did not succeed refused (this thread), or empty.
std::string LastRefusal();

}  // namespace gptc::rt::emu

#endif  // GPTC_RUNTIME_EMU_LT_API_H_
