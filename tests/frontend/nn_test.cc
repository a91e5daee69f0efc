// nn helpers against direct loops in double: layer_norm, gelu, linear,
// attention and softmax cross-entropy (composites evaluated through their
// decompositions, and the decompositions built directly).
#include "frontend/nn.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "compiler/eval/evaluator.h"

namespace gptc::frontend {
namespace {

using ir::DType;
using ir::Shape;

std::vector<double> RandomValues(int64_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

StatusOr<eval::Literal> Eval(const TracedModule& traced, const std::vector<eval::Literal>& args) {
  eval::EvalOptions options;
  options.precision = eval::Precision::kF64;
  return eval::Evaluate(*traced.module, args, options);
}

void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "at " << i;
  }
}

TEST(NnTest, LayerNormAndLinearMatchLoops) {
  const int64_t R = 3, C = 5, N = 4;
  Tracer tracer("t");
  Tensor x = tracer.Input("x", Shape(DType::kF32, {R, C}));
  Tensor y = LayerNorm(tracer, "ln", x);
  y = Linear(tracer, "fc", y, N, InitRule::Normal(0.02));
  StatusOr<TracedModule> traced = tracer.Finish(y);
  ASSERT_TRUE(traced.ok()) << traced.status().message();
  ASSERT_EQ(traced->params.size(), 4u);
  EXPECT_EQ(traced->params[0].name, "ln.weight");
  EXPECT_EQ(traced->params[0].init, InitRule::Ones());
  EXPECT_EQ(traced->params[3].name, "fc.bias");

  std::vector<double> g = RandomValues(C, 1), b = RandomValues(C, 2), w = RandomValues(C * N, 3),
                      bias = RandomValues(N, 4), xv = RandomValues(R * C, 5, 3.0);
  std::vector<eval::Literal> args = {{Shape(DType::kF32, {C}), g, {}},
                                     {Shape(DType::kF32, {C}), b, {}},
                                     {Shape(DType::kF32, {C, N}), w, {}},
                                     {Shape(DType::kF32, {N}), bias, {}},
                                     {Shape(DType::kF32, {R, C}), xv, {}}};
  StatusOr<eval::Literal> got = Eval(*traced, args);
  ASSERT_TRUE(got.ok()) << got.status().message();

  const double eps = static_cast<float>(1e-5);
  std::vector<double> want(R * N);
  for (int64_t r = 0; r < R; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mean += xv[r * C + c] / C;
    for (int64_t c = 0; c < C; ++c) var += (xv[r * C + c] - mean) * (xv[r * C + c] - mean) / C;
    std::vector<double> n(C);
    for (int64_t c = 0; c < C; ++c)
      n[c] = (xv[r * C + c] - mean) / std::sqrt(var + eps) * g[c] + b[c];
    for (int64_t j = 0; j < N; ++j) {
      double acc = bias[j];
      for (int64_t c = 0; c < C; ++c) acc += n[c] * w[c * N + j];
      want[r * N + j] = acc;
    }
  }
  ExpectClose(got->values, want, 1e-12);
}

TEST(NnTest, GeluIsTheTanhForm) {
  Tracer tracer("t");
  Tensor x = tracer.Input("x", Shape(DType::kF32, {7}));
  StatusOr<TracedModule> traced = tracer.Finish(Gelu(x));
  ASSERT_TRUE(traced.ok()) << traced.status().message();
  std::vector<double> xv = {-3, -1, -0.5, 0, 0.5, 1, 3};
  StatusOr<eval::Literal> got = Eval(*traced, {{Shape(DType::kF32, {7}), xv, {}}});
  ASSERT_TRUE(got.ok()) << got.status().message();
  for (size_t i = 0; i < xv.size(); ++i) {
    double x = xv[i];
    double want = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    // Constants are f32 in the IR: agreement to ~1e-7 relative.
    EXPECT_NEAR(got->values[i], want, 1e-6 * (1 + std::abs(want)));
  }
}

// softmax(scale * q k^T [+ causal mask]) v, per batch and head.
std::vector<double> AttentionLoops(const std::vector<double>& q, const std::vector<double>& k,
                                   const std::vector<double>& v, int64_t BH, int64_t T, int64_t D,
                                   bool causal, double scale) {
  std::vector<double> out(BH * T * D, 0.0);
  for (int64_t n = 0; n < BH; ++n) {
    for (int64_t i = 0; i < T; ++i) {
      int64_t last = causal ? i : T - 1;
      std::vector<double> s(last + 1);
      double m = -INFINITY;
      for (int64_t j = 0; j <= last; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += q[(n * T + i) * D + d] * k[(n * T + j) * D + d];
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      double z = 0;
      for (double& e : s) z += (e = std::exp(e - m));
      for (int64_t j = 0; j <= last; ++j) {
        for (int64_t d = 0; d < D; ++d)
          out[(n * T + i) * D + d] += s[j] / z * v[(n * T + j) * D + d];
      }
    }
  }
  return out;
}

class AttentionTest : public ::testing::TestWithParam<bool> {};

TEST_P(AttentionTest, CompositeAndDecompositionMatchLoops) {
  const bool causal = GetParam();
  const int64_t B = 2, H = 3, T = 5, D = 4;
  const double scale = 0.5;
  Shape s(DType::kF32, {B, H, T, D});
  std::vector<double> q = RandomValues(B * H * T * D, 11), k = RandomValues(B * H * T * D, 12),
                      v = RandomValues(B * H * T * D, 13);
  std::vector<double> want = AttentionLoops(q, k, v, B * H, T, D, causal, scale);
  for (bool composite : {true, false}) {
    Tracer tracer("t");
    Tensor tq = tracer.Input("q", s), tk = tracer.Input("k", s), tv = tracer.Input("v", s);
    Tensor y = composite ? Attention(tq, tk, tv, causal, scale)
                         : AttentionDecomposed(tq, tk, tv, causal, scale);
    if (composite) {
      EXPECT_EQ(y.instruction()->opcode(), ir::Opcode::kAttention);
      EXPECT_EQ(y.instruction()->attrs().causal, causal);
      EXPECT_EQ(y.instruction()->attrs().scale, scale);
    }
    StatusOr<TracedModule> traced = tracer.Finish(y);
    ASSERT_TRUE(traced.ok()) << traced.status().message();
    StatusOr<eval::Literal> got = Eval(*traced, {{s, q, {}}, {s, k, {}}, {s, v, {}}});
    ASSERT_TRUE(got.ok()) << got.status().message();
    ExpectClose(got->values, want, 1e-12);
  }
}

INSTANTIATE_TEST_SUITE_P(Causal, AttentionTest, ::testing::Bool());

TEST(NnTest, AttentionRejectsMismatchedShapes) {
  Tracer tracer("t");
  Tensor q = tracer.Input("q", Shape(DType::kF32, {1, 2, 4, 8}));
  Tensor k = tracer.Input("k", Shape(DType::kF32, {1, 2, 4, 4}));
  auto scope = tracer.Scope("h.0.attn");
  EXPECT_FALSE(Attention(q, k, k, true, 1.0).valid());
  EXPECT_EQ(tracer.error().message(),
            "h.0.attn: attention of q f32[1,2,4,8], k f32[1,2,4,4], v f32[1,2,4,4]: expected q, "
            "k, v as [batch, heads, seq, head_dim] of matching sizes");
}

TEST(NnTest, SoftmaxCrossEntropyExcludesPaddedClasses) {
  const int64_t R = 4, V = 10, real = 7;
  Shape ls(DType::kF32, {2, 2, V}), ts(DType::kS32, {2, 2});
  std::vector<double> logits = RandomValues(R * V, 21, 2.0);
  std::vector<double> targets = {0, 6, 3, 5};
  std::vector<double> want(R);
  for (int64_t r = 0; r < R; ++r) {
    double m = -INFINITY, z = 0;
    for (int64_t c = 0; c < real; ++c) m = std::max(m, logits[r * V + c]);
    for (int64_t c = 0; c < real; ++c) z += std::exp(logits[r * V + c] - m);
    want[r] = std::log(z) + m - logits[r * V + static_cast<int64_t>(targets[r])];
  }
  for (bool composite : {true, false}) {
    Tracer tracer("t");
    Tensor l = tracer.Input("logits", ls), t = tracer.Input("targets", ts);
    Tensor y =
        composite ? SoftmaxCrossEntropy(l, t, real) : SoftmaxCrossEntropyDecomposed(l, t, real);
    EXPECT_EQ(y.shape(), Shape(DType::kF32, {2, 2}));
    if (composite) {
      EXPECT_EQ(y.instruction()->attrs().num_classes, real);
    }
    StatusOr<TracedModule> traced = tracer.Finish(y);
    ASSERT_TRUE(traced.ok()) << traced.status().message();
    StatusOr<eval::Literal> got = Eval(*traced, {{ls, logits, {}}, {ts, targets, {}}});
    ASSERT_TRUE(got.ok()) << got.status().message();
    ExpectClose(got->values, want, 1e-12);
  }
}

TEST(NnTest, SoftmaxCrossEntropyRejectsBadTargets) {
  Tracer tracer("t");
  Tensor l = tracer.Input("logits", Shape(DType::kF32, {2, 10}));
  Tensor t = tracer.Input("targets", Shape(DType::kS32, {3}));
  EXPECT_FALSE(SoftmaxCrossEntropy(l, t, 10).valid());
  EXPECT_EQ(tracer.error().message(),
            "softmax-cross-entropy of logits f32[2,10] and targets s32[3]: expected float logits "
            "[..., classes] and s32 targets [...]");
}

}  // namespace
}  // namespace gptc::frontend
