#include "runtime/emu/gemm_semantics.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "compiler/support/float_bits.h"

namespace gptc::rt::emu {

namespace {

constexpr uint32_t kGelu = CUBLASLT_EPILOGUE_GELU;

bool IsKnownEpilogue(uint32_t e) {
  for (uint32_t k :
       {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU,
        CUBLASLT_EPILOGUE_RELU_BIAS, CUBLASLT_EPILOGUE_GELU,
        CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
        CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_BGRADA,
        CUBLASLT_EPILOGUE_BGRADB}) {
    if (e == k) return true;
  }
  return false;
}

bool ReadsBias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool WritesBias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB ||
         e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
bool WritesAux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool ReadsAux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
bool AppliesGelu(uint32_t e) { return !ReadsAux(e) && (e & kGelu) != 0; }
bool AppliesRelu(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS;
}

int64_t ElementBytes(int32_t dtype) { return dtype == CUDA_R_32F ? 4 : 2; }

bool IsFloatType(int32_t dtype) {
  return dtype == CUDA_R_16BF || dtype == CUDA_R_16F || dtype == CUDA_R_32F;
}

float Load(const void* base, int64_t index, int32_t dtype) {
  if (dtype == CUDA_R_32F) return static_cast<const float*>(base)[index];
  const uint16_t h = static_cast<const uint16_t*>(base)[index];
  return dtype == CUDA_R_16BF ? BF16BitsToF32(h) : F16BitsToF32(h);
}

void Store(void* base, int64_t index, int32_t dtype, float v) {
  if (dtype == CUDA_R_32F) {
    static_cast<float*>(base)[index] = v;
    return;
  }
  static_cast<uint16_t*>(base)[index] = dtype == CUDA_R_16BF ? F32ToBF16Bits(v) : F32ToF16Bits(v);
}

// op(X)'s rows and columns.
uint64_t OpRows(const MatrixShape& x, int32_t trans) {
  return trans == CUBLAS_OP_N ? x.rows : x.cols;
}
uint64_t OpCols(const MatrixShape& x, int32_t trans) {
  return trans == CUBLAS_OP_N ? x.cols : x.rows;
}

int32_t BiasType(const MatmulSpec& s, const MatrixShape& d) {
  return s.bias_dtype >= 0 ? s.bias_dtype : d.dtype;
}
int32_t AuxType(const MatmulSpec& s, const MatrixShape& d) {
  return s.aux_dtype >= 0 ? s.aux_dtype : d.dtype;
}

Verdict Refuse(cublasStatus_t status, std::string reason) {
  return Verdict{status, std::move(reason)};
}

// One run of `rows` elements per column of every batch of `x` at `base`.
void AddRanges(std::vector<ByteRange>& out, const MatrixShape& x, const void* base,
               const char* what) {
  const int64_t e = ElementBytes(x.dtype);
  for (int32_t b = 0; b < x.batch_count; ++b) {
    for (uint64_t c = 0; c < x.cols; ++c) {
      const int64_t first = b * x.batch_stride + static_cast<int64_t>(c) * x.ld;
      out.push_back({static_cast<const char*>(base) + first * e, x.rows * e, what});
    }
  }
}

float Gelu(float x) {
  const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(inner));
}

float GeluGrad(float x) {
  const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  const float t = std::tanh(inner);
  return 0.5f * (1.0f + t) +
         0.5f * x * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}

// Batch `b` of `x` (op applied when `trans` is T) as a dense column-major f32
// matrix of op(x)'s shape.
std::vector<float> DenseOp(const MatrixShape& x, const void* base, int32_t b, int32_t trans) {
  const uint64_t rows = OpRows(x, trans), cols = OpCols(x, trans);
  std::vector<float> out(rows * cols);
  const int64_t origin = b * x.batch_stride;
  for (uint64_t j = 0; j < cols; ++j) {
    for (uint64_t i = 0; i < rows; ++i) {
      const uint64_t r = trans == CUBLAS_OP_N ? i : j;
      const uint64_t c = trans == CUBLAS_OP_N ? j : i;
      out[j * rows + i] = Load(base, origin + static_cast<int64_t>(c) * x.ld + r, x.dtype);
    }
  }
  return out;
}

}  // namespace

std::string DataTypeName(int32_t dtype) {
  switch (dtype) {
    case CUDA_R_16BF:
      return "CUDA_R_16BF";
    case CUDA_R_16F:
      return "CUDA_R_16F";
    case CUDA_R_32F:
      return "CUDA_R_32F";
    case CUDA_R_64F:
      return "CUDA_R_64F";
    case CUDA_R_8I:
      return "CUDA_R_8I";
    case CUDA_R_32I:
      return "CUDA_R_32I";
    default:
      return fmt::format("cudaDataType {}", dtype);
  }
}

std::string EpilogueName(uint32_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT:
      return "CUBLASLT_EPILOGUE_DEFAULT";
    case CUBLASLT_EPILOGUE_RELU:
      return "CUBLASLT_EPILOGUE_RELU";
    case CUBLASLT_EPILOGUE_BIAS:
      return "CUBLASLT_EPILOGUE_BIAS";
    case CUBLASLT_EPILOGUE_RELU_BIAS:
      return "CUBLASLT_EPILOGUE_RELU_BIAS";
    case CUBLASLT_EPILOGUE_GELU:
      return "CUBLASLT_EPILOGUE_GELU";
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      return "CUBLASLT_EPILOGUE_GELU_BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX:
      return "CUBLASLT_EPILOGUE_GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      return "CUBLASLT_EPILOGUE_GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU:
      return "CUBLASLT_EPILOGUE_DGELU";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
      return "CUBLASLT_EPILOGUE_DGELU_BGRAD";
    case CUBLASLT_EPILOGUE_BGRADA:
      return "CUBLASLT_EPILOGUE_BGRADA";
    case CUBLASLT_EPILOGUE_BGRADB:
      return "CUBLASLT_EPILOGUE_BGRADB";
    default:
      return fmt::format("epilogue {}", e);
  }
}

namespace {

// The four matrices' layouts: column-major floats, not empty, ld at least
// the rows, D's batch count.
Verdict CheckLayouts(const MatrixShape& a, const MatrixShape& b, const MatrixShape& c,
                     const MatrixShape& d) {
  const char* names[] = {"A", "B", "C", "D"};
  const MatrixShape* all[] = {&a, &b, &c, &d};
  for (int i = 0; i < 4; ++i) {
    const MatrixShape& x = *all[i];
    if (x.order != CUBLASLT_ORDER_COL) {
      return Refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    fmt::format("{}: order {} (column-major only)", names[i], x.order));
    }
    if (!IsFloatType(x.dtype)) {
      return Refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    fmt::format("{}: type {}", names[i], DataTypeName(x.dtype)));
    }
    if (x.rows == 0 || x.cols == 0) {
      return Refuse(CUBLAS_STATUS_INVALID_VALUE,
                    fmt::format("{}: {} x {} (an empty matrix)", names[i], x.rows, x.cols));
    }
    if (x.ld < static_cast<int64_t>(x.rows)) {
      return Refuse(CUBLAS_STATUS_INVALID_VALUE,
                    fmt::format("{}: {} x {} with ld {} (a column-major ld must be >= rows)",
                                names[i], x.rows, x.cols, x.ld));
    }
    if (x.batch_count < 1 || x.batch_count != d.batch_count) {
      return Refuse(
          CUBLAS_STATUS_INVALID_VALUE,
          fmt::format("{}: batch count {}, D's is {}", names[i], x.batch_count, d.batch_count));
    }
  }
  return Verdict{};
}

// The epilogue's operands (bias, aux) for D of m x n.
Verdict CheckEpilogue(const MatmulSpec& s, const MatrixShape& c, const MatrixShape& d, uint64_t m,
                      uint64_t n) {
  const uint32_t e = s.epilogue;
  const std::string ename = EpilogueName(e);
  if (!IsKnownEpilogue(e)) return Refuse(CUBLAS_STATUS_NOT_SUPPORTED, ename + " is not modelled");
  if (ReadsBias(e) || WritesBias(e)) {
    if (s.bias == nullptr) {
      return Refuse(CUBLAS_STATUS_INVALID_VALUE,
                    ename + " without CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    }
    const int32_t bias_type =
        s.bias_dtype >= 0 ? s.bias_dtype : (WritesBias(e) ? c.dtype : d.dtype);
    const int32_t want = WritesBias(e) ? c.dtype : d.dtype;
    if (bias_type != want) {
      return Refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    fmt::format("{}: bias type {} with {} {} (cuBLASLt's {} has the output's type)",
                                ename, DataTypeName(bias_type), WritesBias(e) ? "C" : "D",
                                DataTypeName(want), WritesBias(e) ? "bias gradient" : "bias"));
    }
    if (WritesBias(e) && d.batch_count > 1) {
      return Refuse(CUBLAS_STATUS_NOT_SUPPORTED, ename + " of a batched matmul is not modelled");
    }
  }
  if (WritesAux(e) || ReadsAux(e)) {
    if (s.aux == nullptr) {
      return Refuse(CUBLAS_STATUS_INVALID_VALUE,
                    ename + " without CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
    }
    if (s.aux_ld < static_cast<int64_t>(m) || s.aux_ld % 8 != 0) {
      return Refuse(
          CUBLAS_STATUS_INVALID_VALUE,
          fmt::format("{}: EPILOGUE_AUX_LD {} (must be divisible by 8 and at least D's {} "
                      "rows)",
                      ename, s.aux_ld, m));
    }
    if (d.batch_count > 1 &&
        (s.aux_batch_stride % 8 != 0 || s.aux_batch_stride < s.aux_ld * static_cast<int64_t>(n))) {
      return Refuse(CUBLAS_STATUS_INVALID_VALUE,
                    fmt::format("{}: EPILOGUE_AUX_BATCH_STRIDE {} of {} batches (must be divisible "
                                "by 8, and the batches' aux must not overlap: at least {})",
                                ename, s.aux_batch_stride, d.batch_count,
                                s.aux_ld * static_cast<int64_t>(n)));
    }
    if (AuxType(s, d) != d.dtype) {
      return Refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    fmt::format("{}: aux type {} with D {} is not modelled", ename,
                                DataTypeName(AuxType(s, d)), DataTypeName(d.dtype)));
    }
  }
  return Verdict{};
}

}  // namespace

Verdict CheckMatmul(const MatmulSpec& s, const MatrixShape& a, const MatrixShape& b,
                    const MatrixShape& c, const MatrixShape& d) {
  if (!s.unmodeled.empty()) {
    return Refuse(CUBLAS_STATUS_NOT_SUPPORTED, s.unmodeled + " is not modelled by the emulator");
  }
  if (s.compute_type != CUBLAS_COMPUTE_32F) {
    return Refuse(
        CUBLAS_STATUS_NOT_SUPPORTED,
        fmt::format("compute type {} (the emulator models CUBLAS_COMPUTE_32F)", s.compute_type));
  }
  if (s.scale_type != CUDA_R_32F || s.pointer_mode != CUBLASLT_POINTER_MODE_HOST) {
    return Refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  fmt::format("scale type {} / pointer mode {} (host f32 alpha and beta only)",
                              DataTypeName(s.scale_type), s.pointer_mode));
  }
  if (Verdict layouts = CheckLayouts(a, b, c, d); !layouts.ok()) return layouts;
  if (s.transa != CUBLAS_OP_N && s.transa != CUBLAS_OP_T) {
    return Refuse(CUBLAS_STATUS_NOT_SUPPORTED, fmt::format("TRANSA {}", s.transa));
  }
  if (s.transb != CUBLAS_OP_N && s.transb != CUBLAS_OP_T) {
    return Refuse(CUBLAS_STATUS_NOT_SUPPORTED, fmt::format("TRANSB {}", s.transb));
  }
  const uint64_t m = d.rows, n = d.cols, k = OpCols(a, s.transa);
  if (OpRows(a, s.transa) != m || OpRows(b, s.transb) != k || OpCols(b, s.transb) != n ||
      c.rows != m || c.cols != n) {
    return Refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fmt::format("shapes: op(A) {}x{}, op(B) {}x{}, C {}x{}, D {}x{}",
                              OpRows(a, s.transa), OpCols(a, s.transa), OpRows(b, s.transb),
                              OpCols(b, s.transb), c.rows, c.cols, m, n));
  }
  if (a.dtype != b.dtype) {
    return Refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  fmt::format("A {} with B {} (one input type)", DataTypeName(a.dtype),
                              DataTypeName(b.dtype)));
  }
  if (c.dtype != d.dtype || (d.dtype != a.dtype && d.dtype != CUDA_R_32F)) {
    return Refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  fmt::format("inputs {} with C {} and D {} (C and D of one type, the inputs' or "
                              "CUDA_R_32F)",
                              DataTypeName(a.dtype), DataTypeName(c.dtype), DataTypeName(d.dtype)));
  }
  return CheckEpilogue(s, c, d, m, n);
}

Verdict CheckScalars(const MatmulSpec& s, float alpha) {
  if (WritesBias(s.epilogue) && s.epilogue != CUBLASLT_EPILOGUE_DGELU_BGRAD && alpha != 1.0f) {
    return Refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  fmt::format("{} with alpha {}: whether the bias gradient is scaled is not "
                              "documented (not modelled)",
                              EpilogueName(s.epilogue), alpha));
  }
  return Verdict{};
}

Verdict CheckPointers(const MatrixShape& c, const MatrixShape& d, const void* C, const void* D) {
  if (C == D && !(c == d)) {
    return Refuse(
        CUBLAS_STATUS_INVALID_VALUE,
        "in place (C == D) with different C and D layouts (cuBLASLt requires them equal)");
  }
  return Verdict{};
}

std::vector<ByteRange> ReadRanges(const MatmulSpec& s, const MatrixShape& a, const MatrixShape& b,
                                  const MatrixShape& c, const MatrixShape& d, const void* A,
                                  const void* B, const void* C, float beta) {
  std::vector<ByteRange> out;
  AddRanges(out, a, A, "A");
  AddRanges(out, b, B, "B");
  // "if beta == 0, C does not have to be a valid input".
  if (beta != 0) AddRanges(out, c, C, "C");
  const int64_t e = ElementBytes(BiasType(s, d));
  if (ReadsBias(s.epilogue)) {
    for (int32_t batch = 0; batch < d.batch_count; ++batch) {
      out.push_back(
          {static_cast<const char*>(s.bias) + batch * s.bias_batch_stride * e, d.rows * e, "bias"});
    }
  }
  if (ReadsAux(s.epilogue)) {
    MatrixShape aux = d;
    aux.ld = s.aux_ld;
    aux.batch_stride = s.aux_batch_stride;
    aux.dtype = AuxType(s, d);
    AddRanges(out, aux, s.aux, "aux");
  }
  return out;
}

std::vector<ByteRange> WriteRanges(const MatmulSpec& s, const MatrixShape& a, const MatrixShape& b,
                                   const MatrixShape& d, void* D) {
  std::vector<ByteRange> out;
  AddRanges(out, d, D, "D");
  if (WritesAux(s.epilogue)) {
    MatrixShape aux = d;
    aux.ld = s.aux_ld;
    aux.batch_stride = s.aux_batch_stride;
    aux.dtype = AuxType(s, d);
    AddRanges(out, aux, s.aux, "aux");
  }
  if (WritesBias(s.epilogue)) {
    const int64_t e = ElementBytes(s.bias_dtype >= 0 ? s.bias_dtype : d.dtype);
    const uint64_t length = s.epilogue == CUBLASLT_EPILOGUE_BGRADB ? d.cols : d.rows;
    out.push_back({s.bias, length * e, "bias"});
  }
  return out;
}

void RunMatmul(const MatmulSpec& s, const MatrixShape& a, const MatrixShape& b,
               const MatrixShape& c, const MatrixShape& d, float alpha, float beta, const void* A,
               const void* B, const void* C, void* D) {
  const uint64_t m = d.rows, n = d.cols, k = OpCols(a, s.transa);
  const uint32_t e = s.epilogue;
  const int32_t bias_type = s.bias_dtype >= 0 ? s.bias_dtype : d.dtype;
  const int32_t aux_type = AuxType(s, d);
  for (int32_t batch = 0; batch < d.batch_count; ++batch) {
    // Both operands as dense f32 op(X): transposes and ld are resolved here.
    const std::vector<float> opa = DenseOp(a, A, batch, s.transa);
    const std::vector<float> opb = DenseOp(b, B, batch, s.transb);
    std::vector<float> acc(m * n, 0.0f);
    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, opa.data(), static_cast<int>(m), opb.data(),
                static_cast<int>(k), 0.0f, acc.data(), static_cast<int>(m));
    // C is read in full before D is written: they may be the same memory.
    if (beta != 0) {
      for (uint64_t j = 0; j < n; ++j) {
        for (uint64_t i = 0; i < m; ++i) {
          acc[j * m + i] +=
              beta * Load(C, batch * c.batch_stride + static_cast<int64_t>(j) * c.ld + i, c.dtype);
        }
      }
    }
    std::vector<float> bias_grad(WritesBias(e) ? (e == CUBLASLT_EPILOGUE_BGRADB ? n : m) : 0, 0.0f);
    for (uint64_t j = 0; j < n; ++j) {
      for (uint64_t i = 0; i < m; ++i) {
        float x = acc[j * m + i];
        if (ReadsBias(e))
          x += Load(s.bias, batch * s.bias_batch_stride + static_cast<int64_t>(i), bias_type);
        const int64_t aux_at = batch * s.aux_batch_stride + static_cast<int64_t>(j) * s.aux_ld + i;
        if (WritesAux(e)) Store(s.aux, aux_at, aux_type, x);
        if (AppliesGelu(e)) x = Gelu(x);
        if (AppliesRelu(e)) x = std::max(x, 0.0f);
        if (ReadsAux(e)) x *= GeluGrad(Load(s.aux, aux_at, aux_type));
        if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD) bias_grad[i] += x;
        Store(D, batch * d.batch_stride + static_cast<int64_t>(j) * d.ld + i, d.dtype, x);
      }
    }
    if (e == CUBLASLT_EPILOGUE_BGRADA) {  // the rows of op(A), summed over k
      for (uint64_t kk = 0; kk < k; ++kk) {
        for (uint64_t i = 0; i < m; ++i) bias_grad[i] += opa[kk * m + i];
      }
    }
    if (e == CUBLASLT_EPILOGUE_BGRADB) {  // the columns of op(B), summed over k
      for (uint64_t j = 0; j < n; ++j) {
        for (uint64_t kk = 0; kk < k; ++kk) bias_grad[j] += opb[j * k + kk];
      }
    }
    for (size_t i = 0; i < bias_grad.size(); ++i)
      Store(s.bias, static_cast<int64_t>(i), bias_type, bias_grad[i]);
  }
}

}  // namespace gptc::rt::emu
