// cuBLASLt, loaded at run time with dlopen so that gptrun starts (and runs
// --device cpu) on machines without the CUDA libraries.
//
// Search order (the first that loads wins):
//   $GPTC_CUBLASLT (a full path, when set)
//   libcublasLt.so.13            (LD_LIBRARY_PATH, rpath, the ld.so cache)
//   /usr/local/cuda/lib64/libcublasLt.so.13
//   PYTHON/site-packages/nvidia/cu13/lib/libcublasLt.so.13   (pip's CUDA 13 wheels)
//   PYTHON/site-packages/nvidia/cublas/lib/libcublasLt.so.13
// where PYTHON is each of /usr/lib/python3*, /usr/local/lib/python3*,
// /opt/conda/lib/python3*, /opt/*/lib/python3*, ~/.local/lib/python3*,
// $VIRTUAL_ENV/lib/python3*, $CONDA_PREFIX/lib/python3* (site-packages and
// dist-packages).
//
// Internal to runtime/gpu: this header includes cublasLt.h for the types.
#ifndef GPTC_RUNTIME_GPU_CUBLASLT_API_H_
#define GPTC_RUNTIME_GPU_CUBLASLT_API_H_

#include <cublasLt.h>

#include <string>
#include <vector>

#include "compiler/support/status.h"
#include "runtime/gpu/api_fn.h"

namespace gptc::rt::gpu {

// The handful of cuBLASLt functions the runtime calls.
struct CublasLtApi {
  std::string path;  // the library that was loaded
  size_t version = 0;
  ApiFn<decltype(::cublasLtCreate)> Create;
  ApiFn<decltype(::cublasLtDestroy)> Destroy;
  ApiFn<decltype(::cublasLtGetVersion)> GetVersion;
  ApiFn<decltype(::cublasLtGetStatusName)> GetStatusName;
  ApiFn<decltype(::cublasLtGetStatusString)> GetStatusString;
  ApiFn<decltype(::cublasLtMatmulDescCreate)> MatmulDescCreate;
  ApiFn<decltype(::cublasLtMatmulDescDestroy)> MatmulDescDestroy;
  ApiFn<decltype(::cublasLtMatmulDescSetAttribute)> MatmulDescSetAttribute;
  ApiFn<decltype(::cublasLtMatrixLayoutCreate)> MatrixLayoutCreate;
  ApiFn<decltype(::cublasLtMatrixLayoutDestroy)> MatrixLayoutDestroy;
  ApiFn<decltype(::cublasLtMatrixLayoutSetAttribute)> MatrixLayoutSetAttribute;
  ApiFn<decltype(::cublasLtMatmulPreferenceCreate)> MatmulPreferenceCreate;
  ApiFn<decltype(::cublasLtMatmulPreferenceDestroy)> MatmulPreferenceDestroy;
  ApiFn<decltype(::cublasLtMatmulPreferenceSetAttribute)> MatmulPreferenceSetAttribute;
  ApiFn<decltype(::cublasLtMatmulAlgoGetHeuristic)> MatmulAlgoGetHeuristic;
  ApiFn<decltype(::cublasLtMatmul)> Matmul;

  // "CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not supported)".
  std::string StatusText(cublasStatus_t status) const;
};

// The candidates, in search order (globs expanded; $GPTC_CUBLASLT first when set).
std::vector<std::string> CublasLtCandidates();

// Loads the first candidate that dlopens and has every symbol; the library
// stays loaded for the process. Errors list every place tried.
StatusOr<CublasLtApi> LoadCublasLt(const std::vector<std::string>& candidates);
// LoadCublasLt(CublasLtCandidates()), once per process (the CUDA backend's).
StatusOr<const CublasLtApi*> LoadNvidiaCublasLt();
// The active backend's cuBLASLt (backend.h).
StatusOr<const CublasLtApi*> GetCublasLt();

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_CUBLASLT_API_H_
