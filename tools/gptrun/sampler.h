// Text samples and validation loss on any device: through the artifact's
// `eval` entry (a batch's mean loss in one run) or, for artifacts without
// one, its `logits` entry (batch 1, the train step's seq T).
//
// Note [sampling window]: the entry takes exactly T tokens. A context shorter
// than T is padded at the end (causal attention: the padding cannot change the
// logits at real positions) and read at its last real position; a longer one
// is cropped to its last T tokens. The padded vocabulary (ids >= vocab) is
// masked out.
#ifndef GPTC_TOOLS_GPTRUN_SAMPLER_H_
#define GPTC_TOOLS_GPTRUN_SAMPLER_H_

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "compiler/program/model_config.h"
#include "compiler/program/program.h"
#include "compiler/support/status.h"
#include "runtime/trainer.h"

namespace gptc::tools {

struct SampleOptions {
  int64_t length = 64;  // tokens to generate
  int64_t top_k = 40;   // 1: greedy; 0: the whole vocabulary
  double temperature = 1.0;  // divides the logits; 0: greedy
  uint64_t seed = 0;    // with `salt`, decides every draw
  uint64_t salt = 0;    // the step, so that each sample differs
  int64_t vocab = program::kGpt2Vocab;
  std::vector<int32_t> prompt;       // the context before the first token; empty: <|endoftext|>
  bool stop_at_end_of_text = false;  // end (without it) at a generated <|endoftext|>
  std::function<void(int32_t)> on_token;  // called with each token as it is drawn
};

// The logits entry's window T and padded vocabulary, after checking that it
// takes [1,T] tokens and gives [1,T,V] logits.
StatusOr<std::pair<int64_t, int64_t>> LogitsShape(const program::TrainEntry& logits);

// Generates up to options.length tokens after the prompt.
StatusOr<std::vector<int32_t>> SampleTokens(rt::Trainer& trainer,
                                            const program::TrainEntry& logits,
                                            const SampleOptions& options);

// The mean next-token cross-entropy (natural log, over the real vocabulary)
// of every row of `batch` (B rows of T tokens), one logits call per row.
StatusOr<double> ForwardLoss(rt::Trainer& trainer, const program::TrainEntry& logits,
                             const rt::MicroBatch& batch, int64_t vocab);
// The same from the `eval` entry: one run over the whole batch, which must
// have the entry's B rows.
StatusOr<double> EvalLoss(rt::Trainer& trainer, const program::TrainEntry& eval,
                          const rt::MicroBatch& batch);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_SAMPLER_H_
