#include "tools/gptrun/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/init.h"
#include "runtime/tokenizer.h"

namespace gptc::tools {

StatusOr<std::pair<int64_t, int64_t>> LogitsShape(const program::TrainEntry& logits) {
  const program::EntrySignature& sig = logits.signature;
  int64_t in = sig.FindInput(program::SlotRole::kTokens);
  int64_t out = sig.FindOutput(program::SlotRole::kLogits);
  if (in < 0 || out < 0)
    return Error("entry {} has no tokens input or logits output", logits.name());
  const ir::Shape& tokens = sig.inputs[in].shape;
  const ir::Shape& shape = sig.outputs[out].shape;
  if (tokens.rank() != 2 || tokens.dims()[0] != 1 || shape.rank() != 3 ||
      shape.dims()[1] != tokens.dims()[1]) {
    return Error("entry {}: tokens {} and logits {} are not [1,T] and [1,T,V]", logits.name(),
                 tokens.ToString(), shape.ToString());
  }
  return std::pair{tokens.dims()[1], shape.dims()[2]};
}

namespace {

// Logits [first, first + count) of one window of T tokens, whose logits are
// values[t * padded + v]: the whole [T, padded] for validation, one row for a
// sample (the GPU then copies only that row).
StatusOr<std::vector<double>> WindowLogits(rt::Trainer& trainer, const program::TrainEntry& logits,
                                           std::vector<int32_t> window, int64_t first,
                                           int64_t count) {
  rt::MicroBatch mb;
  mb.tokens = std::move(window);
  return trainer.EvaluateSlice(logits, mb, logits.signature.FindOutput(program::SlotRole::kLogits),
                               first, count);
}

// A uniform double in [0, 1) from a counter.
double Uniform(uint64_t seed, uint64_t salt, uint64_t i) {
  uint64_t x =
      rt::SplitMix64(rt::SplitMix64(seed ^ 0x5a3c0ffee) + salt * 0x9e3779b97f4a7c15ULL + i);
  return static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace

StatusOr<std::vector<int32_t>> SampleTokens(rt::Trainer& trainer, const program::TrainEntry& logits,
                                            const SampleOptions& options) {
  ASSIGN_OR_RETURN(auto shape, LogitsShape(logits));
  const auto [seq, padded] = shape;
  const int64_t vocab = std::min(options.vocab, padded);
  std::vector<int32_t> context = options.prompt;
  if (context.empty()) context.push_back(rt::kEndOfText);
  std::vector<int32_t> generated;
  std::vector<int32_t> ids(vocab);
  for (int64_t i = 0; i < options.length; ++i) {
    // Note [sampling window].
    const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(context.size()) - seq);
    std::vector<int32_t> window(context.begin() + start, context.end());
    const int64_t last = static_cast<int64_t>(window.size()) - 1;
    window.resize(seq, rt::kEndOfText);
    ASSIGN_OR_RETURN(std::vector<double> values,
                     WindowLogits(trainer, logits, std::move(window), last * padded, padded));
    const double* row = values.data();
    std::iota(ids.begin(), ids.end(), 0);
    const int64_t k =
        options.temperature == 0
            ? 1
            : std::clamp<int64_t>(options.top_k == 0 ? vocab : options.top_k, 1, vocab);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    int32_t next = ids[0];
    if (k > 1) {
      std::vector<double> p(k);
      double sum = 0;
      const double inv_t = 1.0 / options.temperature;
      for (int64_t j = 0; j < k; ++j) {
        sum += p[j] = std::exp((row[ids[j]] - row[ids[0]]) * inv_t);
      }
      double u = Uniform(options.seed, options.salt, static_cast<uint64_t>(i)) * sum;
      for (int64_t j = 0; j < k; ++j) {
        next = ids[j];
        if ((u -= p[j]) < 0) break;
      }
    }
    if (options.stop_at_end_of_text && next == rt::kEndOfText) break;
    generated.push_back(next);
    context.push_back(next);
    if (options.on_token) options.on_token(next);
  }
  return generated;
}

StatusOr<double> ForwardLoss(rt::Trainer& trainer, const program::TrainEntry& logits,
                             const rt::MicroBatch& batch, int64_t vocab) {
  ASSIGN_OR_RETURN(auto shape, LogitsShape(logits));
  const auto [seq, padded] = shape;
  if (batch.tokens.size() % seq != 0 || batch.targets.size() != batch.tokens.size()) {
    return Error("validation batch of {} tokens is not rows of {}", batch.tokens.size(), seq);
  }
  const int64_t rows = static_cast<int64_t>(batch.tokens.size()) / seq;
  const int64_t v = std::min(vocab, padded);
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> window(batch.tokens.begin() + r * seq,
                                batch.tokens.begin() + (r + 1) * seq);
    ASSIGN_OR_RETURN(std::vector<double> values,
                     WindowLogits(trainer, logits, std::move(window), 0, seq * padded));
    for (int64_t t = 0; t < seq; ++t) {
      const double* row = values.data() + t * padded;
      const double m = *std::max_element(row, row + v);
      double sum = 0;
      for (int64_t j = 0; j < v; ++j) sum += std::exp(row[j] - m);
      total += std::log(sum) + m - row[batch.targets[r * seq + t]];
    }
  }
  return total / static_cast<double>(rows * seq);
}

StatusOr<double> EvalLoss(rt::Trainer& trainer, const program::TrainEntry& eval,
                          const rt::MicroBatch& batch) {
  ASSIGN_OR_RETURN(std::vector<eval::Literal> out, trainer.Evaluate(eval, batch));
  if (out.size() != 1 || out[0].values.size() != 1) {
    return Error("entry {}: expected one scalar loss output", eval.name());
  }
  return out[0].values[0];
}

}  // namespace gptc::tools
