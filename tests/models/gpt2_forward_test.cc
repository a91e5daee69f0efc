// The traced GPT-2 forward, run by the reference evaluator in f64, against an
// independent forward written here with plain loops (never through the IR),
// on the same random weights and the real 50,257 / 50,304 vocabulary.
//
// The reference rounds the model's constants (GELU's, layer-norm eps, the
// attention scale) to f32 as the IR stores them, so the two agree to
// summation order; the bar is 1e-5 relative on the loss.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numbers>
#include <random>

#include "compiler/eval/evaluator.h"
#include "models/gpt2.h"

namespace gptc::models {
namespace {

using program::InitRule;
using program::ParamSpec;
using frontend::Tensor;
using frontend::TracedModule;
using frontend::Tracer;

double F32(double x) { return static_cast<float>(x); }

// Random weights in the spirit of each init rule but larger, so every part
// of the model moves the result: gains near 1, biases near 0, matrices with
// 10x the GPT-2 std. Values are f32-exact, as the parameters are f32.
std::map<std::string, std::vector<double>> RandomWeights(const std::vector<ParamSpec>& specs,
                                                         uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::map<std::string, std::vector<double>> weights;
  for (const ParamSpec& p : specs) {
    std::vector<double>& w = weights[p.name];
    w.resize(p.shape.num_elements());
    for (double& v : w) {
      switch (p.init.kind) {
        case InitRule::Kind::kNormal:
          v = F32(10 * p.init.std * normal(rng));
          break;
        case InitRule::Kind::kOnes:
          v = F32(1 + 0.1 * normal(rng));
          break;
        case InitRule::Kind::kZeros:
          v = F32(0.1 * normal(rng));
          break;
      }
    }
  }
  return weights;
}

// ---- The independent forward: row-major loops in double. -----------------

class Reference {
 public:
  Reference(const GptConfig& c, const std::map<std::string, std::vector<double>>& w)
      : c_(c), w_(w) {}

  // Logits [B*T, padded_vocab] for tokens [B*T].
  std::vector<double> Logits(const std::vector<int64_t>& tokens, int64_t B, int64_t T) const {
    const int64_t C = c_.width, rows = B * T;
    std::vector<double> x(rows * C);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < C; ++i) {
        x[r * C + i] = W("wte.weight")[tokens[r] * C + i] + W("wpe.weight")[(r % T) * C + i];
      }
    }
    for (int64_t l = 0; l < c_.layers; ++l) {
      std::string h = "h." + std::to_string(l) + ".";
      std::vector<double> a = LayerNorm(x, rows, h + "ln_1");
      std::vector<double> qkv = Linear(a, rows, C, 3 * C, h + "attn.c_attn");
      std::vector<double> y = CausalAttention(qkv, B, T);
      Add(x, Linear(y, rows, C, C, h + "attn.c_proj"));
      std::vector<double> m =
          Linear(LayerNorm(x, rows, h + "ln_2"), rows, C, 4 * C, h + "mlp.c_fc");
      for (double& v : m) v = Gelu(v);
      Add(x, Linear(m, rows, 4 * C, C, h + "mlp.c_proj"));
    }
    x = LayerNorm(x, rows, "ln_f");
    // Tied output projection over every row of the (padded) token table.
    const int64_t V = c_.padded_vocab;
    std::vector<double> logits(rows * V);
    const std::vector<double>& wte = W("wte.weight");
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t v = 0; v < V; ++v) {
        double acc = 0;
        for (int64_t i = 0; i < C; ++i) acc += x[r * C + i] * wte[v * C + i];
        logits[r * V + v] = acc;
      }
    }
    return logits;
  }

  // Mean cross-entropy over the real vocabulary only.
  double Loss(const std::vector<double>& logits, const std::vector<int64_t>& targets) const {
    const int64_t V = c_.padded_vocab, rows = static_cast<int64_t>(targets.size());
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double* row = &logits[r * V];
      double m = -INFINITY, z = 0;
      for (int64_t v = 0; v < c_.vocab; ++v) m = std::max(m, row[v]);
      for (int64_t v = 0; v < c_.vocab; ++v) z += std::exp(row[v] - m);
      total += std::log(z) + m - row[targets[r]];
    }
    return total / static_cast<double>(rows);
  }

 private:
  const std::vector<double>& W(const std::string& name) const { return w_.at(name); }

  static void Add(std::vector<double>& x, const std::vector<double>& y) {
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }

  static double Gelu(double x) {
    const double k = F32(std::sqrt(2.0 / std::numbers::pi)), a = F32(0.044715);
    return 0.5 * x * (1 + std::tanh(k * (x + a * x * x * x)));
  }

  std::vector<double> LayerNorm(const std::vector<double>& x, int64_t rows,
                                const std::string& name) const {
    const int64_t C = c_.width;
    const double eps = F32(1e-5);
    const std::vector<double>&g = W(name + ".weight"), &b = W(name + ".bias");
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < C; ++i) mean += x[r * C + i];
      mean /= C;
      for (int64_t i = 0; i < C; ++i) var += (x[r * C + i] - mean) * (x[r * C + i] - mean);
      var /= C;
      double inv = 1 / std::sqrt(var + eps);
      for (int64_t i = 0; i < C; ++i) y[r * C + i] = (x[r * C + i] - mean) * inv * g[i] + b[i];
    }
    return y;
  }

  // x [rows, in] @ weight [in, out] + bias [out].
  std::vector<double> Linear(const std::vector<double>& x, int64_t rows, int64_t in, int64_t out,
                             const std::string& name) const {
    const std::vector<double>&w = W(name + ".weight"), &b = W(name + ".bias");
    std::vector<double> y(rows * out);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        double acc = b[o];
        for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w[i * out + o];
        y[r * out + o] = acc;
      }
    }
    return y;
  }

  // qkv [B*T, 3C] (q, k, v side by side, heads contiguous in each) -> [B*T, C].
  std::vector<double> CausalAttention(const std::vector<double>& qkv, int64_t B, int64_t T) const {
    const int64_t C = c_.width, H = c_.heads, D = c_.head_dim();
    const double scale = F32(1 / std::sqrt(static_cast<double>(D)));
    std::vector<double> y(B * T * C, 0.0);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < T; ++i) {
          const double* q = &qkv[(b * T + i) * 3 * C + h * D];
          std::vector<double> p(i + 1);
          double m = -INFINITY, z = 0;
          for (int64_t j = 0; j <= i; ++j) {
            const double* k = &qkv[(b * T + j) * 3 * C + C + h * D];
            double s = 0;
            for (int64_t d = 0; d < D; ++d) s += q[d] * k[d];
            p[j] = s * scale;
            m = std::max(m, p[j]);
          }
          for (double& e : p) z += (e = std::exp(e - m));
          for (int64_t j = 0; j <= i; ++j) {
            const double* v = &qkv[(b * T + j) * 3 * C + 2 * C + h * D];
            for (int64_t d = 0; d < D; ++d) y[(b * T + i) * C + h * D + d] += p[j] / z * v[d];
          }
        }
      }
    }
    return y;
  }

  const GptConfig& c_;
  const std::map<std::string, std::vector<double>>& w_;
};

// ---- The comparison. -------------------------------------------------------

std::vector<int64_t> RandomTokens(int64_t n, int64_t vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  std::vector<int64_t> t(n);
  for (int64_t& v : t) v = pick(rng);
  return t;
}

eval::Literal TokenLiteral(const std::vector<int64_t>& t, int64_t B, int64_t T) {
  return {ir::Shape(ir::DType::kS32, {B, T}), std::vector<double>(t.begin(), t.end()), {}};
}

std::vector<eval::Literal> WeightLiterals(const std::vector<ParamSpec>& specs,
                                          const std::map<std::string, std::vector<double>>& w) {
  std::vector<eval::Literal> args;
  for (const ParamSpec& p : specs) args.push_back({p.shape, w.at(p.name), {}});
  return args;
}

StatusOr<eval::Literal> EvalF64(const TracedModule& t, const std::vector<eval::Literal>& args) {
  eval::EvalOptions options;
  options.precision = eval::Precision::kF64;
  return eval::Evaluate(*t.module, args, options);
}

struct Case {
  const char* name;
  ConfigOverrides overrides;
  int64_t batch, seq;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class Gpt2ForwardTest : public ::testing::TestWithParam<Case> {};

TEST_P(Gpt2ForwardTest, MatchesIndependentLoops) {
  const Case& k = GetParam();
  GptConfig config = ApplyOverrides(*FindGptConfig("gpt2-tiny"), k.overrides);
  const int64_t B = k.batch, T = k.seq;
  ASSERT_EQ(config.vocab, 50257);
  ASSERT_EQ(config.padded_vocab, 50304);

  StatusOr<TracedModule> loss_module = TraceGpt2Forward(config, B, T);
  ASSERT_TRUE(loss_module.ok()) << loss_module.status().message();
  // The logits on their own, traced on a fresh tracer with the same parameters.
  Tracer tracer("logits");
  Tensor tokens = tracer.Input("tokens", ir::Shape(ir::DType::kS32, {B, T}));
  StatusOr<TracedModule> logits_module = tracer.Finish(Gpt2Logits(tracer, config, tokens));
  ASSERT_TRUE(logits_module.ok()) << logits_module.status().message();

  std::map<std::string, std::vector<double>> weights = RandomWeights(loss_module->params, 7);
  std::mt19937_64 rng(8);
  std::vector<int64_t> tok = RandomTokens(B * T, config.vocab, rng);
  std::vector<int64_t> tgt = RandomTokens(B * T, config.vocab, rng);
  tgt[0] = config.vocab - 1;  // the last real class, next to the padding

  Reference ref(config, weights);
  std::vector<double> want_logits = ref.Logits(tok, B, T);
  double want_loss = ref.Loss(want_logits, tgt);

  std::vector<eval::Literal> args = WeightLiterals(logits_module->params, weights);
  args.push_back(TokenLiteral(tok, B, T));
  StatusOr<eval::Literal> logits = EvalF64(*logits_module, args);
  ASSERT_TRUE(logits.ok()) << logits.status().message();
  ASSERT_EQ(logits->values.size(), want_logits.size());
  double scale = 0;
  for (double v : want_logits) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < want_logits.size(); ++i) {
    ASSERT_NEAR(logits->values[i], want_logits[i], 1e-9 * scale) << "logit " << i;
  }

  args.push_back(TokenLiteral(tgt, B, T));
  StatusOr<eval::Literal> loss = EvalF64(*loss_module, args);
  ASSERT_TRUE(loss.ok()) << loss.status().message();
  ASSERT_EQ(loss->values.size(), 1u);
  EXPECT_GT(want_loss, 1.0);
  EXPECT_NEAR(loss->values[0], want_loss, 1e-5 * std::abs(want_loss))
      << "traced " << loss->values[0] << " vs loops " << want_loss;
}

INSTANTIATE_TEST_SUITE_P(
    Configs, Gpt2ForwardTest,
    ::testing::Values(Case{"narrow", {.layers = 2, .heads = 4, .width = 32}, 2, 8},
                      Case{"tiny", {}, 2, 16}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace gptc::models
