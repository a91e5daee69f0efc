// The rules the emulated cuBLASLt enforces (CheckMatmul, CheckPointers in
// runtime/emu/gemm_semantics.h), one test per rule of Note [emulated cuBLASLt
// rules]: the status cuBLASLt would return and a reason naming the attribute
// and the values.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/emu/gemm_semantics.h"

namespace gptc::rt::emu {
namespace {

// A matmul every rule accepts: bf16 inputs, f32 output, m=16 n=8 k=4.
struct Shapes {
  MatmulSpec spec;
  MatrixShape a{.dtype = CUDA_R_16BF, .rows = 16, .cols = 4, .ld = 16};
  MatrixShape b{.dtype = CUDA_R_16BF, .rows = 4, .cols = 8, .ld = 4};
  MatrixShape c{.dtype = CUDA_R_32F, .rows = 16, .cols = 8, .ld = 16};
  MatrixShape d{.dtype = CUDA_R_32F, .rows = 16, .cols = 8, .ld = 16};
  Verdict Check() const { return CheckMatmul(spec, a, b, c, d); }
};

float some_buffer[64];  // a bias or aux pointer CheckMatmul never dereferences

// The verdict has `status` and a reason holding every word of `words`.
void ExpectRefused(const Shapes& s, cublasStatus_t status, std::vector<std::string> words) {
  const Verdict v = s.Check();
  EXPECT_EQ(v.status, status) << v.reason;
  EXPECT_FALSE(v.ok());
  for (const std::string& w : words) EXPECT_NE(v.reason.find(w), std::string::npos) << v.reason;
}

TEST(CheckMatmulTest, AcceptsEveryModelledEpilogue) {
  for (uint32_t e :
       {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU,
        CUBLASLT_EPILOGUE_RELU_BIAS, CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS,
        CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU,
        CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB}) {
    Shapes s;
    s.spec.epilogue = e;
    s.spec.bias = some_buffer;
    s.spec.aux = some_buffer;
    s.spec.aux_ld = 16;
    const Verdict v = s.Check();
    EXPECT_TRUE(v.ok()) << EpilogueName(e) << ": " << v.reason;
    EXPECT_EQ(v.reason, "");
  }
}

TEST(CheckMatmulTest, RefusesAnUnmodelledAttribute) {
  Shapes s;
  s.spec.unmodeled = "CUBLASLT_MATMUL_DESC attribute 17";
  ExpectRefused(s, CUBLAS_STATUS_NOT_SUPPORTED, {"attribute 17", "not modelled"});
}

TEST(CheckMatmulTest, RefusesAnotherComputeType) {
  Shapes s;
  s.spec.compute_type = CUBLAS_COMPUTE_32F_FAST_TF32;
  ExpectRefused(s, CUBLAS_STATUS_NOT_SUPPORTED,
                {"compute type", std::to_string(CUBLAS_COMPUTE_32F_FAST_TF32)});
}

TEST(CheckMatmulTest, RefusesAnotherScaleType) {
  Shapes s;
  s.spec.scale_type = CUDA_R_16F;
  ExpectRefused(s, CUBLAS_STATUS_NOT_SUPPORTED, {"scale type CUDA_R_16F"});
}

TEST(CheckMatmulTest, RefusesDevicePointerMode) {
  Shapes s;
  s.spec.pointer_mode = CUBLASLT_POINTER_MODE_DEVICE;
  ExpectRefused(s, CUBLAS_STATUS_NOT_SUPPORTED, {"pointer mode"});
}

TEST(CheckMatmulTest, RefusesRowMajorOrder) {
  Shapes s;
  s.b.order = CUBLASLT_ORDER_ROW;
  ExpectRefused(s, CUBLAS_STATUS_NOT_SUPPORTED, {"B: order"});
}

TEST(CheckMatmulTest, RefusesAnUnmodelledMatrixType) {
  Shapes s;
  s.a.dtype = s.b.dtype = CUDA_R_8I;
  ExpectRefused(s, CUBLAS_STATUS_NOT_SUPPORTED, {"A: type CUDA_R_8I"});
}

TEST(CheckMatmulTest, RefusesLdBelowRows) {
  Shapes s;
  s.c.ld = 15;
  ExpectRefused(s, CUBLAS_STATUS_INVALID_VALUE, {"C:", "ld 15"});
}

TEST(CheckMatmulTest, RefusesUnequalBatchCounts) {
  Shapes s;
  s.a.batch_count = 2;
  s.a.batch_stride = 64;
  ExpectRefused(s, CUBLAS_STATUS_INVALID_VALUE, {"A: batch count 2", "D's is 1"});
}

TEST(CheckMatmulTest, RefusesConjugateTranspose) {
  Shapes s;
  s.spec.transa = CUBLAS_OP_C;
  ExpectRefused(s, CUBLAS_STATUS_NOT_SUPPORTED, {"TRANSA"});
}

TEST(CheckMatmulTest, RefusesMismatchedK) {
  Shapes s;
  s.spec.transb = CUBLAS_OP_T;  // op(B) is 8 x 4: k 8 against A's 4
  ExpectRefused(s, CUBLAS_STATUS_INVALID_VALUE, {"op(A) 16x4", "op(B) 8x4"});
}

TEST(CheckMatmulTest, RefusesCOfAnotherShape) {
  Shapes s;
  s.c.cols = 7;
  ExpectRefused(s, CUBLAS_STATUS_INVALID_VALUE, {"C 16x7", "D 16x8"});
}

TEST(CheckMatmulTest, RefusesMixedInputTypes) {
  Shapes s;
  s.b.dtype = CUDA_R_16F;
  ExpectRefused(s, CUBLAS_STATUS_NOT_SUPPORTED, {"A CUDA_R_16BF", "B CUDA_R_16F"});
}

TEST(CheckMatmulTest, RefusesCAndDOfDifferentTypes) {
  Shapes s;
  s.c.dtype = CUDA_R_16BF;
  ExpectRefused(s, CUBLAS_STATUS_NOT_SUPPORTED, {"C CUDA_R_16BF", "D CUDA_R_32F"});
}

TEST(CheckMatmulTest, RefusesAnOutputNarrowerThanF32Inputs) {
  Shapes s;
  s.a.dtype = s.b.dtype = CUDA_R_32F;
  s.c.dtype = s.d.dtype = CUDA_R_16BF;
  ExpectRefused(s, CUBLAS_STATUS_NOT_SUPPORTED, {"inputs CUDA_R_32F", "D CUDA_R_16BF"});
}

TEST(CheckMatmulTest, RefusesAnUnmodelledEpilogue) {
  Shapes s;
  s.spec.epilogue = CUBLASLT_EPILOGUE_DRELU;
  ExpectRefused(s, CUBLAS_STATUS_NOT_SUPPORTED, {"epilogue 136", "not modelled"});
}

TEST(CheckMatmulTest, RefusesABiasEpilogueWithoutBias) {
  for (uint32_t e : {CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_BGRADB}) {
    Shapes s;
    s.spec.epilogue = e;
    ExpectRefused(s, CUBLAS_STATUS_INVALID_VALUE, {EpilogueName(e), "BIAS_POINTER"});
  }
}

// cublasLt.h, BIAS_DATA_TYPE: "the same type as the elements of output matrix (Dtype)".
TEST(CheckMatmulTest, RefusesABiasOfAnotherTypeThanD) {
  Shapes s;
  s.c.dtype = s.d.dtype = CUDA_R_16BF;
  s.spec.epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
  s.spec.bias = some_buffer;
  s.spec.bias_dtype = CUDA_R_32F;
  ExpectRefused(s, CUBLAS_STATUS_NOT_SUPPORTED,
                {"CUBLASLT_EPILOGUE_GELU_BIAS", "bias type CUDA_R_32F", "D CUDA_R_16BF"});
  s.spec.bias_dtype = -1;  // the default is D's type
  EXPECT_TRUE(s.Check().ok());
}

// cublasLt.h, BIAS_POINTER: a bias gradient has "the same type as the output elements (Ctype)".
TEST(CheckMatmulTest, RefusesABiasGradientOfAnotherTypeThanTheOutput) {
  Shapes s;
  s.spec.epilogue = CUBLASLT_EPILOGUE_BGRADA;
  s.spec.bias = some_buffer;
  s.spec.bias_dtype = CUDA_R_16BF;
  ExpectRefused(s, CUBLAS_STATUS_NOT_SUPPORTED,
                {"CUBLASLT_EPILOGUE_BGRADA", "bias type CUDA_R_16BF", "CUDA_R_32F"});
}

TEST(CheckMatmulTest, RefusesABatchedBiasGradient) {
  Shapes s;
  for (MatrixShape* x : {&s.a, &s.b, &s.c, &s.d}) {
    x->batch_count = 2;
    x->batch_stride = 128;
  }
  EXPECT_TRUE(s.Check().ok());
  s.spec.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD;
  s.spec.bias = s.spec.aux = some_buffer;
  s.spec.aux_ld = 16;
  ExpectRefused(s, CUBLAS_STATUS_NOT_SUPPORTED, {"CUBLASLT_EPILOGUE_DGELU_BGRAD", "batched"});
}

TEST(CheckMatmulTest, RefusesAnAuxEpilogueWithoutAux) {
  for (uint32_t e : {CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_DGELU}) {
    Shapes s;
    s.spec.epilogue = e;
    s.spec.aux_ld = 16;
    ExpectRefused(s, CUBLAS_STATUS_INVALID_VALUE, {EpilogueName(e), "EPILOGUE_AUX_POINTER"});
  }
}

// cublasLt.h, EPILOGUE_AUX_LD: "divisible by 8 and be no less than the number
// of rows in the output matrix".
TEST(CheckMatmulTest, RefusesAnAuxLdNotDivisibleBy8) {
  Shapes s;
  s.spec.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  s.spec.bias = s.spec.aux = some_buffer;
  s.spec.aux_ld = 20;
  ExpectRefused(s, CUBLAS_STATUS_INVALID_VALUE, {"EPILOGUE_AUX_LD 20"});
}

TEST(CheckMatmulTest, RefusesAnAuxLdBelowTheRowsOfD) {
  Shapes s;
  s.spec.epilogue = CUBLASLT_EPILOGUE_DGELU;
  s.spec.aux = some_buffer;
  s.spec.aux_ld = 8;
  ExpectRefused(s, CUBLAS_STATUS_INVALID_VALUE, {"EPILOGUE_AUX_LD 8", "16 rows"});
  s.spec.aux_ld = 0;  // never set
  ExpectRefused(s, CUBLAS_STATUS_INVALID_VALUE, {"EPILOGUE_AUX_LD 0"});
}

TEST(CheckMatmulTest, RefusesAnAuxOfAnotherTypeThanD) {
  Shapes s;
  s.spec.epilogue = CUBLASLT_EPILOGUE_GELU_AUX;
  s.spec.aux = some_buffer;
  s.spec.aux_ld = 16;
  s.spec.aux_dtype = CUDA_R_16BF;
  ExpectRefused(s, CUBLAS_STATUS_NOT_SUPPORTED, {"aux type CUDA_R_16BF", "D CUDA_R_32F"});
}

TEST(CheckMatmulTest, RefusesInPlaceWithDifferentLayouts) {
  Shapes s;
  float buffer[16 * 8 * 2] = {};
  EXPECT_TRUE(CheckPointers(s.c, s.d, buffer, buffer).ok());
  EXPECT_TRUE(CheckPointers(s.c, s.d, buffer, buffer + 1).ok());  // not in place
  s.c.ld = 32;
  const Verdict v = CheckPointers(s.c, s.d, buffer, buffer);
  EXPECT_EQ(v.status, CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(v.reason.find("C == D"), std::string::npos) << v.reason;
}

}  // namespace
}  // namespace gptc::rt::emu
