#include "runtime/emu/lt_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string_view>

namespace gptc::rt::emu {

namespace {

// The heuristic's mark in the algorithms it returns (cublasLtMatmulAlgo_t
// data[0]), so that cublasLtMatmul refuses one it did not choose; data[1]
// is the algorithm's index in kAlgorithms.
constexpr uint64_t kAlgoMark = 0x6770746365'6d7531;  // "gptcemu1"

// Note [emulated gemm algorithms]
// The heuristic offers a few algorithms, as cuBLASLt does, so that the
// runtime's autotuning (runtime/gpu/autotune.h) has a choice to make. They
// compute the same result; they differ only in the stand-in time the
// emulated device's clock advances by (Note [emulated time] in
// emu_state.h): output tiles of tile_m x tile_n, one tile per SM at a time
// on 132 SMs, each at `efficiency` of an SM's share of 989 TFLOP/s, plus a
// launch. So the fastest depends on the shape (wave quantization), as on
// a GPU. $GPTC_EMU_SLOW_EPILOGUES (a comma list of epilogue names) makes
// matmuls with those epilogues 4x slower, so that the gemm without its
// epilogue plus the fallback kernel wins the tuning (Note [epilogue
// fallback] in runtime/gpu/executor.h).
struct Algorithm {
  uint64_t tile_m, tile_n;
  double efficiency;
};
constexpr Algorithm kAlgorithms[] = {
    {128, 128, 0.70}, {128, 256, 0.80}, {64, 128, 0.55}, {256, 128, 0.78}};
constexpr int kAlgorithmCount = static_cast<int>(std::size(kAlgorithms));

// Whether `list` (a comma list, or null) names `name`.
bool Lists(const char* list, const std::string& name) {
  if (list == nullptr) return false;
  for (std::string_view rest = list; !rest.empty();) {
    const size_t comma = rest.find(',');
    if (rest.substr(0, comma) == name) return true;
    rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
  }
  return false;
}

double StandInMicros(const MatmulSpec& s, const MatrixShape& a, const MatrixShape& d,
                     uint64_t algorithm) {
  const Algorithm& al = kAlgorithms[algorithm];
  const uint64_t k = s.transa == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t tiles = (d.rows + al.tile_m - 1) / al.tile_m *
                         ((d.cols + al.tile_n - 1) / al.tile_n) *
                         static_cast<uint64_t>(std::max(d.batch_count, 1));
  const uint64_t waves = (tiles + 131) / 132;
  const double sm_flops_per_us = 989e6 / 132 * al.efficiency;
  double us = 3.0 + static_cast<double>(waves) * 2.0 * al.tile_m * al.tile_n * k / sm_flops_per_us;
  if (Lists(std::getenv("GPTC_EMU_SLOW_EPILOGUES"), EpilogueName(s.epilogue))) us *= 4;
  return us;
}

struct Desc {
  MatmulSpec spec;
};
struct Layout {
  MatrixShape shape;
  std::string unmodeled;
};

thread_local std::string last_refusal;

cublasStatus_t Refuse(cublasStatus_t status, std::string why) {
  last_refusal = std::move(why);
  return status;
}

template <typename T>
cublasStatus_t Assign(T* field, const void* buf, size_t size, const char* name) {
  last_refusal.clear();
  if (size != sizeof(T)) {
    return Refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fmt::format("{} takes {} bytes, got {}", name, sizeof(T), size));
  }
  std::memcpy(field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t Create(cublasLtHandle_t* handle) {
  *handle = reinterpret_cast<cublasLtHandle_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t Destroy(cublasLtHandle_t handle) {
  delete reinterpret_cast<int*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

size_t GetVersion() { return CUBLAS_VERSION; }

const char* GetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
      return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* GetStatusString(cublasStatus_t status) {
  if (status != CUBLAS_STATUS_SUCCESS && !last_refusal.empty()) return last_refusal.c_str();
  return status == CUBLAS_STATUS_SUCCESS ? "success" : "the emulated cuBLASLt refused";
}

cublasStatus_t MatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                cudaDataType_t scale) {
  auto* d = new Desc();
  d->spec.compute_type = compute;
  d->spec.scale_type = scale;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t MatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete reinterpret_cast<Desc*>(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t MatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                      cublasLtMatmulDescAttributes_t attr, const void* buf,
                                      size_t size) {
  MatmulSpec& s = reinterpret_cast<Desc*>(desc)->spec;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return Assign(&s.compute_type, buf, size, "COMPUTE_TYPE");
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return Assign(&s.scale_type, buf, size, "SCALE_TYPE");
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return Assign(&s.pointer_mode, buf, size, "POINTER_MODE");
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return Assign(&s.transa, buf, size, "TRANSA");
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return Assign(&s.transb, buf, size, "TRANSB");
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return Assign(&s.epilogue, buf, size, "EPILOGUE");
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return Assign(&s.bias, buf, size, "BIAS_POINTER");
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      return Assign(&s.bias_batch_stride, buf, size, "BIAS_BATCH_STRIDE");
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return Assign(&s.bias_dtype, buf, size, "BIAS_DATA_TYPE");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return Assign(&s.aux, buf, size, "EPILOGUE_AUX_POINTER");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return Assign(&s.aux_ld, buf, size, "EPILOGUE_AUX_LD");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
      return Assign(&s.aux_batch_stride, buf, size, "EPILOGUE_AUX_BATCH_STRIDE");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
      return Assign(&s.aux_dtype, buf, size, "EPILOGUE_AUX_DATA_TYPE");
    default:
      // Accepted, as cuBLASLt would; a matmul with it is refused (CheckMatmul).
      if (s.unmodeled.empty()) {
        s.unmodeled = fmt::format("CUBLASLT_MATMUL_DESC attribute {}", static_cast<int>(attr));
      }
      return CUBLAS_STATUS_SUCCESS;
  }
}

cublasStatus_t MatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                  uint64_t cols, int64_t ld) {
  auto* l = new Layout();
  l->shape.dtype = type;
  l->shape.rows = rows;
  l->shape.cols = cols;
  l->shape.ld = ld;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t MatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete reinterpret_cast<Layout*>(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t MatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                        cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                        size_t size) {
  Layout& l = *reinterpret_cast<Layout*>(layout);
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      return Assign(&l.shape.dtype, buf, size, "LAYOUT_TYPE");
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      return Assign(&l.shape.order, buf, size, "LAYOUT_ORDER");
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return Assign(&l.shape.rows, buf, size, "LAYOUT_ROWS");
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return Assign(&l.shape.cols, buf, size, "LAYOUT_COLS");
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return Assign(&l.shape.ld, buf, size, "LAYOUT_LD");
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return Assign(&l.shape.batch_count, buf, size, "LAYOUT_BATCH_COUNT");
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return Assign(&l.shape.batch_stride, buf, size, "LAYOUT_STRIDED_BATCH_OFFSET");
    default:
      if (l.unmodeled.empty()) {
        l.unmodeled = fmt::format("CUBLASLT_MATRIX_LAYOUT attribute {}", static_cast<int>(attr));
      }
      return CUBLAS_STATUS_SUCCESS;
  }
}

cublasStatus_t MatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new uint64_t(0));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t MatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete reinterpret_cast<uint64_t*>(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t MatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                            cublasLtMatmulPreferenceAttributes_t attr,
                                            const void* buf, size_t size) {
  // Preferences steer the choice of an algorithm, never the result.
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    return Assign(reinterpret_cast<uint64_t*>(pref), buf, size, "MAX_WORKSPACE_BYTES");
  }
  return CUBLAS_STATUS_SUCCESS;
}

// The spec with the layouts' unmodelled attributes, checked.
Verdict Check(const Desc& desc, const Layout* a, const Layout* b, const Layout* c,
              const Layout* d) {
  MatmulSpec spec = desc.spec;
  for (const Layout* l : {a, b, c, d}) {
    if (spec.unmodeled.empty()) spec.unmodeled = l->unmodeled;
  }
  return CheckMatmul(spec, a->shape, b->shape, c->shape, d->shape);
}

cublasStatus_t MatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                                      cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                      cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                      cublasLtMatmulPreference_t, int requested,
                                      cublasLtMatmulHeuristicResult_t results[], int* count) {
  *count = 0;
  last_refusal.clear();
  if (requested < 1) return Refuse(CUBLAS_STATUS_INVALID_VALUE, "requestedAlgoCount < 1");
  Verdict v = Check(*reinterpret_cast<Desc*>(desc), reinterpret_cast<Layout*>(a),
                    reinterpret_cast<Layout*>(b), reinterpret_cast<Layout*>(c),
                    reinterpret_cast<Layout*>(d));
  if (!v.ok()) return Refuse(v.status, v.reason);
  // A GPU whose cuBLASLt has no algorithm for an epilogue, on demand: the
  // runtime's fallback (Note [epilogue fallback]) is tested this way.
  const std::string epilogue = EpilogueName(reinterpret_cast<Desc*>(desc)->spec.epilogue);
  if (Lists(std::getenv("GPTC_EMU_REFUSE_EPILOGUES"), epilogue)) {
    return Refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  epilogue + ": no algorithm ($GPTC_EMU_REFUSE_EPILOGUES)");
  }
  // Note [emulated gemm algorithms]: in kAlgorithms' order, which is not
  // the fastest first.
  *count = std::min(requested, kAlgorithmCount);
  for (int i = 0; i < *count; ++i) {
    results[i] = cublasLtMatmulHeuristicResult_t{};
    results[i].algo.data[0] = kAlgoMark;
    results[i].algo.data[1] = static_cast<uint64_t>(i);
    results[i].workspaceSize = 0;
    results[i].state = CUBLAS_STATUS_SUCCESS;
    results[i].wavesCount = 1.0f;
  }
  return CUBLAS_STATUS_SUCCESS;
}

std::string Summary(const MatmulSpec& s, const MatrixShape& a, const MatrixShape& b,
                    const MatrixShape& d) {
  const uint64_t k = s.transa == CUBLAS_OP_N ? a.cols : a.rows;
  return fmt::format("m={} n={} k={} batch={} A {} {} B {} {} D {} epilogue {}", d.rows, d.cols, k,
                     d.batch_count, DataTypeName(a.dtype), s.transa == CUBLAS_OP_N ? "N" : "T",
                     DataTypeName(b.dtype), s.transb == CUBLAS_OP_N ? "N" : "T",
                     DataTypeName(d.dtype), EpilogueName(s.epilogue));
}

cublasStatus_t MatmulOn(const MatmulExecutor* executor, cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                        const void* alpha, const void* A, cublasLtMatrixLayout_t adesc,
                        const void* B, cublasLtMatrixLayout_t bdesc, const void* beta,
                        const void* C, cublasLtMatrixLayout_t cdesc, void* D,
                        cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t* algo, void*,
                        size_t, cudaStream_t stream) {
  last_refusal.clear();
  if (algo == nullptr || algo->data[0] != kAlgoMark ||
      algo->data[1] >= static_cast<uint64_t>(kAlgorithmCount)) {
    return Refuse(CUBLAS_STATUS_INVALID_VALUE, "the algorithm is not one the heuristic returned");
  }
  const Desc& dd = *reinterpret_cast<Desc*>(desc);
  const auto* la = reinterpret_cast<Layout*>(adesc);
  const auto* lb = reinterpret_cast<Layout*>(bdesc);
  const auto* lc = reinterpret_cast<Layout*>(cdesc);
  const auto* ld = reinterpret_cast<Layout*>(ddesc);
  Verdict v = Check(dd, la, lb, lc, ld);
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  if (v.ok()) v = CheckScalars(dd.spec, a);
  if (v.ok()) v = CheckPointers(lc->shape, ld->shape, C, D);
  if (!v.ok()) return Refuse(v.status, v.reason);
  const MatmulSpec spec = dd.spec;
  const MatrixShape sa = la->shape, sb = lb->shape, sc = lc->shape, sd = ld->shape;
  MatmulWork work;
  work.reads = ReadRanges(spec, sa, sb, sc, sd, A, B, C, b);
  work.writes = WriteRanges(spec, sa, sb, sd, D);
  work.summary = Summary(spec, sa, sb, sd);
  work.stand_in_us = StandInMicros(spec, sa, sd, algo->data[1]);
  work.run = [=] { RunMatmul(spec, sa, sb, sc, sd, a, b, A, B, C, D); };
  if (executor == nullptr) {
    work.run();
    return CUBLAS_STATUS_SUCCESS;
  }
  return (*executor)(stream, std::move(work));
}

// Note [bound API functions] in runtime/gpu/api_fn.h: cublasLtMatmul with an executor.
cublasStatus_t MatmulWith(const MatmulExecutor& executor, cublasLtHandle_t handle,
                          cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                          cublasLtMatrixLayout_t adesc, const void* B, cublasLtMatrixLayout_t bdesc,
                          const void* beta, const void* C, cublasLtMatrixLayout_t cdesc, void* D,
                          cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t* algo,
                          void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  return MatmulOn(&executor, handle, desc, alpha, A, adesc, B, bdesc, beta, C, cdesc, D, ddesc,
                  algo, workspace, workspace_bytes, stream);
}

cublasStatus_t Matmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                      const void* A, cublasLtMatrixLayout_t adesc, const void* B,
                      cublasLtMatrixLayout_t bdesc, const void* beta, const void* C,
                      cublasLtMatrixLayout_t cdesc, void* D, cublasLtMatrixLayout_t ddesc,
                      const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream) {
  return MatmulOn(nullptr, handle, desc, alpha, A, adesc, B, bdesc, beta, C, cdesc, D, ddesc, algo,
                  workspace, workspace_bytes, stream);
}

}  // namespace

gpu::CublasLtApi EmulatedCublasLt(const MatmulExecutor* executor) {
  gpu::CublasLtApi api;
  api.path = "emulated cuBLASLt (runtime/emu)";
  api.version = CUBLAS_VERSION;
  api.Create = &Create;
  api.Destroy = &Destroy;
  api.GetVersion = &GetVersion;
  api.GetStatusName = &GetStatusName;
  api.GetStatusString = &GetStatusString;
  api.MatmulDescCreate = &MatmulDescCreate;
  api.MatmulDescDestroy = &MatmulDescDestroy;
  api.MatmulDescSetAttribute = &MatmulDescSetAttribute;
  api.MatrixLayoutCreate = &MatrixLayoutCreate;
  api.MatrixLayoutDestroy = &MatrixLayoutDestroy;
  api.MatrixLayoutSetAttribute = &MatrixLayoutSetAttribute;
  api.MatmulPreferenceCreate = &MatmulPreferenceCreate;
  api.MatmulPreferenceDestroy = &MatmulPreferenceDestroy;
  api.MatmulPreferenceSetAttribute = &MatmulPreferenceSetAttribute;
  api.MatmulAlgoGetHeuristic = &MatmulAlgoGetHeuristic;
  if (executor != nullptr) {
    api.Matmul = gpu::BindApiFn<&MatmulWith>(executor);
  } else {
    api.Matmul = &Matmul;
  }
  return api;
}

std::string LastRefusal() { return last_refusal; }

}  // namespace gptc::rt::emu
