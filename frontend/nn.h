// Neural-network building blocks over Tensor, in GPT-2's conventions.
//
// Helpers that own parameters take the tracer and a name, open a scope of
// that name and declare `<scope>.<name>.weight` / `.bias`, so a model written
// with them gets Hugging Face checkpoint names for free. Attention and
// softmax cross-entropy are emitted as composite ops carrying a decomposition
// into primitives (the *Decomposed functions, which build those primitives
// directly), so later passes can give them dedicated kernels.
#ifndef GPTC_FRONTEND_NN_H_
#define GPTC_FRONTEND_NN_H_

#include <cstdint>
#include <string_view>

#include "compiler/program/param.h"
#include "frontend/tensor.h"
#include "frontend/tracer.h"

namespace gptc::frontend {

// y = x @ weight + bias over the last axis of x: weight [in, out] (the
// Hugging Face Conv1D layout of GPT-2's c_attn, c_fc, c_proj), bias [out]
// initialized to zeros.
Tensor Linear(Tracer& tracer, std::string_view name, const Tensor& x, int64_t out_features,
              const InitRule& weight_init);

// Normalizes the last axis to zero mean and unit variance (biased variance,
// eps inside the square root), then scales by `weight` (ones) and shifts by
// `bias` (zeros), both [C].
Tensor LayerNorm(Tracer& tracer, std::string_view name, const Tensor& x, double eps = 1e-5);

// GELU, tanh form as in GPT-2: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Tensor Gelu(const Tensor& x);

// exp(x - max) / sum(exp(x - max)) along `axis`.
Tensor Softmax(const Tensor& x, int64_t axis);

// Rows of `table` ([V, C]) picked by integer `indices` ([...]): [..., C].
Tensor Embedding(const Tensor& table, const Tensor& indices);

// Scaled dot-product attention as one composite op: q, k, v [B, H, T, D] ->
// [B, H, T, D] = softmax(scale * q k^T, masked causally if asked) v. The
// scale is rounded to f32 so the attribute and the decomposition agree.
Tensor Attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale);
// The same computation in primitives (scores and softmax in f32).
Tensor AttentionDecomposed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                           double scale);

// Per-row losses -log softmax(logits)[target] as one composite op: logits
// [..., V] (float), targets s32[...] -> f32[...]. Classes at or above
// `num_classes` are padding (GPT-2's vocabulary padded to 50,304): they are
// excluded from the softmax, so the loss is over the real classes only.
Tensor SoftmaxCrossEntropy(const Tensor& logits, const Tensor& targets, int64_t num_classes);
// The same computation in primitives: iota/compare/select for the padding
// mask and the one-hot pick of the target, max/sum reductions for a stable
// log-sum-exp.
Tensor SoftmaxCrossEntropyDecomposed(const Tensor& logits, const Tensor& targets,
                                     int64_t num_classes);

}  // namespace gptc::frontend

#endif  // GPTC_FRONTEND_NN_H_
