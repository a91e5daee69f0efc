// Gemm autotuning: at load, each distinct gemm of the artifact is timed on
// the device with every algorithm cuBLASLt's heuristic offers (up to 16),
// and the fastest is kept — where the heuristic's first answer is often
// not the fastest (XLA autotunes every gemm too; torch.compile offers
// max-autotune).
//
// Note [autotune paths]
// A gemm with a fused epilogue can run two ways: cuBLASLt computes the
// epilogue ("epilogue"), or the gemm runs without it and the artifact's
// fallback kernel computes it ("fallback": Note [epilogue fallback] in
// compiler/program/plan.h). Some epilogues run far from their roofline in cuBLASLt
// (docs/PERFORMANCE.md), so both are candidates: every heuristic answer of
// the gemm with its epilogue, and every answer of the plain gemm plus the
// kernel's time. Each candidate runs `warmup` times, then `reps` times
// between two CUDA events on the work stream, on the artifact's own
// buffers, before any input is uploaded and before graph capture. A
// candidate that fails to run is skipped. Gemms of one descriptor (the
// same problem, layouts, types, epilogue and whether a fallback exists:
// TuningKey) are tuned once per process, and the choice is cached across
// processes (Note [autotune cache] in autotune_cache.h). On the emulated
// device the timings are the stand-ins of Note [emulated time] in
// runtime/emu/emu_state.h, so tests see a deterministic choice.
//
// Internal to runtime/gpu (CUDA headers).
#ifndef GPTC_RUNTIME_GPU_AUTOTUNE_H_
#define GPTC_RUNTIME_GPU_AUTOTUNE_H_

#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/gpu/autotune_cache.h"
#include "runtime/gpu/autotune_options.h"
#include "runtime/gpu/backend.h"
#include "runtime/gpu/gemm.h"

namespace gptc::rt::gpu {

// "m=768 n=8192 k=768 batch=1 | A ... | CUBLASLT_EPILOGUE_BIAS bias CUDA_R_16BF | C ... |
// compute 32F | fallback": everything that makes a gemm faster or slower.
std::string TuningKey(const GemmConfig& config, bool has_fallback);

// What the executor offers to tune for one gemm thunk.
struct GemmCandidates {
  std::string key;    // TuningKey
  std::string thunk;  // "train_step/h.0.mlp.c_fc.dot.fusion"
  double flops = 0;   // 2 m n k batch
  // The gemm with its epilogue; null when cuBLASLt has no algorithm for it.
  GemmRunner* epilogue = nullptr;
  // The plain gemm and its fallback kernel; null without a fallback.
  GemmRunner* plain = nullptr;
  std::function<Status(cudaStream_t)> kernel;
};

enum class TunedPath { kEpilogue, kFallback };
std::string_view TunedPathName(TunedPath path);  // "epilogue", "fallback"

// One descriptor's decision, for the load summary and --profile.
struct GemmChoice {
  std::string key;
  TunedPath path = TunedPath::kEpilogue;
  int algorithm = 0;    // the index among that path's heuristic answers
  int candidates = 0;   // how many were timed, both paths
  double us = 0;        // per call (the plain gemm and the kernel, for "fallback"); 0 untimed
  double first_us = 0;  // the heuristic's first answer of the epilogue path, when timed
  double flops = 0;
  bool from_cache = false;
  std::vector<std::string> thunks;
  cublasLtMatmulHeuristicResult_t result{};
};

class GemmAutotuner {
 public:
  // `device_key` names the GPU, its driver and cuBLASLt (the cache's key).
  // Reads the cache; its warnings go to `warnings`.
  // Its timings run on `cuda` (a backend's runtime, backend.h), which outlives it.
  GemmAutotuner(const RuntimeApi& cuda, AutotuneOptions options, std::string device_key,
                std::vector<std::string>& warnings);
  ~GemmAutotuner();
  GemmAutotuner(const GemmAutotuner&) = delete;
  GemmAutotuner& operator=(const GemmAutotuner&) = delete;

  // Chooses the path and algorithm of `g` and sets that path's runner to
  // it. `handle` is the runners' cuBLASLt handle.
  StatusOr<TunedPath> Tune(const GemmCandidates& g, cublasLtHandle_t handle, cudaStream_t stream);
  // Saves new choices to the cache; a failure is a warning.
  void Finish(std::vector<std::string>& warnings);

  const AutotuneOptions& options() const { return options_; }
  const std::vector<GemmChoice>& choices() const { return choices_; }
  // "autotune: 12 distinct gemms, 9 timed (87 candidates, 1.4 s), 3 from the cache; ..."
  std::string Summary() const;
  // One row per descriptor: path, algorithm, us, TFLOP/s, thunks.
  std::string Table() const;

 private:
  // Microseconds per call of `run`; none, with the reason in `refused`, when
  // a call fails (an error: when a CUDA call of the timing fails).
  StatusOr<std::optional<double>> TimeUs(const std::function<Status(cudaStream_t)>& run,
                                         cudaStream_t stream, std::string* refused);
  // The cache's choice for `g`, applied; false when it does not apply.
  bool ApplyCached(const GemmCandidates& g, cublasLtHandle_t handle, GemmChoice& choice);
  StatusOr<TunedPath> Time(const GemmCandidates& g, cublasLtHandle_t handle, cudaStream_t stream,
                           GemmChoice& choice);

  const RuntimeApi& cuda_;
  AutotuneOptions options_;
  AutotuneCache cache_;
  std::vector<GemmChoice> choices_;
  std::map<std::string, size_t> by_key_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  double seconds_ = 0;  // spent timing
  int timed_ = 0, cached_ = 0;
};

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_AUTOTUNE_H_
