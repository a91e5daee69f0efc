#include "frontend/nn.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <numbers>

namespace gptc::frontend {

using ir::CompareDirection;
using ir::DType;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The tracer of `x`, or nullptr when x carries none (then nothing can be
// built or reported, and the caller returns x as it is).
Tracer* TracerOf(const Tensor& x) { return x.valid() ? x.tracer() : nullptr; }

}  // namespace

Tensor Linear(Tracer& tracer, std::string_view name, const Tensor& x, int64_t out_features,
              const InitRule& weight_init) {
  auto scope = tracer.Scope(name);
  if (!x.valid()) return Tensor(&tracer, nullptr);
  int64_t in_features = x.dim(-1);
  Tensor weight = tracer.Parameter("weight", {in_features, out_features}, weight_init, x.dtype());
  Tensor bias = tracer.Parameter("bias", {out_features}, InitRule::Zeros(), x.dtype());
  return Matmul(x, weight) + bias;
}

Tensor LayerNorm(Tracer& tracer, std::string_view name, const Tensor& x, double eps) {
  auto scope = tracer.Scope(name);
  if (!x.valid()) return Tensor(&tracer, nullptr);
  int64_t width = x.dim(-1);
  Tensor weight = tracer.Parameter("weight", {width}, InitRule::Ones(), x.dtype());
  Tensor bias = tracer.Parameter("bias", {width}, InitRule::Zeros(), x.dtype());
  Tensor centered = x - x.Mean({-1}, /*keep_dims=*/true);
  Tensor inv_std = Rsqrt((centered * centered).Mean({-1}) + eps);  // (...), one per row
  return centered * inv_std.ExpandDims(-1) * weight + bias;
}

Tensor Gelu(const Tensor& x) {
  Tracer* tracer = TracerOf(x);
  if (tracer == nullptr) return x;
  auto scope = tracer->Scope("gelu");
  const double k = std::sqrt(2.0 / std::numbers::pi);
  Tensor inner = k * (x + 0.044715 * (x * x * x));
  return 0.5 * x * (1.0 + Tanh(inner));
}

Tensor Softmax(const Tensor& x, int64_t axis) {
  Tensor e = Exp(x - x.Max({axis}, /*keep_dims=*/true));
  return e / e.Sum({axis}, /*keep_dims=*/true);
}

Tensor Embedding(const Tensor& table, const Tensor& indices) { return Take(table, indices, 0); }

Tensor AttentionDecomposed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                           double scale) {
  Tracer* tracer = TracerOf(q);
  if (tracer == nullptr) return q;
  // (B, H, T, T) scores in f32 whatever the input precision.
  Tensor scores = MatmulTransposeB(q, k).Convert(DType::kF32) * scale;
  if (causal) {
    // Query i sees keys j <= i.
    int64_t t = q.dim(2);
    Tensor row = Iota(*tracer, DType::kS32, {t, t}, 0);
    Tensor col = Iota(*tracer, DType::kS32, {t, t}, 1);
    scores = Where(Compare(col, row, CompareDirection::kLe), scores, kNegInf);
  }
  Tensor probs = Softmax(scores, -1).Convert(v.dtype());
  return Matmul(probs, v);
}

Tensor Attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  Tracer* tracer = TracerOf(q);
  if (tracer == nullptr) return q;
  if (!k.valid() || !v.valid()) return Tensor(tracer, nullptr);
  auto describe = [&] {
    return fmt::format("attention of q {}, k {}, v {}", q.shape().ToString(), k.shape().ToString(),
                       v.shape().ToString());
  };
  if (q.rank() != 4 || k.dims() != v.dims() || k.rank() != 4 || q.dim(0) != k.dim(0) ||
      q.dim(1) != k.dim(1) || q.dim(3) != k.dim(3) || (causal && q.dim(2) != k.dim(2))) {
    tracer->Fail(Error("{}: expected q, k, v as [batch, heads, seq, head_dim] of matching sizes",
                       describe()));
    return Tensor(tracer, nullptr);
  }
  double rounded_scale = static_cast<float>(scale);
  ir::Computation* decomposition = tracer->Decomposition(
      "attention", {q.shape(), k.shape(), v.shape()},
      fmt::format("causal={} scale={}", causal, rounded_scale), [&](std::span<const Tensor> p) {
        return AttentionDecomposed(p[0], p[1], p[2], causal, rounded_scale);
      });
  if (decomposition == nullptr) return Tensor(tracer, nullptr);
  return tracer->Adopt(
      tracer->builder().Attention(q.instruction(), k.instruction(), v.instruction(), causal,
                                  rounded_scale, decomposition),
      describe);
}

Tensor SoftmaxCrossEntropyDecomposed(const Tensor& logits, const Tensor& targets,
                                     int64_t num_classes) {
  Tracer* tracer = TracerOf(logits);
  if (tracer == nullptr || !targets.valid()) return logits;
  Tensor x = logits.Convert(DType::kF32);  // (..., V)
  std::vector<int64_t> rows(x.dims().begin(), x.dims().end() - 1);
  Tensor classes = Iota(*tracer, DType::kS32, x.dims(), -1);
  if (num_classes > 0 && num_classes < x.dim(-1)) {
    Tensor real = Compare(classes, Scalar(*tracer, static_cast<double>(num_classes), DType::kS32),
                          CompareDirection::kLt);
    x = Where(real, x, kNegInf);
  }
  Tensor max = x.Max({-1}, /*keep_dims=*/true);                          // (..., 1)
  Tensor log_sum_exp = Log(Exp(x - max).Sum({-1})) + max.Reshape(rows);  // (...)
  std::vector<int64_t> column = rows;
  column.push_back(1);
  Tensor is_target = Compare(classes, targets.Reshape(column), CompareDirection::kEq);
  Tensor target_logit = Where(is_target, x, 0.0).Sum({-1});  // (...)
  return log_sum_exp - target_logit;
}

Tensor SoftmaxCrossEntropy(const Tensor& logits, const Tensor& targets, int64_t num_classes) {
  Tracer* tracer = TracerOf(logits);
  if (tracer == nullptr) return logits;
  if (!targets.valid()) return Tensor(tracer, nullptr);
  auto describe = [&] {
    return fmt::format("softmax-cross-entropy of logits {} and targets {}",
                       logits.shape().ToString(), targets.shape().ToString());
  };
  std::vector<int64_t> rows(logits.dims().begin(), logits.dims().end() - 1);
  if (logits.rank() < 1 || !ir::IsFloat(logits.dtype()) || targets.dtype() != DType::kS32 ||
      targets.dims() != rows) {
    tracer->Fail(
        Error("{}: expected float logits [..., classes] and s32 targets [...]", describe()));
    return Tensor(tracer, nullptr);
  }
  if (num_classes < 0 || num_classes > logits.dim(-1)) {
    tracer->Fail(Error("{}: num_classes {} out of range", describe(), num_classes));
    return Tensor(tracer, nullptr);
  }
  ir::Computation* decomposition = tracer->Decomposition(
      "softmax_cross_entropy", {logits.shape(), targets.shape()},
      fmt::format("num_classes={}", num_classes), [&](std::span<const Tensor> p) {
        return SoftmaxCrossEntropyDecomposed(p[0], p[1], num_classes);
      });
  if (decomposition == nullptr) return Tensor(tracer, nullptr);
  return tracer->Adopt(tracer->builder().SoftmaxCrossEntropy(
                           logits.instruction(), targets.instruction(), num_classes, decomposition),
                       describe);
}

}  // namespace gptc::frontend
