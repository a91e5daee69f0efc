// One cuBLASLt matmul as the emulated device computes it: cuBLASLt's
// documented semantics on host memory (column-major layouts, op(A)/op(B),
// leading dimensions, strided batches, alpha/beta with C, the epilogues),
// the rules it is documented to enforce, and the exact bytes it reads and
// writes (for the memory checks). No API objects here: lt_api.h is the
// cuBLASLt API on top.
//
// Note [emulated cuBLASLt rules]
// From the comments of cublasLt.h (CUDA 13.0) and the cuBLASLt section of
// the cuBLAS documentation:
//   - m, n, k come from the layouts: D is m x n, op(A) m x k, op(B) k x n, C
//     has D's shape; a mismatch is CUBLAS_STATUS_INVALID_VALUE;
//   - column-major (CUBLASLT_ORDER_COL) layouts need ld >= rows;
//   - A and B of one type among bf16, f16, f32; C and D of one type, A's or
//     f32; compute CUBLAS_COMPUTE_32F with scale type CUDA_R_32F;
//   - BIAS epilogues: a bias pointer, bias of D's type (BIAS_DATA_TYPE:
//     "the same type as the elements of output matrix (Dtype)", IMMA and
//     fp8 excepted), m long; bias gradients (BGRADA, BGRADB, DGELU_BGRAD):
//     "the same type as the output elements (Ctype)";
//   - GELU_AUX / DGELU: an aux pointer and EPILOGUE_AUX_LD, "divisible by 8
//     and no less than the number of rows in the output matrix"; batched,
//     EPILOGUE_AUX_BATCH_STRIDE "divisible by 8" (and the batches' aux
//     apart: a zero stride would write every batch's to one place);
//   - in place (C == D) needs C's layout to be D's.
// Refused as not modelled (CUBLAS_STATUS_NOT_SUPPORTED, never silently
// mis-emulated): other orders, compute types, epilogues (RELU_AUX, DRELU), fp8, scale
// pointers, bias gradients of batched matmuls or with alpha != 1 (whether
// alpha scales them is not documented), aux types other than D's.
// Not known from documentation and so not enforced: which layouts the bias
// gradient epilogues have kernels for (e.g. BGRADA with a transposed B); a
// GPU's heuristic may still find no algorithm where the emulator computes.
#ifndef GPTC_RUNTIME_EMU_GEMM_SEMANTICS_H_
#define GPTC_RUNTIME_EMU_GEMM_SEMANTICS_H_

#include <cublasLt.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gptc::rt::emu {

// Contiguous bytes a matmul touches; `what` is "A", "B", "C", "D", "bias" or "aux".
struct ByteRange {
  const void* begin = nullptr;
  size_t bytes = 0;
  const char* what = "";
};

// A cublasLtMatrixLayout.
struct MatrixShape {
  int32_t dtype = CUDA_R_32F;  // cudaDataType_t
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;  // elements
  bool operator==(const MatrixShape&) const = default;
};

// A cublasLtMatmulDesc's attributes.
struct MatmulSpec {
  int32_t compute_type = CUBLAS_COMPUTE_32F;
  int32_t scale_type = CUDA_R_32F;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;
  int32_t bias_dtype = -1;  // -1: the default (D's, or C's for a gradient)
  int64_t bias_batch_stride = 0;
  void* aux = nullptr;
  int64_t aux_ld = 0;
  int64_t aux_batch_stride = 0;
  int32_t aux_dtype = -1;  // -1: D's
  // The first attribute set that the emulator does not model, for the refusal.
  std::string unmodeled;
};

struct Verdict {
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  std::string reason;  // one line naming the attribute and the values
  bool ok() const { return status == CUBLAS_STATUS_SUCCESS; }
};

// Note [emulated cuBLASLt rules].
Verdict CheckMatmul(const MatmulSpec& spec, const MatrixShape& a, const MatrixShape& b,
                    const MatrixShape& c, const MatrixShape& d);
// The rules on alpha (a bias gradient with alpha != 1 is not modelled).
Verdict CheckScalars(const MatmulSpec& spec, float alpha);
// The in-place rule, once the pointers are known.
Verdict CheckPointers(const MatrixShape& c, const MatrixShape& d, const void* C, const void* D);

// The bytes the matmul reads (A, B, C when beta != 0, the bias it adds, the
// aux DGELU reads) and writes (D, GELU's aux, a bias gradient).
std::vector<ByteRange> ReadRanges(const MatmulSpec& spec, const MatrixShape& a,
                                  const MatrixShape& b, const MatrixShape& c, const MatrixShape& d,
                                  const void* A, const void* B, const void* C, float beta);
std::vector<ByteRange> WriteRanges(const MatmulSpec& spec, const MatrixShape& a,
                                   const MatrixShape& b, const MatrixShape& d, void* D);

// D = epilogue(alpha op(A) op(B) + beta C) in f32 (OpenBLAS sgemm), rounded
// to D's type; a checked (CheckMatmul) matmul only.
void RunMatmul(const MatmulSpec& spec, const MatrixShape& a, const MatrixShape& b,
               const MatrixShape& c, const MatrixShape& d, float alpha, float beta, const void* A,
               const void* B, const void* C, void* D);

// "CUDA_R_16BF"; "CUBLASLT_EPILOGUE_GELU_BIAS".
std::string DataTypeName(int32_t dtype);
std::string EpilogueName(uint32_t epilogue);

}  // namespace gptc::rt::emu

#endif  // GPTC_RUNTIME_EMU_GEMM_SEMANTICS_H_
