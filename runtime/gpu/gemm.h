// One gemm thunk as a ready cuBLASLt call: the matmul descriptor and matrix
// layouts built once from the plan's descriptor (Note [row-major on cuBLASLt]
// in compiler/artifact/gemm_plan.h), with the device pointers, epilogue
// buffers and workspace set, and the algorithm picked by the heuristic at
// load time, so that Run is one cublasLtMatmul call (graph-capturable).
//
// Internal to runtime/gpu (CUDA headers).
#ifndef GPTC_RUNTIME_GPU_GEMM_H_
#define GPTC_RUNTIME_GPU_GEMM_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/gpu/cublaslt_api.h"
#include "runtime/gpu/plan_reader.h"

namespace gptc::rt::gpu {

struct GemmPointers {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;
  void* d = nullptr;
  void* bias = nullptr;  // read by BIAS epilogues, written by BGRAD ones
  void* aux = nullptr;   // GELU_AUX output
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

class GemmRunner {
 public:
  // Builds the descriptors and asks the heuristic for an algorithm. `what`
  // names the thunk in every error ("thunk 7 (gemm %h.0.mlp.c_fc.dot.fusion,
  // h.0.mlp.c_fc)"), which also gives the problem (GemmConfig::Summary).
  static StatusOr<std::unique_ptr<GemmRunner>> Create(const CublasLtApi& lt,
                                                      cublasLtHandle_t handle,
                                                      const GemmConfig& config,
                                                      const GemmPointers& pointers,
                                                      std::string what);
  // The descriptors and layouts alone (no handle, no GPU needed: cuBLASLt
  // checks every attribute here); SelectAlgorithm completes it.
  static StatusOr<std::unique_ptr<GemmRunner>> Prepare(const CublasLtApi& lt,
                                                       const GemmConfig& config,
                                                       const GemmPointers& pointers,
                                                       std::string what);
  // Asks the heuristic for the best algorithm within the workspace.
  Status SelectAlgorithm(cublasLtHandle_t handle);
  // The heuristic's answers within the workspace, its best first, at most
  // `max` (autotuning times them: runtime/gpu/autotune.h). An error when
  // there is none; refused() then says whether cuBLASLt has no algorithm.
  StatusOr<std::vector<cublasLtMatmulHeuristicResult_t>> Candidates(cublasLtHandle_t handle,
                                                                    int max);
  // Runs with `choice`, one of Candidates' answers, from now on.
  void UseAlgorithm(cublasLtHandle_t handle, const cublasLtMatmulHeuristicResult_t& choice);
  const cublasLtMatmulHeuristicResult_t& algorithm() const { return heuristic_; }
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  // Enqueues the matmul on `stream`.
  Status Run(cudaStream_t stream) const;

  const std::string& what() const { return what_; }
  const GemmConfig& config() const { return config_; }
  // After SelectAlgorithm failed: whether the heuristic found no algorithm
  // (or said the combination is not supported), as opposed to another error.
  bool refused() const { return refused_; }
  size_t workspace_needed() const { return heuristic_.workspaceSize; }

 private:
  GemmRunner(const CublasLtApi& lt, std::string what) : lt_(lt), what_(std::move(what)) {}
  Status Check(cublasStatus_t status, std::string_view call) const;

  const CublasLtApi& lt_;
  cublasLtHandle_t handle_ = nullptr;
  bool has_algorithm_ = false;
  bool refused_ = false;
  std::string what_;
  GemmPointers pointers_;
  GemmConfig config_;
  float alpha_ = 1, beta_ = 0;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr, d_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
};

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_GEMM_H_
