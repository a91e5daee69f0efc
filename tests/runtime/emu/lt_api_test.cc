// The emulated cuBLASLt API (runtime/emu/lt_api.h): driven by the GPU
// runtime's own GemmRunner (runtime/gpu/gemm.cc) and through the raw
// cublasLt* calls, it computes what RunMatmul computes (whose arithmetic
// gemm_semantics_test.cc checks); it checks attribute sizes, refuses what
// CheckMatmul refuses (no algorithm, the reason kept), re-checks everything
// at cublasLtMatmul, and hands the work to the executor.
#include "runtime/emu/lt_api.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compiler/support/float_bits.h"
#include "runtime/gpu/gemm.h"

namespace gptc::rt::emu {
namespace {

using Bytes = std::vector<uint8_t>;

// GELU, tanh approximation.
double Gelu(double x) {
  const double s = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1 + std::tanh(s * (x + 0.044715 * x * x * x)));
}

size_t SizeOf(int32_t dtype) { return dtype == CUDA_R_32F ? 4 : 2; }

// `count` elements of `dtype` uniform in [-1, 1], as bytes.
Bytes Random(int32_t dtype, size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1, 1);
  Bytes out(count * SizeOf(dtype));
  for (size_t e = 0; e < count; ++e) {
    const float f = dist(rng);
    if (dtype == CUDA_R_32F) {
      std::memcpy(&out[e * 4], &f, 4);
    } else {
      const uint16_t h = dtype == CUDA_R_16BF ? F32ToBF16Bits(f) : F32ToF16Bits(f);
      std::memcpy(&out[e * 2], &h, 2);
    }
  }
  return out;
}

constexpr program::GemmDType kBF16 = program::GemmDType::kBF16;

gpu::GemmLayout Layout(program::GemmDType dtype, int64_t rows, int64_t cols, int64_t ld,
                       int64_t batch = 1, int64_t stride = 0) {
  return gpu::GemmLayout{.dtype = dtype,
                         .rows = rows,
                         .cols = cols,
                         .ld = ld,
                         .batch_count = batch,
                         .batch_stride = stride};
}

MatrixShape Shape(const gpu::GemmLayout& l) {
  return MatrixShape{.dtype = gpu::CudaDataType(l.dtype),
                     .rows = static_cast<uint64_t>(l.rows),
                     .cols = static_cast<uint64_t>(l.cols),
                     .ld = l.ld,
                     .batch_count = static_cast<int32_t>(l.batch_count),
                     .batch_stride = l.batch_stride};
}

size_t Elements(const gpu::GemmLayout& l) {
  return static_cast<size_t>((l.batch_count - 1) * l.batch_stride + l.ld * l.cols);
}

// One gemm's host buffers (the emulated device's memory is host memory).
struct Buffers {
  Bytes a, b, d, bias, aux;
};

Buffers MakeBuffers(const gpu::GemmConfig& c, size_t bias_elements, int64_t aux_batches,
                    uint32_t seed) {
  std::mt19937 rng(seed);
  Buffers out;
  out.a = Random(gpu::CudaDataType(c.a.dtype), Elements(c.a), rng);
  out.b = Random(gpu::CudaDataType(c.b.dtype), Elements(c.b), rng);
  out.d =
      Random(gpu::CudaDataType(c.d.dtype), Elements(c.d), rng);  // C is D (beta 1) in these tests
  const int32_t bias_type = gpu::CudaDataType(c.bias_dtype.value_or(c.d.dtype));
  out.bias = Random(bias_type, bias_elements, rng);
  out.aux =
      Random(gpu::CudaDataType(c.d.dtype), static_cast<size_t>(c.aux_ld * c.n * aux_batches), rng);
  return out;
}

// Runs `config` through gpu::GemmRunner on the emulated API, and the same
// matmul through RunMatmul on copies of the buffers: the bytes must agree.
void ExpectRunnerMatchesSemantics(const gpu::GemmConfig& config, size_t bias_elements) {
  const gpu::CublasLtApi lt = EmulatedCublasLt(nullptr);
  Buffers via_api = MakeBuffers(config, bias_elements, config.batch_count, 7);
  Buffers direct = via_api;
  cublasLtHandle_t handle = nullptr;
  ASSERT_EQ(lt.Create(&handle), CUBLAS_STATUS_SUCCESS);
  gpu::GemmPointers p{
      .a = via_api.a.data(), .b = via_api.b.data(), .c = via_api.d.data(), .d = via_api.d.data()};
  if (program::ReadsBias(config.epilogue) || program::WritesBias(config.epilogue)) {
    p.bias = via_api.bias.data();
  }
  if (program::WritesAux(config.epilogue) || program::ReadsAux(config.epilogue)) {
    p.aux = via_api.aux.data();
  }
  p.workspace_bytes = static_cast<size_t>(config.workspace_bytes);
  auto runner = gpu::GemmRunner::Create(lt, handle, config, p, "thunk 3 (gemm test)");
  ASSERT_TRUE(runner.ok()) << runner.status().message();
  EXPECT_EQ((*runner)->workspace_needed(), 0u);
  Status run = (*runner)->Run(nullptr);
  ASSERT_TRUE(run.ok()) << run.message();

  MatmulSpec spec;
  spec.transa = gpu::CudaOperation(config.transa);
  spec.transb = gpu::CudaOperation(config.transb);
  spec.epilogue = static_cast<uint32_t>(gpu::CudaEpilogue(config.epilogue));
  spec.bias = direct.bias.data();
  spec.bias_dtype = config.bias_dtype ? gpu::CudaDataType(*config.bias_dtype) : -1;
  spec.aux = direct.aux.data();
  spec.aux_ld = config.aux_ld;
  spec.aux_batch_stride = config.batch_count > 1 ? config.aux_ld * config.n : 0;
  RunMatmul(spec, Shape(config.a), Shape(config.b), Shape(config.c), Shape(config.d),
            static_cast<float>(config.alpha), static_cast<float>(config.beta), direct.a.data(),
            direct.b.data(), direct.d.data(), direct.d.data());
  EXPECT_EQ(via_api.d, direct.d) << "D";
  EXPECT_EQ(via_api.bias, direct.bias) << "bias";
  EXPECT_EQ(via_api.aux, direct.aux) << "aux";
  EXPECT_EQ(via_api.a, direct.a);
  // The run changed D (the test would not notice a matmul that did nothing).
  EXPECT_NE(via_api.d, MakeBuffers(config, bias_elements, config.batch_count, 7).d);
  lt.Destroy(handle);
}

// A descriptor as the plan reader gives it: m=16 n=8 k=4, bf16, beta 1 (C is D).
gpu::GemmConfig Config(program::GemmEpilogue epilogue) {
  gpu::GemmConfig c;
  c.compute_type = program::GemmCompute::k32F;
  c.scale_type = program::GemmDType::kF32;
  c.transa = program::GemmOp::kT;
  c.transb = program::GemmOp::kN;
  c.m = 16, c.n = 8, c.k = 4;
  c.a = Layout(kBF16, 4, 16, 6);  // op(A) = A^T, ld > rows
  c.b = Layout(kBF16, 4, 8, 4);
  c.c = c.d = Layout(kBF16, 16, 8, 16);
  c.alpha = 0.5;
  c.beta = 1;
  c.epilogue = epilogue;
  c.workspace_bytes = 1 << 20;
  if (program::WritesAux(epilogue) || program::ReadsAux(epilogue)) c.aux_ld = 16;
  return c;
}

// --- the GPU runtime's GemmRunner on the emulated API ------------------------

TEST(LtApiTest, GemmRunnerGeluAuxBias) {
  ExpectRunnerMatchesSemantics(Config(program::GemmEpilogue::kGeluAuxBias), 16);
}

// Note [GELU epilogues]: the runtime hands DGELU its aux input (the GELU_AUX
// output of the forward), with the leading dimension of D.
TEST(LtApiTest, GemmRunnerDgeluReadsItsAux) {
  gpu::GemmConfig c = Config(program::GemmEpilogue::kDGelu);
  ExpectRunnerMatchesSemantics(c, 0);
  // Batched: aux batches follow each other as D's do.
  c.transa = program::GemmOp::kN;
  c.transb = program::GemmOp::kT;
  c.batch_count = 2;
  c.a = Layout(kBF16, 16, 4, 16, 2, 64);
  c.b = Layout(kBF16, 8, 4, 8, 2, 32);
  c.c = c.d = Layout(kBF16, 16, 8, 16, 2, 128);
  ExpectRunnerMatchesSemantics(c, 0);
}

TEST(LtApiTest, GemmRunnerBiasGradientWithBiasDataType) {
  gpu::GemmConfig c = Config(program::GemmEpilogue::kBGradB);
  c.alpha = 1;
  c.bias_dtype = kBF16;  // BIAS_DATA_TYPE set explicitly, to the output's type
  ExpectRunnerMatchesSemantics(c, 8);
}

TEST(LtApiTest, GemmRunnerBatchedWithBroadcastBias) {
  gpu::GemmConfig c = Config(program::GemmEpilogue::kBias);
  c.transa = program::GemmOp::kN;
  c.transb = program::GemmOp::kT;
  c.batch_count = 3;
  c.a = Layout(kBF16, 16, 4, 16, 3, 16 * 4 + 8);
  c.b = Layout(kBF16, 8, 4, 10, 3, 48);
  c.c = c.d = Layout(kBF16, 16, 8, 20, 3, 200);
  ExpectRunnerMatchesSemantics(c, 16);
}

// The heuristic's refusal reaches the runtime's error, naming the thunk and the reason.
TEST(LtApiTest, GemmRunnerReportsTheRefusal) {
  const gpu::CublasLtApi lt = EmulatedCublasLt(nullptr);
  gpu::GemmConfig c = Config(program::GemmEpilogue::kGeluBias);
  c.bias_dtype = program::GemmDType::kF32;  // D is bf16
  float bias[16] = {};
  uint16_t buffer[256] = {};
  cublasLtHandle_t handle = nullptr;
  ASSERT_EQ(lt.Create(&handle), CUBLAS_STATUS_SUCCESS);
  auto runner = gpu::GemmRunner::Create(
      lt, handle, c,
      gpu::GemmPointers{.a = buffer, .b = buffer, .c = buffer, .d = buffer, .bias = bias},
      "thunk 9 (gemm h.0.mlp.c_fc)");
  ASSERT_FALSE(runner.ok());
  const std::string& m = runner.status().message();
  for (const char* w : {"thunk 9 (gemm h.0.mlp.c_fc)", "cublasLtMatmulAlgoGetHeuristic",
                        "CUBLAS_STATUS_NOT_SUPPORTED", "bias type CUDA_R_32F", "D CUDA_R_16BF"}) {
    EXPECT_NE(m.find(w), std::string::npos) << w << " not in: " << m;
  }
  lt.Destroy(handle);
}

// --- the raw API ---------------------------------------------------------------

// Descriptors for D(2x3) = gelu(op(A) op(B) + bias), f32, A stored 4x2 (T).
struct Raw {
  gpu::CublasLtApi lt = EmulatedCublasLt(nullptr);
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  // A column-major 4x2, so op(A) = A^T = [[1 2 3 4] [-1 0 1 2]]; column j of B is 0.25 (j + 1).
  float A[8] = {1, 2, 3, 4, -1, 0, 1, 2};
  float B[12] = {0.25f, 0.25f, 0.25f, 0.25f, 0.5f, 0.5f, 0.5f, 0.5f, 0.75f, 0.75f, 0.75f, 0.75f};
  float bias[2] = {0.5f, -1.0f};
  float D[6] = {};

  Raw() {
    EXPECT_EQ(lt.Create(&handle), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.MatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    const int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const uint32_t epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
    const void* bias_ptr = bias;
    const int32_t bias_type = CUDA_R_32F;
    EXPECT_EQ(Set(CUBLASLT_MATMUL_DESC_TRANSA, ta), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(Set(CUBLASLT_MATMUL_DESC_TRANSB, tb), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(Set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(Set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.MatrixLayoutCreate(&a, CUDA_R_32F, 4, 2, 4), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.MatrixLayoutCreate(&b, CUDA_R_32F, 4, 3, 4), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.MatrixLayoutCreate(&c, CUDA_R_32F, 2, 3, 2), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.MatrixLayoutCreate(&d, CUDA_R_32F, 2, 3, 2), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.MatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    const uint64_t workspace = 1 << 20;
    EXPECT_EQ(lt.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &workspace, sizeof(workspace)),
              CUBLAS_STATUS_SUCCESS);
  }
  ~Raw() {
    for (cublasLtMatrixLayout_t l : {a, b, c, d}) lt.MatrixLayoutDestroy(l);
    lt.MatmulPreferenceDestroy(pref);
    lt.MatmulDescDestroy(desc);
    lt.Destroy(handle);
  }
  template <typename T>
  cublasStatus_t Set(cublasLtMatmulDescAttributes_t attr, const T& value) {
    return lt.MatmulDescSetAttribute(desc, attr, &value, sizeof(value));
  }
  cublasStatus_t Heuristic(cublasLtMatmulHeuristicResult_t* result, int* count) {
    return lt.MatmulAlgoGetHeuristic(handle, desc, a, b, c, d, pref, 1, result, count);
  }
  cublasStatus_t Matmul(const cublasLtMatmulAlgo_t* algo, const void* C, void* out) {
    const float alpha = 1, beta = 0;
    return lt.Matmul(handle, desc, &alpha, A, a, B, b, &beta, C, c, out, d, algo, nullptr, 0,
                     nullptr);
  }
  // gelu(op(A)[i, :] . op(B)[:, j] + bias[i]): row sums 10 and 2, times 0.25 (j+1).
  float Want(int i, int j) const {
    return static_cast<float>(Gelu((i == 0 ? 10.0 : 2.0) * 0.25 * (j + 1) + bias[i]));
  }
};

TEST(LtApiTest, RawCallsAsGemmCcMakesThem) {
  Raw r;
  cublasLtMatmulHeuristicResult_t result{};
  int count = -1;
  ASSERT_EQ(r.Heuristic(&result, &count), CUBLAS_STATUS_SUCCESS) << LastRefusal();
  EXPECT_EQ(count, 1);
  EXPECT_EQ(result.state, CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(result.workspaceSize, 0u);
  ASSERT_EQ(r.Matmul(&result.algo, r.D, r.D), CUBLAS_STATUS_SUCCESS) << LastRefusal();
  for (int j = 0; j < 3; ++j) {
    for (int i = 0; i < 2; ++i) EXPECT_NEAR(r.D[j * 2 + i], r.Want(i, j), 1e-5) << i << ", " << j;
  }
}

TEST(LtApiTest, BatchAttributesReachTheMatmul) {
  Raw r;
  // Two batches of B and D; A and the bias shared (stride 0).
  float B2[24], D2[12] = {};
  for (int e = 0; e < 12; ++e) B2[e] = r.B[e], B2[12 + e] = -r.B[e];
  const int32_t batches = 2;
  const int64_t zero = 0, b_stride = 12, d_stride = 6;
  for (auto [layout, stride] :
       {std::pair{r.a, zero}, {r.b, b_stride}, {r.c, d_stride}, {r.d, d_stride}}) {
    ASSERT_EQ(r.lt.MatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batches,
                                            sizeof(batches)),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(r.lt.MatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                            &stride, sizeof(stride)),
              CUBLAS_STATUS_SUCCESS);
  }
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  ASSERT_EQ(r.Heuristic(&result, &count), CUBLAS_STATUS_SUCCESS) << LastRefusal();
  const float alpha = 1, beta = 0;
  ASSERT_EQ(r.lt.Matmul(r.handle, r.desc, &alpha, r.A, r.a, B2, r.b, &beta, D2, r.c, D2, r.d,
                        &result.algo, nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS)
      << LastRefusal();
  EXPECT_NEAR(D2[0], r.Want(0, 0), 1e-5);
  EXPECT_NEAR(D2[6], Gelu(-10 * 0.25 + 0.5), 1e-5);  // batch 1: B negated
}

// cuBLASLt returns CUBLAS_STATUS_INVALID_VALUE when sizeInBytes is not the attribute's size.
TEST(LtApiTest, RefusesAnAttributeOfTheWrongSize) {
  Raw r;
  const int64_t wide = CUBLAS_OP_N;
  EXPECT_EQ(r.Set(CUBLASLT_MATMUL_DESC_TRANSA, wide), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(LastRefusal().find("TRANSA takes 4 bytes, got 8"), std::string::npos) << LastRefusal();
  // The value was not taken: A is still transposed, the matmul still valid.
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  EXPECT_EQ(r.Heuristic(&result, &count), CUBLAS_STATUS_SUCCESS) << LastRefusal();

  const int32_t narrow_ld = 8;
  EXPECT_EQ(r.Set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, narrow_ld), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(LastRefusal().find("EPILOGUE_AUX_LD"), std::string::npos) << LastRefusal();
  EXPECT_EQ(
      r.lt.MatrixLayoutSetAttribute(r.a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &wide, sizeof(wide)),
      CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(LastRefusal().find("BATCH_COUNT"), std::string::npos) << LastRefusal();
  const uint32_t workspace = 1024;
  EXPECT_EQ(r.lt.MatmulPreferenceSetAttribute(r.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &workspace, sizeof(workspace)),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(LastRefusal().find("MAX_WORKSPACE_BYTES"), std::string::npos) << LastRefusal();
}

// An attribute the emulator does not model is taken (cuBLASLt would take
// it) and the matmul refused, naming it.
TEST(LtApiTest, RefusesAMatmulWithAnUnmodelledAttribute) {
  {
    Raw r;
    const void* scale = r.bias;
    EXPECT_EQ(r.Set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scale), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t result{};
    int count = -1;
    EXPECT_EQ(r.Heuristic(&result, &count), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(count, 0);
    EXPECT_NE(LastRefusal().find("CUBLASLT_MATMUL_DESC attribute 17"), std::string::npos)
        << LastRefusal();
  }
  {
    Raw r;
    const int64_t plane = 64;
    EXPECT_EQ(r.lt.MatrixLayoutSetAttribute(r.b, CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, &plane,
                                            sizeof(plane)),
              CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t result{};
    int count = -1;
    EXPECT_EQ(r.Heuristic(&result, &count), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(count, 0);
    EXPECT_NE(LastRefusal().find("CUBLASLT_MATRIX_LAYOUT attribute 7"), std::string::npos)
        << LastRefusal();
  }
}

TEST(LtApiTest, HeuristicRefusesWhatCheckMatmulRefuses) {
  Raw r;
  const int32_t bf16 = CUDA_R_16BF;
  ASSERT_EQ(r.Set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bf16), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int count = -1;
  const cublasStatus_t status = r.Heuristic(&result, &count);
  EXPECT_EQ(status, CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(count, 0);
  const std::string why = LastRefusal();
  EXPECT_NE(why.find("bias type CUDA_R_16BF with D CUDA_R_32F"), std::string::npos) << why;
  // The status string is the reason, as GemmRunner's errors print it.
  EXPECT_EQ(std::string(r.lt.GetStatusString(status)), why);
  EXPECT_NE(r.lt.StatusText(status).find("CUBLAS_STATUS_NOT_SUPPORTED (" + why + ")"),
            std::string::npos);
}

TEST(LtApiTest, HeuristicRefusesNoRequestedAlgorithms) {
  Raw r;
  cublasLtMatmulHeuristicResult_t result{};
  int count = -1;
  EXPECT_EQ(
      r.lt.MatmulAlgoGetHeuristic(r.handle, r.desc, r.a, r.b, r.c, r.d, r.pref, 0, &result, &count),
      CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(count, 0);
}

TEST(LtApiTest, MatmulRefusesAnAlgorithmNotFromTheHeuristic) {
  Raw r;
  cublasLtMatmulAlgo_t algo{};
  EXPECT_EQ(r.Matmul(&algo, r.D, r.D), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(r.Matmul(nullptr, r.D, r.D), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(LastRefusal().find("heuristic"), std::string::npos) << LastRefusal();
  for (float v : r.D) EXPECT_EQ(v, 0.0f);
}

// Descriptors changed after the heuristic are checked again at cublasLtMatmul.
TEST(LtApiTest, MatmulChecksTheDescriptorsAgain) {
  Raw r;
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  ASSERT_EQ(r.Heuristic(&result, &count), CUBLAS_STATUS_SUCCESS) << LastRefusal();
  const void* no_bias = nullptr;
  ASSERT_EQ(r.Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, no_bias), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(r.Matmul(&result.algo, r.D, r.D), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(LastRefusal().find("BIAS_POINTER"), std::string::npos) << LastRefusal();
  const int64_t short_ld = 1;
  ASSERT_EQ(
      r.lt.MatrixLayoutSetAttribute(r.d, CUBLASLT_MATRIX_LAYOUT_LD, &short_ld, sizeof(short_ld)),
      CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(r.Matmul(&result.algo, r.D, r.D), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(LastRefusal().find("D: 2 x 3 with ld 1"), std::string::npos) << LastRefusal();
  for (float v : r.D) EXPECT_EQ(v, 0.0f);
}

// In place needs C's layout to be D's.
TEST(LtApiTest, InPlaceNeedsEqualLayouts) {
  Raw r;
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const int64_t wider = 4;
  ASSERT_EQ(r.lt.MatrixLayoutSetAttribute(r.c, CUBLASLT_MATRIX_LAYOUT_LD, &wider, sizeof(wider)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(r.Heuristic(&result, &count), CUBLAS_STATUS_SUCCESS) << LastRefusal();
  float C[12] = {};
  EXPECT_EQ(r.Matmul(&result.algo, C, r.D), CUBLAS_STATUS_SUCCESS) << LastRefusal();
  EXPECT_EQ(r.Matmul(&result.algo, r.D, r.D), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(LastRefusal().find("C == D"), std::string::npos) << LastRefusal();
}

// The executor gets the work (bytes, arithmetic, summary) and the stream,
// and its status is cublasLtMatmul's.
TEST(LtApiTest, MatmulHandsTheWorkToTheExecutor) {
  std::vector<MatmulWork> taken;
  cudaStream_t seen = nullptr;
  cublasStatus_t answer = CUBLAS_STATUS_SUCCESS;
  const MatmulExecutor executor = [&](cudaStream_t stream, MatmulWork work) {
    seen = stream;
    taken.push_back(std::move(work));
    return answer;
  };
  Raw r;
  r.lt = EmulatedCublasLt(&executor);
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  ASSERT_EQ(r.Heuristic(&result, &count), CUBLAS_STATUS_SUCCESS);
  const float alpha = 1, beta = 0;
  auto* stream = reinterpret_cast<cudaStream_t>(uintptr_t{0x5000});
  EXPECT_EQ(r.lt.Matmul(r.handle, r.desc, &alpha, r.A, r.a, r.B, r.b, &beta, r.D, r.c, r.D, r.d,
                        &result.algo, nullptr, 0, stream),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(seen, stream);
  EXPECT_EQ(r.D[0], 0.0f) << "ran before the executor ran it";
  const MatmulWork& w = taken[0];
  EXPECT_NE(w.summary.find("m=2 n=3 k=4"), std::string::npos) << w.summary;
  EXPECT_NE(w.summary.find("CUBLASLT_EPILOGUE_GELU_BIAS"), std::string::npos) << w.summary;
  // A: 2 columns of 16 bytes; B: 3 of 16; bias 8 bytes; no C (beta 0).
  ASSERT_EQ(w.reads.size(), 6u);
  EXPECT_EQ(w.reads[5].begin, r.bias);
  EXPECT_EQ(std::string(w.reads[5].what), "bias");
  ASSERT_EQ(w.writes.size(), 3u);
  EXPECT_EQ(w.writes[0].begin, r.D);
  w.run();
  EXPECT_NEAR(r.D[0], r.Want(0, 0), 1e-5);

  answer = CUBLAS_STATUS_EXECUTION_FAILED;
  EXPECT_EQ(r.Matmul(&result.algo, r.D, r.D), CUBLAS_STATUS_EXECUTION_FAILED);
}

TEST(LtApiTest, StatusNamesAndVersion) {
  const gpu::CublasLtApi lt = EmulatedCublasLt(nullptr);
  for (auto [status, name] : {std::pair{CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS"},
                              {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED"},
                              {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED"},
                              {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE"},
                              {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH"},
                              {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR"},
                              {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED"},
                              {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR"},
                              {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED"},
                              {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR"}}) {
    EXPECT_STREQ(lt.GetStatusName(status), name);
  }
  EXPECT_EQ(lt.path, "emulated cuBLASLt (runtime/emu)");
  EXPECT_EQ(lt.version, lt.GetVersion());
  EXPECT_GT(lt.version, 0u);
}

// The reason is the calling thread's.
TEST(LtApiTest, LastRefusalIsPerThread) {
  Raw r;
  cublasLtMatmulAlgo_t algo{};
  ASSERT_EQ(r.Matmul(&algo, r.D, r.D), CUBLAS_STATUS_INVALID_VALUE);
  std::string other = "unset";
  std::thread([&] { other = LastRefusal(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_NE(LastRefusal(), "");
}

}  // namespace
}  // namespace gptc::rt::emu
