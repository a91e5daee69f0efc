#include "models/gpt2.h"

#include <fmt/format.h>

#include <cmath>

#include "compiler/program/gpt2_params.h"
#include "frontend/nn.h"

namespace gptc::models {

using frontend::Tensor;
using frontend::Tracer;
using program::Gpt2Init;
using program::InitRule;

namespace {

// The init of the projections that write into the residual stream, and of
// every other matrix (compiler/program/gpt2_params.h decides both).
struct MatrixInits {
  InitRule normal, residual;
};

// x + proj(attention(ln_1(x))): (B, T, C) -> (B, T, C).
Tensor AttentionBlock(Tracer& tracer, const GptConfig& config, const Tensor& x,
                      const MatrixInits& init) {
  auto scope = tracer.Scope("attn");
  if (!x.valid()) return x;
  const int64_t B = x.dim(0), T = x.dim(1), C = config.width, H = config.heads;
  const int64_t D = config.head_dim();
  Tensor qkv = frontend::Linear(tracer, "c_attn", x, 3 * C, init.normal);
  // (B, T, C) slice of qkv -> (B, H, T, D)
  auto heads = [&](int64_t part) {
    return qkv.Slice(2, part * C, (part + 1) * C).Reshape({B, T, H, D}).Transpose({0, 2, 1, 3});
  };
  Tensor q = heads(0), k = heads(1), v = heads(2);
  Tensor y = frontend::Attention(q, k, v, /*causal=*/true, 1.0 / std::sqrt(static_cast<double>(D)));
  y = y.Transpose({0, 2, 1, 3}).Reshape({B, T, C});
  return frontend::Linear(tracer, "c_proj", y, C, init.residual);
}

// proj(gelu(fc(x))): (B, T, C) -> (B, T, C) through (B, T, 4C).
Tensor MlpBlock(Tracer& tracer, const GptConfig& config, const Tensor& x, const MatrixInits& init) {
  auto scope = tracer.Scope("mlp");
  Tensor h = frontend::Linear(tracer, "c_fc", x, 4 * config.width, init.normal);
  h = frontend::Gelu(h);
  return frontend::Linear(tracer, "c_proj", h, config.width, init.residual);
}

}  // namespace

Tensor Gpt2Logits(Tracer& tracer, const GptConfig& config, const Tensor& tokens) {
  const int64_t T = tokens.valid() ? tokens.dim(1) : 0;
  const MatrixInits init{
      .normal = program::Gpt2InitRule(Gpt2Init::kNormal, config.layers),
      .residual = program::Gpt2InitRule(Gpt2Init::kResidualNormal, config.layers)};
  Tensor wte;  // (V_padded, C), also the output projection
  Tensor x;    // (B, T, C)
  {
    auto scope = tracer.Scope("wte");
    wte = tracer.Parameter("weight", {config.padded_vocab, config.width}, init.normal);
    x = frontend::Embedding(wte, tokens);
  }
  {
    auto scope = tracer.Scope("wpe");
    Tensor wpe = tracer.Parameter("weight", {config.positions, config.width}, init.normal);
    x = x + wpe.Slice(0, 0, T);  // positions 0..T-1, broadcast over the batch
  }
  for (int64_t l = 0; l < config.layers; ++l) {
    auto scope = tracer.LayerScope(fmt::format("h.{}", l), l);
    x = x + AttentionBlock(tracer, config, frontend::LayerNorm(tracer, "ln_1", x), init);
    x = x + MlpBlock(tracer, config, frontend::LayerNorm(tracer, "ln_2", x), init);
  }
  x = frontend::LayerNorm(tracer, "ln_f", x);
  auto scope = tracer.Scope("lm_head");
  return frontend::MatmulTransposeB(x, wte);  // (B, T, V_padded)
}

Tensor Gpt2Loss(Tracer& tracer, const GptConfig& config, const Tensor& tokens,
                const Tensor& targets) {
  Tensor logits = Gpt2Logits(tracer, config, tokens);
  auto scope = tracer.Scope("loss");
  return frontend::SoftmaxCrossEntropy(logits, targets, config.vocab).Mean({0, 1});
}

StatusOr<frontend::TracedModule> TraceGpt2Forward(const GptConfig& config, int64_t batch,
                                                  int64_t seq) {
  RETURN_IF_ERROR(ValidateTraceShape(config, batch, seq));
  Tracer tracer(config.name);
  ir::Shape token_shape(ir::DType::kS32, {batch, seq});
  Tensor tokens, targets;
  {
    auto scope = tracer.Scope("inputs");
    tokens = tracer.Input("tokens", token_shape, program::SlotRole::kTokens);
    targets = tracer.Input("targets", token_shape, program::SlotRole::kTargets);
  }
  return tracer.Finish(Gpt2Loss(tracer, config, tokens, targets));
}

StatusOr<frontend::TracedModule> TraceGpt2Score(const GptConfig& config, int64_t batch,
                                                int64_t seq) {
  RETURN_IF_ERROR(ValidateTraceShape(config, batch, seq));
  Tracer tracer(config.name + ".score", "score");
  ir::Shape token_shape(ir::DType::kS32, {batch, seq});
  Tensor tokens, targets, mask;
  {
    auto scope = tracer.Scope("inputs");
    tokens = tracer.Input("tokens", token_shape, program::SlotRole::kTokens);
    targets = tracer.Input("targets", token_shape, program::SlotRole::kTargets);
    mask = tracer.Input("mask", token_shape, program::SlotRole::kMask);
  }
  Tensor logits = Gpt2Logits(tracer, config, tokens);
  auto scope = tracer.Scope("loss");
  Tensor weights = mask.Convert(ir::DType::kF32);
  Tensor losses = frontend::SoftmaxCrossEntropy(logits, targets, config.vocab) * weights;
  return tracer.FinishTuple({losses.Sum({1}), weights.Sum({1})});
}

StatusOr<frontend::TracedModule> TraceGpt2Logits(const GptConfig& config, int64_t batch,
                                                 int64_t seq) {
  RETURN_IF_ERROR(ValidateTraceShape(config, batch, seq));
  Tracer tracer(config.name + ".logits", "logits");
  Tensor tokens;
  {
    auto scope = tracer.Scope("inputs");
    tokens = tracer.Input("tokens", ir::Shape(ir::DType::kS32, {batch, seq}),
                          program::SlotRole::kTokens);
  }
  return tracer.Finish(Gpt2Logits(tracer, config, tokens));
}

}  // namespace gptc::models
