// GPT-2 as published (Radford et al. 2019), written with the tracing frontend.
//
// Pre-LN blocks (x + attn(ln_1(x)), x + mlp(ln_2(x))), learned positions, a
// final ln_f, and logits through the token table (tied input/output
// embedding). The token table has config.padded_vocab rows; the padded
// classes are excluded from the softmax, so the loss is over the real
// vocabulary. Parameter names and layouts follow the Hugging Face checkpoint
// (wte.weight, wpe.weight, h.0.ln_1.weight, h.0.attn.c_attn.weight [C, 3C], ...),
// in the order, with the shapes and the init rules of
// compiler/program/gpt2_params.h's table (tests/models/gpt2_params_test.cc).
#ifndef GPTC_MODELS_GPT2_H_
#define GPTC_MODELS_GPT2_H_

#include <cstdint>

#include "frontend/tensor.h"
#include "frontend/tracer.h"
#include "models/config.h"

namespace gptc::models {

// Logits f32[B, T, padded_vocab] for tokens s32[B, T], declaring the
// parameters on `tracer` in Hugging Face order.
frontend::Tensor Gpt2Logits(frontend::Tracer& tracer, const GptConfig& config,
                            const frontend::Tensor& tokens);

// The mean next-token loss f32[] over B*T positions.
frontend::Tensor Gpt2Loss(frontend::Tracer& tracer, const GptConfig& config,
                          const frontend::Tensor& tokens, const frontend::Tensor& targets);

// The forward module "params..., tokens s32[B,T], targets s32[B,T] -> f32[] loss"
// (module named after the config, entry `forward`). Validates the config
// and shape first, so bad requests fail with one line naming the config.
StatusOr<frontend::TracedModule> TraceGpt2Forward(const GptConfig& config, int64_t batch,
                                                  int64_t seq);

// The scoring module "params..., tokens s32[B,T], targets s32[B,T], mask
// s32[B,T] -> (loss_sums f32[B], token_counts f32[B])" (module CONFIG.score,
// entry `score`): each row's next-token losses summed where the mask is 1,
// and the mask's sum; multiple-choice evals compare completions by them.
StatusOr<frontend::TracedModule> TraceGpt2Score(const GptConfig& config, int64_t batch,
                                                int64_t seq);

// The sampling module "params..., tokens s32[B,T] -> f32[B,T,padded_vocab]
// logits" (module CONFIG.logits, entry `logits`), parameters as in
// TraceGpt2Forward.
StatusOr<frontend::TracedModule> TraceGpt2Logits(const GptConfig& config, int64_t batch,
                                                 int64_t seq);

}  // namespace gptc::models

#endif  // GPTC_MODELS_GPT2_H_
