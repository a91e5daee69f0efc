#include "runtime/gpu/gemm.h"

#include <algorithm>
#include <cstdint>

namespace gptc::rt::gpu {

Status GemmRunner::Check(cublasStatus_t status, std::string_view call) const {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Error("{}: {}: {}", what_, call, lt_.StatusText(status));
}

StatusOr<std::unique_ptr<GemmRunner>> GemmRunner::Create(const CublasLtApi& lt,
                                                         cublasLtHandle_t handle,
                                                         const GemmConfig& config,
                                                         const GemmPointers& pointers,
                                                         std::string what) {
  ASSIGN_OR_RETURN(std::unique_ptr<GemmRunner> g, Prepare(lt, config, pointers, std::move(what)));
  RETURN_IF_ERROR(g->SelectAlgorithm(handle));
  return g;
}

StatusOr<std::unique_ptr<GemmRunner>> GemmRunner::Prepare(const CublasLtApi& lt,
                                                          const GemmConfig& config,
                                                          const GemmPointers& pointers,
                                                          std::string what) {
  std::unique_ptr<GemmRunner> g(new GemmRunner(lt, std::move(what)));
  g->pointers_ = pointers;
  g->config_ = config;
  g->alpha_ = static_cast<float>(config.alpha);
  g->beta_ = static_cast<float>(config.beta);
  if (config.scale_type != program::GemmDType::kF32) {
    return Error("{}: scale type {} is not f32 (alpha/beta are passed as float)", g->what_,
                 program::GemmDTypeName(config.scale_type));
  }
  RETURN_IF_ERROR(g->Check(
      lt.MatmulDescCreate(&g->desc_,
                          static_cast<cublasComputeType_t>(CudaComputeType(config.compute_type)),
                          static_cast<cudaDataType_t>(CudaDataType(config.scale_type))),
      "cublasLtMatmulDescCreate"));
  auto set_desc = [&](cublasLtMatmulDescAttributes_t attr, const auto& value,
                      std::string_view name) -> Status {
    return g->Check(lt.MatmulDescSetAttribute(g->desc_, attr, &value, sizeof(value)),
                    fmt::format("cublasLtMatmulDescSetAttribute({})", name));
  };
  const int32_t transa = CudaOperation(config.transa), transb = CudaOperation(config.transb);
  const uint32_t epilogue = static_cast<uint32_t>(CudaEpilogue(config.epilogue));
  const std::string_view epilogue_name = program::GemmEpilogueName(config.epilogue);
  RETURN_IF_ERROR(set_desc(CUBLASLT_MATMUL_DESC_TRANSA, transa, "TRANSA"));
  RETURN_IF_ERROR(set_desc(CUBLASLT_MATMUL_DESC_TRANSB, transb, "TRANSB"));
  RETURN_IF_ERROR(set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "EPILOGUE"));
  if (program::ReadsBias(config.epilogue) || program::WritesBias(config.epilogue)) {
    if (pointers.bias == nullptr)
      return Error("{}: epilogue {} needs a bias buffer", g->what_, epilogue_name);
    RETURN_IF_ERROR(set_desc(CUBLASLT_MATMUL_DESC_BIAS_POINTER, pointers.bias, "BIAS_POINTER"));
    if (config.bias_dtype) {
      const int32_t dtype = CudaDataType(*config.bias_dtype);
      RETURN_IF_ERROR(set_desc(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, dtype, "BIAS_DATA_TYPE"));
    }
  }
  if (program::WritesAux(config.epilogue) || program::ReadsAux(config.epilogue)) {
    if (pointers.aux == nullptr)
      return Error("{}: epilogue {} needs an aux buffer", g->what_, epilogue_name);
    const int64_t ld = config.aux_ld;
    RETURN_IF_ERROR(
        set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, pointers.aux, "EPILOGUE_AUX_POINTER"));
    RETURN_IF_ERROR(set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld, "EPILOGUE_AUX_LD"));
    if (config.batch_count > 1) {  // aux is laid out as D, batch after batch
      const int64_t stride = ld * config.n;
      RETURN_IF_ERROR(set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, stride,
                               "EPILOGUE_AUX_BATCH_STRIDE"));
    }
  }
  for (auto [name, layout, out] :
       {std::tuple{"A", &config.a, &g->a_}, std::tuple{"B", &config.b, &g->b_},
        std::tuple{"C", &config.c, &g->c_}, std::tuple{"D", &config.d, &g->d_}}) {
    RETURN_IF_ERROR(g->Check(
        lt.MatrixLayoutCreate(out, static_cast<cudaDataType_t>(CudaDataType(layout->dtype)),
                              static_cast<uint64_t>(layout->rows),
                              static_cast<uint64_t>(layout->cols), layout->ld),
        fmt::format("cublasLtMatrixLayoutCreate({})", name)));
    if (layout->batch_count > 1) {
      const int32_t count = static_cast<int32_t>(layout->batch_count);
      const int64_t stride = layout->batch_stride;
      RETURN_IF_ERROR(
          g->Check(lt.MatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                               sizeof(count)),
                   fmt::format("cublasLtMatrixLayoutSetAttribute({} BATCH_COUNT)", name)));
      RETURN_IF_ERROR(
          g->Check(lt.MatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                               &stride, sizeof(stride)),
                   fmt::format("cublasLtMatrixLayoutSetAttribute({} STRIDED_BATCH_OFFSET)", name)));
    }
  }
  return g;
}

StatusOr<std::vector<cublasLtMatmulHeuristicResult_t>> GemmRunner::Candidates(
    cublasLtHandle_t handle, int max) {
  refused_ = false;
  cublasLtMatmulPreference_t pref = nullptr;
  RETURN_IF_ERROR(Check(lt_.MatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"));
  const uint64_t workspace = pointers_.workspace_bytes;
  Status s = Check(lt_.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace, sizeof(workspace)),
                   "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(std::max(max, 1)));
  int found = 0;
  if (s.ok()) {
    const cublasStatus_t h =
        lt_.MatmulAlgoGetHeuristic(handle, desc_, a_, b_, c_, d_, pref,
                                   static_cast<int>(results.size()), results.data(), &found);
    // No algorithm: none found, or NOT_SUPPORTED (cuBLASLt's answer then).
    refused_ = found == 0 && (h == CUBLAS_STATUS_SUCCESS || h == CUBLAS_STATUS_NOT_SUPPORTED);
    s = Check(h, "cublasLtMatmulAlgoGetHeuristic");
  }
  lt_.MatmulPreferenceDestroy(pref);
  if (!s.ok()) return Status::Error(fmt::format("{} [{}]", s.message(), config_.Summary()));
  if (found == 0) {
    return Error("{}: cuBLASLt has no algorithm for {} with a {} byte workspace", what_,
                 config_.Summary(), workspace);
  }
  results.resize(static_cast<size_t>(found));
  return results;
}

Status GemmRunner::SelectAlgorithm(cublasLtHandle_t handle) {
  ASSIGN_OR_RETURN(std::vector<cublasLtMatmulHeuristicResult_t> first, Candidates(handle, 1));
  UseAlgorithm(handle, first[0]);
  return Status::Ok();
}

void GemmRunner::UseAlgorithm(cublasLtHandle_t handle,
                              const cublasLtMatmulHeuristicResult_t& choice) {
  handle_ = handle;
  heuristic_ = choice;
  has_algorithm_ = true;
}

GemmRunner::~GemmRunner() {
  for (cublasLtMatrixLayout_t l : {a_, b_, c_, d_}) {
    if (l != nullptr) lt_.MatrixLayoutDestroy(l);
  }
  if (desc_ != nullptr) lt_.MatmulDescDestroy(desc_);
}

Status GemmRunner::Run(cudaStream_t stream) const {
  if (!has_algorithm_) return Error("{}: no algorithm was selected", what_);
  return Check(lt_.Matmul(handle_, desc_, &alpha_, pointers_.a, a_, pointers_.b, b_, &beta_,
                          pointers_.c, c_, pointers_.d, d_, &heuristic_.algo, pointers_.workspace,
                          pointers_.workspace_bytes, stream),
               "cublasLtMatmul");
}

}  // namespace gptc::rt::gpu
