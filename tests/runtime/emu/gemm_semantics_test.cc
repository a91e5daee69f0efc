// The emulated device's cuBLASLt semantics (runtime/emu/gemm_semantics.h):
// RunMatmul against a double-precision reference written here from
// cublasLt.h's words (every epilogue, N/T, ld > rows, strided batches, beta,
// C aliasing D, f32/bf16/f16), and the exact bytes ReadRanges and WriteRanges
// name. The rules CheckMatmul enforces are gemm_rules_test.cc's.
//
// Every buffer's gaps (ld padding, batch padding, a guard at the end) hold a
// NaN with a payload: a matmul that reads one gives NaN, one that writes one
// changes its bits; C's elements are that NaN too when beta is 0.
#include "runtime/emu/gemm_semantics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/support/float_bits.h"

namespace gptc::rt::emu {
namespace {

constexpr int64_t kGuard = 8;  // poisoned elements after every buffer
constexpr uint32_t kPoison32 = 0x7fc0beef;
constexpr uint16_t kPoisonBF16 = 0x7fc5, kPoisonF16 = 0x7e05;

int64_t SizeOf(int32_t dtype) { return dtype == CUDA_R_32F ? 4 : 2; }

// A column-major matrix (a vector: cols 1) in host memory.
class Matrix {
 public:
  Matrix() = default;
  Matrix(int32_t dtype, uint64_t rows, uint64_t cols, int64_t ld, int32_t batch = 1,
         int64_t stride = 0) {
    shape_.dtype = dtype;
    shape_.rows = rows;
    shape_.cols = cols;
    shape_.ld = ld;
    shape_.batch_count = batch;
    shape_.batch_stride = stride;
    const int64_t elements = (batch - 1) * stride + ld * static_cast<int64_t>(cols) + kGuard;
    bytes_.resize(elements * SizeOf(dtype));
    for (int64_t e = 0; e < elements; ++e) Poison(e);
  }

  const MatrixShape& shape() const { return shape_; }
  void* data() { return bytes_.data(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

  int64_t Index(int32_t b, uint64_t i, uint64_t j) const {
    return b * shape_.batch_stride + static_cast<int64_t>(j) * shape_.ld + static_cast<int64_t>(i);
  }
  double Get(int32_t b, uint64_t i, uint64_t j) const { return Load(Index(b, i, j)); }
  // Stores v rounded to the matrix's type.
  void Set(int32_t b, uint64_t i, uint64_t j, double v) {
    const float f = static_cast<float>(v);
    const int64_t e = Index(b, i, j);
    if (shape_.dtype == CUDA_R_32F) {
      std::memcpy(&bytes_[e * 4], &f, 4);
      return;
    }
    const uint16_t h = shape_.dtype == CUDA_R_16BF ? F32ToBF16Bits(f) : F32ToF16Bits(f);
    std::memcpy(&bytes_[e * 2], &h, 2);
  }
  void Fill(std::mt19937& rng, double lo, double hi) {
    std::uniform_real_distribution<double> dist(lo, hi);
    ForEach([&](int32_t b, uint64_t i, uint64_t j) { Set(b, i, j, dist(rng)); });
  }
  // Poisons the matrix's own elements too (an output, or a C never read).
  void PoisonAll() {
    for (size_t e = 0; e < bytes_.size() / SizeOf(shape_.dtype); ++e) Poison(e);
  }

  template <typename F>
  void ForEach(F f) const {
    for (int32_t b = 0; b < shape_.batch_count; ++b) {
      for (uint64_t j = 0; j < shape_.cols; ++j) {
        for (uint64_t i = 0; i < shape_.rows; ++i) f(b, i, j);
      }
    }
  }

  // The elements outside the matrix that no longer hold the poison.
  int64_t TouchedGaps() const {
    std::vector<bool> inside(bytes_.size() / SizeOf(shape_.dtype), false);
    ForEach([&](int32_t b, uint64_t i, uint64_t j) { inside[Index(b, i, j)] = true; });
    int64_t touched = 0;
    for (size_t e = 0; e < inside.size(); ++e) {
      if (!inside[e] && !IsPoison(e)) ++touched;
    }
    return touched;
  }

 private:
  double Load(int64_t e) const {
    if (shape_.dtype == CUDA_R_32F) {
      float f;
      std::memcpy(&f, &bytes_[e * 4], 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, &bytes_[e * 2], 2);
    return shape_.dtype == CUDA_R_16BF ? BF16BitsToF32(h) : F16BitsToF32(h);
  }
  // A quiet NaN with a payload no arithmetic produces.
  void Poison(int64_t e) {
    const int64_t size = SizeOf(shape_.dtype);
    if (size == 4) {
      const uint32_t bits = kPoison32;
      std::memcpy(&bytes_[e * 4], &bits, 4);
    } else {
      const uint16_t bits = shape_.dtype == CUDA_R_16BF ? kPoisonBF16 : kPoisonF16;
      std::memcpy(&bytes_[e * 2], &bits, 2);
    }
  }
  bool IsPoison(int64_t e) const {
    if (SizeOf(shape_.dtype) == 4) {
      uint32_t bits;
      std::memcpy(&bits, &bytes_[e * 4], 4);
      return bits == kPoison32;
    }
    uint16_t bits;
    std::memcpy(&bits, &bytes_[e * 2], 2);
    return bits == (shape_.dtype == CUDA_R_16BF ? kPoisonBF16 : kPoisonF16);
  }

  MatrixShape shape_;
  std::vector<uint8_t> bytes_;
};

// What each epilogue does, from the comments of cublasLtEpilogue_t (written
// here, not taken from the emulator).
struct EpilogueTraits {
  bool adds_bias = false;   // *_BIAS: bias[i] added before the activation
  bool gelu = false;        // GELU*: x := GELU(x)
  bool relu = false;        // RELU*: x := max(x, 0)
  bool writes_aux = false;  // GELU_AUX*: the GELU input to aux
  bool dgelu = false;       // DGELU*: x := x * GELU'(aux)
  bool bgrad_d = false;     // DGELU_BGRAD: bias[i] = sum_j D[i, j]
  bool bgrad_a = false;     // BGRADA: bias[i] = sum_k op(A)[i, k]
  bool bgrad_b = false;     // BGRADB: bias[j] = sum_k op(B)[k, j]
  bool bias() const { return adds_bias || bgrad_d || bgrad_a || bgrad_b; }
  bool aux() const { return writes_aux || dgelu; }
};

EpilogueTraits Traits(uint32_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_BIAS:
      return {.adds_bias = true};
    case CUBLASLT_EPILOGUE_RELU:
      return {.relu = true};
    case CUBLASLT_EPILOGUE_RELU_BIAS:
      return {.adds_bias = true, .relu = true};
    case CUBLASLT_EPILOGUE_GELU:
      return {.gelu = true};
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      return {.adds_bias = true, .gelu = true};
    case CUBLASLT_EPILOGUE_GELU_AUX:
      return {.gelu = true, .writes_aux = true};
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      return {.adds_bias = true, .gelu = true, .writes_aux = true};
    case CUBLASLT_EPILOGUE_DGELU:
      return {.dgelu = true};
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
      return {.dgelu = true, .bgrad_d = true};
    case CUBLASLT_EPILOGUE_BGRADA:
      return {.bgrad_a = true};
    case CUBLASLT_EPILOGUE_BGRADB:
      return {.bgrad_b = true};
    default:
      return {};
  }
}

// GELU, tanh approximation, and its derivative, in double.
double Gelu(double x) {
  const double s = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}
double GeluGrad(double x) {
  const double s = std::sqrt(2.0 / std::numbers::pi);
  const double t = std::tanh(s * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

// One matmul's buffers, built for the spec's epilogue.
struct Problem {
  MatmulSpec spec;
  Matrix a, b, c, d, bias, aux;
  float alpha = 1, beta = 0;
  bool in_place = false;  // C is D's memory
  uint64_t m = 0, n = 0, k = 0;

  const void* CPtr() { return in_place ? d.data() : c.data(); }
  void Run() {
    RunMatmul(spec, a.shape(), b.shape(), c.shape(), d.shape(), alpha, beta, a.data(), b.data(),
              CPtr(), d.data());
  }
};

struct ProblemOptions {
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  int32_t in_type = CUDA_R_32F, out_type = CUDA_R_32F;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint64_t m = 12, n = 5, k = 7;
  int32_t batch = 1;
  int64_t pad = 3;  // ld = rows + pad; batches `pad` columns apart
  float alpha = 0.75f, beta = 0;
  bool in_place = false;
  uint32_t seed = 1;
};

Problem MakeProblem(const ProblemOptions& o) {
  std::mt19937 rng(o.seed);
  Problem p;
  p.m = o.m, p.n = o.n, p.k = o.k;
  p.alpha = o.alpha, p.beta = o.beta;
  p.in_place = o.in_place;
  auto matrix = [&](int32_t dtype, uint64_t rows, uint64_t cols) {
    const int64_t ld = static_cast<int64_t>(rows) + o.pad;
    return Matrix(dtype, rows, cols, ld, o.batch, ld * static_cast<int64_t>(cols + o.pad));
  };
  const bool ta = o.transa == CUBLAS_OP_T, tb = o.transb == CUBLAS_OP_T;
  p.a = matrix(o.in_type, ta ? o.k : o.m, ta ? o.m : o.k);
  p.b = matrix(o.in_type, tb ? o.n : o.k, tb ? o.k : o.n);
  p.c = matrix(o.out_type, o.m, o.n);
  p.d = matrix(o.out_type, o.m, o.n);
  p.a.Fill(rng, -1, 1);
  p.b.Fill(rng, -1, 1);
  if (o.beta != 0) p.c.Fill(rng, -1, 1);
  if (o.in_place) p.d = p.c;
  p.spec.transa = o.transa;
  p.spec.transb = o.transb;
  p.spec.epilogue = o.epilogue;
  const EpilogueTraits t = Traits(o.epilogue);
  if (t.bias()) {
    const uint64_t length = t.bgrad_b ? o.n : o.m;
    const int64_t stride = static_cast<int64_t>(length) + 4;
    p.bias = Matrix(o.out_type, length, 1, static_cast<int64_t>(length), o.batch, stride);
    if (t.adds_bias) p.bias.Fill(rng, -1, 1);
    p.spec.bias = p.bias.data();
    p.spec.bias_batch_stride = stride;
  }
  if (t.aux()) {
    const int64_t ld = 16;  // divisible by 8, >= m, > m (a gap)
    const int64_t stride = ld * static_cast<int64_t>(o.n) + 8;
    p.aux = Matrix(o.out_type, o.m, o.n, ld, o.batch, stride);
    if (t.dgelu) p.aux.Fill(rng, -2, 2);
    p.spec.aux = p.aux.data();
    p.spec.aux_ld = ld;
    p.spec.aux_batch_stride = stride;
  }
  return p;
}

// The reference outputs, [batch][j][i].
struct Expected {
  std::vector<double> d, aux, bias;
};

Expected Reference(const Problem& p) {
  const EpilogueTraits t = Traits(p.spec.epilogue);
  const int32_t batches = p.d.shape().batch_count;
  const bool ta = p.spec.transa == CUBLAS_OP_T, tb = p.spec.transb == CUBLAS_OP_T;
  auto op_a = [&](int32_t bt, uint64_t i, uint64_t kk) {
    return ta ? p.a.Get(bt, kk, i) : p.a.Get(bt, i, kk);
  };
  auto op_b = [&](int32_t bt, uint64_t kk, uint64_t j) {
    return tb ? p.b.Get(bt, j, kk) : p.b.Get(bt, kk, j);
  };
  Expected e;
  e.d.resize(batches * p.m * p.n);
  e.aux.resize(batches * p.m * p.n);
  const uint64_t bias_length = t.bgrad_b ? p.n : p.m;
  e.bias.resize(batches * bias_length, 0.0);
  for (int32_t bt = 0; bt < batches; ++bt) {
    for (uint64_t j = 0; j < p.n; ++j) {
      for (uint64_t i = 0; i < p.m; ++i) {
        double dot = 0;
        for (uint64_t kk = 0; kk < p.k; ++kk) dot += op_a(bt, i, kk) * op_b(bt, kk, j);
        double x = p.alpha * dot;
        if (p.beta != 0) x += p.beta * p.c.Get(bt, i, j);
        if (t.adds_bias) x += p.bias.Get(bt, i, 0);
        const size_t at = (bt * p.n + j) * p.m + i;
        e.aux[at] = x;
        if (t.gelu) x = Gelu(x);
        if (t.relu) x = std::max(x, 0.0);
        if (t.dgelu) x *= GeluGrad(p.aux.Get(bt, i, j));
        e.d[at] = x;
        if (t.bgrad_d) e.bias[bt * bias_length + i] += x;
      }
    }
    for (uint64_t kk = 0; kk < p.k; ++kk) {
      if (t.bgrad_a) {
        for (uint64_t i = 0; i < p.m; ++i) e.bias[bt * bias_length + i] += op_a(bt, i, kk);
      }
      if (t.bgrad_b) {
        for (uint64_t j = 0; j < p.n; ++j) e.bias[bt * bias_length + j] += op_b(bt, kk, j);
      }
    }
  }
  return e;
}

// f32 accumulation error, or the output format's rounding.
bool Close(double got, double want, int32_t dtype) {
  const double rel = dtype == CUDA_R_32F ? 1e-5 : 1e-2;
  return std::abs(got - want) <= rel * (std::abs(want) + 0.1);
}

// Runs the problem and compares every output with the reference, and every
// gap of every buffer with its poison.
void RunAndCompare(Problem& p) {
  const Problem before = p;
  const Expected want = Reference(before);
  p.Run();
  const EpilogueTraits t = Traits(p.spec.epilogue);
  const int32_t type = p.d.shape().dtype;
  int bad = 0;  // the first few mismatches are reported
  auto expect_close = [&](const char* what, int32_t b, uint64_t i, uint64_t j, double got,
                          double w) {
    if (Close(got, w, type) || bad++ >= 5) return;
    ADD_FAILURE() << what << "[" << b << "](" << i << ", " << j << ") = " << got << ", want " << w;
  };
  p.d.ForEach([&](int32_t b, uint64_t i, uint64_t j) {
    expect_close("D", b, i, j, p.d.Get(b, i, j), want.d[(b * p.n + j) * p.m + i]);
  });
  if (t.writes_aux) {
    p.aux.ForEach([&](int32_t b, uint64_t i, uint64_t j) {
      expect_close("aux", b, i, j, p.aux.Get(b, i, j), want.aux[(b * p.n + j) * p.m + i]);
    });
  } else if (t.aux()) {
    EXPECT_EQ(p.aux.bytes(), before.aux.bytes()) << "DGELU wrote its aux input";
  }
  if (t.bgrad_d || t.bgrad_a || t.bgrad_b) {
    const uint64_t length = p.bias.shape().rows;
    p.bias.ForEach([&](int32_t b, uint64_t i, uint64_t) {
      expect_close("bias gradient", b, i, 0, p.bias.Get(b, i, 0), want.bias[b * length + i]);
    });
  } else if (t.bias()) {
    EXPECT_EQ(p.bias.bytes(), before.bias.bytes()) << "the epilogue wrote its bias input";
  }
  EXPECT_EQ(p.a.bytes(), before.a.bytes()) << "A was written";
  EXPECT_EQ(p.b.bytes(), before.b.bytes()) << "B was written";
  if (!p.in_place) {
    EXPECT_EQ(p.c.bytes(), before.c.bytes()) << "C was written";
  }
  EXPECT_EQ(p.d.TouchedGaps(), 0) << "writes outside D";
  if (t.aux()) {
    EXPECT_EQ(p.aux.TouchedGaps(), 0) << "writes outside aux";
  }
  if (t.bias()) {
    EXPECT_EQ(p.bias.TouchedGaps(), 0) << "writes outside the bias";
  }
}

// --- RunMatmul against the reference -------------------------------------

struct SweepCase {
  uint32_t epilogue;
  int32_t in_type, out_type;
  int32_t transa, transb;
  float beta;
};
// ctest shows the name, not the bytes.
void PrintTo(const SweepCase& s, std::ostream* os) {
  *os << EpilogueName(s.epilogue) << " beta " << s.beta;
}

class MatmulSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(MatmulSweep, MatchesReference) {
  const SweepCase& s = GetParam();
  ProblemOptions o;
  o.epilogue = s.epilogue;
  o.in_type = s.in_type;
  o.out_type = s.out_type;
  o.transa = s.transa;
  o.transb = s.transb;
  o.beta = s.beta;
  // The scaling of BGRADA/BGRADB's sums by alpha is not documented.
  if (s.epilogue == CUBLASLT_EPILOGUE_BGRADA || s.epilogue == CUBLASLT_EPILOGUE_BGRADB) o.alpha = 1;
  Problem p = MakeProblem(o);
  ASSERT_TRUE(CheckMatmul(p.spec, p.a.shape(), p.b.shape(), p.c.shape(), p.d.shape()).ok());
  RunAndCompare(p);
}

std::vector<SweepCase> SweepCases() {
  std::vector<SweepCase> out;
  for (uint32_t e :
       {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU,
        CUBLASLT_EPILOGUE_RELU_BIAS, CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS,
        CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU,
        CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB}) {
    for (auto [in, out_type] : {std::pair{CUDA_R_32F, CUDA_R_32F},
                                {CUDA_R_16BF, CUDA_R_16BF},
                                {CUDA_R_16BF, CUDA_R_32F},
                                {CUDA_R_16F, CUDA_R_16F}}) {
      for (int32_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
        for (int32_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
          for (float beta : {0.0f, 1.0f}) out.push_back({e, in, out_type, ta, tb, beta});
        }
      }
    }
  }
  return out;
}

std::string SweepName(const ::testing::TestParamInfo<SweepCase>& info) {
  const SweepCase& s = info.param;
  auto type = [](int32_t t) { return t == CUDA_R_32F ? "f32" : t == CUDA_R_16BF ? "bf16" : "f16"; };
  std::string e = EpilogueName(s.epilogue).substr(std::string("CUBLASLT_EPILOGUE_").size());
  return e + "_" + type(s.in_type) + "_" + type(s.out_type) + "_" +
         (s.transa == CUBLAS_OP_T ? "T" : "N") + (s.transb == CUBLAS_OP_T ? "T" : "N") +
         (s.beta != 0 ? "_beta1" : "_beta0");
}

INSTANTIATE_TEST_SUITE_P(Epilogues, MatmulSweep, ::testing::ValuesIn(SweepCases()), SweepName);

// Strided batches: every operand, the bias and the aux batch-strided, with
// gaps between the batches.
TEST(RunMatmulTest, StridedBatches) {
  for (uint32_t e :
       {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU}) {
    SCOPED_TRACE(EpilogueName(e));
    ProblemOptions o;
    o.epilogue = e;
    o.in_type = o.out_type = CUDA_R_16BF;
    o.transa = CUBLAS_OP_T;
    o.batch = 3;
    o.beta = -0.5f;  // a beta other than 0 and 1
    Problem p = MakeProblem(o);
    ASSERT_TRUE(CheckMatmul(p.spec, p.a.shape(), p.b.shape(), p.c.shape(), p.d.shape()).ok());
    RunAndCompare(p);
  }
}

// A batch stride of 0 for the bias: one bias for every batch.
TEST(RunMatmulTest, BatchedBiasWithStrideZero) {
  ProblemOptions o;
  o.epilogue = CUBLASLT_EPILOGUE_BIAS;
  o.batch = 2;
  Problem p = MakeProblem(o);
  p.spec.bias_batch_stride = 0;
  // What stride 0 means: batch 1 adds batch 0's bias.
  Problem shared = p;
  shared.bias.ForEach([&](int32_t b, uint64_t i, uint64_t) {
    if (b == 1) shared.bias.Set(1, i, 0, shared.bias.Get(0, i, 0));
  });
  const Expected want = Reference(shared);
  ASSERT_NE(want.d, Reference(p).d);  // batch 1's own bias differs
  p.Run();
  p.d.ForEach([&](int32_t b, uint64_t i, uint64_t j) {
    EXPECT_TRUE(Close(p.d.Get(b, i, j), want.d[(b * p.n + j) * p.m + i], CUDA_R_32F))
        << "D[" << b << "](" << i << ", " << j << ")";
  });
}

// C may be D (cuBLASLt requires the same layout): C is read before D is written.
TEST(RunMatmulTest, CAliasesD) {
  for (uint32_t e : {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_GELU_BIAS}) {
    SCOPED_TRACE(EpilogueName(e));
    ProblemOptions o;
    o.epilogue = e;
    o.beta = 1;
    o.in_place = true;
    o.batch = 2;
    Problem p = MakeProblem(o);  // D's memory holds C's values
    ASSERT_TRUE(CheckPointers(p.c.shape(), p.d.shape(), p.d.data(), p.d.data()).ok());
    RunAndCompare(p);
  }
}

// The tanh approximation, against its value at 1 (not the erf GELU's 0.8413447).
TEST(RunMatmulTest, GeluIsTheTanhApproximation) {
  float a = 1, b = 1, c = 0, d = 0;
  MatrixShape one{.dtype = CUDA_R_32F, .rows = 1, .cols = 1, .ld = 1};
  MatmulSpec spec;
  spec.epilogue = CUBLASLT_EPILOGUE_GELU;
  RunMatmul(spec, one, one, one, one, 1, 0, &a, &b, &c, &d);
  EXPECT_NEAR(d, 0.8411919906, 1e-6);
}

// Round to nearest even into bf16: 1 + 2^-8 is a tie between 1 and 1 + 2^-7.
TEST(RunMatmulTest, RoundsToNearestEven) {
  float a[2] = {1.0f, 1.0f / 256}, b[2] = {1, 1};
  uint16_t d = 0, c = 0;
  MatrixShape ma{.dtype = CUDA_R_32F, .rows = 1, .cols = 2, .ld = 1};
  MatrixShape mb{.dtype = CUDA_R_32F, .rows = 2, .cols = 1, .ld = 2};
  MatrixShape md{.dtype = CUDA_R_32F, .rows = 1, .cols = 1, .ld = 1};
  float out = 0, unused = 0;
  RunMatmul(MatmulSpec{}, ma, mb, md, md, 1, 0, a, b, &unused, &out);
  EXPECT_EQ(out, 1.0f + 1.0f / 256);
  // bf16 output with bf16 inputs: 1 + 2^-8 rounds to 1 (even), 1 + 3*2^-8 to 1 + 2^-6.
  uint16_t ha[2] = {F32ToBF16Bits(1.0f), F32ToBF16Bits(1.0f / 256)};
  uint16_t hb[2] = {F32ToBF16Bits(1.0f), F32ToBF16Bits(1.0f)};
  ma.dtype = mb.dtype = md.dtype = CUDA_R_16BF;
  RunMatmul(MatmulSpec{}, ma, mb, md, md, 1, 0, ha, hb, &c, &d);
  EXPECT_EQ(BF16BitsToF32(d), 1.0f);
  ha[1] = F32ToBF16Bits(3.0f / 256);
  RunMatmul(MatmulSpec{}, ma, mb, md, md, 1, 0, ha, hb, &c, &d);
  EXPECT_EQ(BF16BitsToF32(d), 1.0f + 1.0f / 64);
}

// --- ReadRanges / WriteRanges ---------------------------------------------------

// Byte offsets from `base` and lengths, for comparison.
std::vector<std::tuple<std::string, ptrdiff_t, size_t>> Offsets(const std::vector<ByteRange>& r,
                                                                const void* base) {
  std::vector<std::tuple<std::string, ptrdiff_t, size_t>> out;
  for (const ByteRange& x : r) {
    out.emplace_back(x.what, static_cast<const char*>(x.begin) - static_cast<const char*>(base),
                     x.bytes);
  }
  return out;
}

// One arena, operands at known offsets: A bf16 3x2 ld 4 (transposed: op(A) is
// 2x3), B bf16 3x2 ld 3, C and D f32 2x2 ld 5 (C == D), bias f32, aux f32 ld 8.
TEST(RangesTest, ExactBytesOfOneMatmul) {
  alignas(16) static char arena[4096];
  const char* A = arena;
  const char* B = arena + 100;
  char* D = arena + 200;
  float* bias = reinterpret_cast<float*>(arena + 400);
  float* aux = reinterpret_cast<float*>(arena + 600);
  MatmulSpec s;
  s.transa = CUBLAS_OP_T;
  s.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  s.bias = bias;
  s.aux = aux;
  s.aux_ld = 8;
  const MatrixShape a{.dtype = CUDA_R_16BF, .rows = 3, .cols = 2, .ld = 4};
  const MatrixShape b{.dtype = CUDA_R_16BF, .rows = 3, .cols = 2, .ld = 3};
  const MatrixShape d{.dtype = CUDA_R_32F, .rows = 2, .cols = 2, .ld = 5};
  ASSERT_TRUE(CheckMatmul(s, a, b, d, d).ok()) << CheckMatmul(s, a, b, d, d).reason;
  using R = std::vector<std::tuple<std::string, ptrdiff_t, size_t>>;
  EXPECT_EQ(Offsets(ReadRanges(s, a, b, d, d, A, B, D, 1.0f), arena), (R{{"A", 0, 6},
                                                                         {"A", 8, 6},
                                                                         {"B", 100, 6},
                                                                         {"B", 106, 6},
                                                                         {"C", 200, 8},
                                                                         {"C", 220, 8},
                                                                         {"bias", 400, 8}}));
  // beta 0: C is not read.
  EXPECT_EQ(Offsets(ReadRanges(s, a, b, d, d, A, B, D, 0.0f), arena),
            (R{{"A", 0, 6}, {"A", 8, 6}, {"B", 100, 6}, {"B", 106, 6}, {"bias", 400, 8}}));
  EXPECT_EQ(Offsets(WriteRanges(s, a, b, d, D), arena),
            (R{{"D", 200, 8}, {"D", 220, 8}, {"aux", 600, 8}, {"aux", 632, 8}}));

  // DGELU_BGRAD reads aux and writes the bias gradient (m long).
  s.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD;
  ASSERT_TRUE(CheckMatmul(s, a, b, d, d).ok()) << CheckMatmul(s, a, b, d, d).reason;
  EXPECT_EQ(Offsets(ReadRanges(s, a, b, d, d, A, B, D, 0.0f), arena), (R{{"A", 0, 6},
                                                                         {"A", 8, 6},
                                                                         {"B", 100, 6},
                                                                         {"B", 106, 6},
                                                                         {"aux", 600, 8},
                                                                         {"aux", 632, 8}}));
  EXPECT_EQ(Offsets(WriteRanges(s, a, b, d, D), arena),
            (R{{"D", 200, 8}, {"D", 220, 8}, {"bias", 400, 8}}));
}

// BGRADB's gradient is n long; batches repeat every operand's runs at its stride.
TEST(RangesTest, BiasGradientLengthAndBatches) {
  alignas(16) static char arena[8192];
  const MatrixShape a{.dtype = CUDA_R_32F, .rows = 4, .cols = 2, .ld = 4};
  const MatrixShape b{.dtype = CUDA_R_32F, .rows = 2, .cols = 3, .ld = 2};
  const MatrixShape d{.dtype = CUDA_R_32F, .rows = 4, .cols = 3, .ld = 4};
  MatmulSpec s;
  s.epilogue = CUBLASLT_EPILOGUE_BGRADB;
  s.bias = arena + 4000;
  using R = std::vector<std::tuple<std::string, ptrdiff_t, size_t>>;
  EXPECT_EQ(Offsets(WriteRanges(s, a, b, d, arena + 1000), arena),
            (R{{"D", 1000, 16}, {"D", 1016, 16}, {"D", 1032, 16}, {"bias", 4000, 12}}));

  MatrixShape ab = a, bb = b, db = d;
  ab.batch_count = bb.batch_count = db.batch_count = 2;
  ab.batch_stride = 10;  // elements
  bb.batch_stride = 6;
  db.batch_stride = 100;
  s.epilogue = CUBLASLT_EPILOGUE_BIAS;
  s.bias_batch_stride = 8;
  ASSERT_TRUE(CheckMatmul(s, ab, bb, db, db).ok());
  EXPECT_EQ(Offsets(ReadRanges(s, ab, bb, db, db, arena, arena + 200, arena + 1000, 0.0f), arena),
            (R{{"A", 0, 16},
               {"A", 16, 16},
               {"A", 40, 16},
               {"A", 56, 16},
               {"B", 200, 8},
               {"B", 208, 8},
               {"B", 216, 8},
               {"B", 224, 8},
               {"B", 232, 8},
               {"B", 240, 8},
               {"bias", 4000, 16},
               {"bias", 4032, 16}}));
  const auto writes = Offsets(WriteRanges(s, ab, bb, db, arena + 1000), arena);
  ASSERT_EQ(writes.size(), 6u);
  EXPECT_EQ(writes[3], (std::tuple<std::string, ptrdiff_t, size_t>{"D", 1400, 16}));
}

}  // namespace
}  // namespace gptc::rt::emu
