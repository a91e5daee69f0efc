#include "tools/gptrun/eval_set.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace gptc::tools {

using nlohmann::json;
using program::SlotRole;

StatusOr<std::pair<int64_t, int64_t>> ScoreShape(const program::TrainEntry& score) {
  const int64_t in = score.signature.FindInput(SlotRole::kTokens);
  if (in < 0 || score.signature.FindInput(SlotRole::kMask) < 0 ||
      score.signature.FindOutput(SlotRole::kLossSums) < 0 ||
      score.signature.FindOutput(SlotRole::kTokenCounts) < 0) {
    return Error("entry {}: no tokens and mask inputs, or no loss_sums and token_counts outputs",
                 score.name());
  }
  const ir::Shape& tokens = score.signature.inputs[in].shape;
  if (tokens.rank() != 2) {
    return Error("entry {}: tokens are {}, expected [rows, seq]", score.name(), tokens.ToString());
  }
  return std::pair{tokens.dims()[0], tokens.dims()[1]};
}

StatusOr<rt::EvalSet> LoadEvalSet(const std::string& path, int64_t limit,
                                  const program::TrainEntry& score, int64_t vocab) {
  ASSIGN_OR_RETURN(rt::EvalSet set, rt::ReadEvalFile(path, vocab));
  if (limit > 0 && limit < static_cast<int64_t>(set.examples.size())) {
    set.examples.resize(limit);
  }
  ASSIGN_OR_RETURN(auto shape, ScoreShape(score));
  RETURN_IF_ERROR(rt::CheckScoreFits(set, shape.first, shape.second, path));
  return set;
}

std::pair<int64_t, int64_t> RankExamples(int64_t n, int64_t rank, int64_t world) {
  const int64_t each = (n + world - 1) / world;
  const int64_t first = std::min(n, each * rank);
  return {first, std::min(n, first + each)};
}

namespace {

// The score entry's outputs for `batch`, one value a row each.
StatusOr<std::vector<rt::ExampleScore>> RunBatch(rt::Trainer& trainer,
                                                 const program::TrainEntry& score,
                                                 const rt::EvalSet& set,
                                                 const rt::ScoreBatch& batch) {
  ASSIGN_OR_RETURN(std::vector<eval::Literal> out, trainer.Evaluate(score, batch.batch));
  const int64_t sums = score.signature.FindOutput(SlotRole::kLossSums);
  const int64_t counts = score.signature.FindOutput(SlotRole::kTokenCounts);
  return rt::ScoreExamples(set, batch, out[sums].values, out[counts].values);
}

}  // namespace

StatusOr<EvalSetScores> ScoreEvalSet(rt::Trainer& trainer, const program::TrainEntry& score,
                                     const rt::EvalSet& set, int64_t rank, int64_t world,
                                     const std::function<void(int64_t, int64_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(auto shape, ScoreShape(score));
  const auto [rows, seq] = shape;
  const auto [first, last] = RankExamples(static_cast<int64_t>(set.examples.size()), rank, world);
  EvalSetScores scores;
  // One batch at a time: the whole set's rows at once would take gigabytes.
  for (int64_t next = first; next < last;) {
    const rt::ScoreBatch batch = rt::PackScoreBatch(set, next, last, rows, seq);
    StatusOr<std::vector<rt::ExampleScore>> batch_scores = RunBatch(trainer, score, set, batch);
    if (!batch_scores.ok()) {
      return batch_scores.status().WithPrefix(
          fmt::format("examples {} to {}", next, next + batch.examples.size() - 1));
    }
    scores.tally.Add(*batch_scores);
    for (rt::ExampleScore& e : *batch_scores) scores.examples.push_back(std::move(e));
    next += static_cast<int64_t>(batch.examples.size());
    ++scores.batches;
    if (progress) progress(next - first, last - first);
  }
  std::vector<double> counts = {static_cast<double>(scores.tally.examples),
                                static_cast<double>(scores.tally.correct_sum),
                                static_cast<double>(scores.tally.correct_mean)};
  RETURN_IF_ERROR(trainer.SumOverRanks(counts).WithPrefix("summing the ranks' counts"));
  scores.tally.examples = static_cast<int64_t>(counts[0]);
  scores.tally.correct_sum = static_cast<int64_t>(counts[1]);
  scores.tally.correct_mean = static_cast<int64_t>(counts[2]);
  scores.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return scores;
}

std::string EvalLine(std::string_view name, const EvalSetScores& scores) {
  const rt::EvalTally& t = scores.tally;
  const rt::Interval acc = rt::Wilson95(t.correct_sum, t.examples);
  const rt::Interval norm = rt::Wilson95(t.correct_mean, t.examples);
  return fmt::format(
      "{} {} examples | acc {:.4f} [{:.4f}, {:.4f}] | acc_norm {:.4f} [{:.4f}, {:.4f}] | {:.1f} s",
      name, t.examples, t.acc(), acc.low, acc.high, t.acc_norm(), norm.low, norm.high,
      scores.seconds);
}

json TallyJson(const rt::EvalTally& tally) {
  const rt::Interval acc = rt::Wilson95(tally.correct_sum, tally.examples);
  const rt::Interval norm = rt::Wilson95(tally.correct_mean, tally.examples);
  return json{{"examples", tally.examples},
              {"acc", tally.acc()},
              {"acc_interval", {acc.low, acc.high}},
              {"acc_correct", tally.correct_sum},
              {"acc_norm", tally.acc_norm()},
              {"acc_norm_interval", {norm.low, norm.high}},
              {"acc_norm_correct", tally.correct_mean}};
}

json ExampleJson(const rt::ExampleScore& e) {
  return json{{"index", e.index},         {"label", e.label},
              {"loss_sums", e.loss_sums}, {"mean_losses", e.mean_losses},
              {"choice", e.choice_sum},   {"choice_norm", e.choice_mean}};
}

}  // namespace gptc::tools
