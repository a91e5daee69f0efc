#include "runtime/eval_score.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace gptc::rt {
namespace {

int64_t CompletionCount(const EvalExample& e) { return static_cast<int64_t>(e.completions.size()); }

// The example's longest completion (the first of them): the one a row
// must hold beside the context.
int64_t LongestCompletion(const EvalExample& e) {
  int64_t longest = 0;
  for (int64_t k = 1; k < CompletionCount(e); ++k) {
    if (e.completions[k].size() > e.completions[longest].size()) longest = k;
  }
  return longest;
}

// Writes completion `k` of `e` into row `row` of `b` (zeros already there):
// tokens context then completion, targets the next token, mask 1 where the
// target is a completion token.
void FillRow(const EvalExample& e, int64_t k, int64_t row, int64_t seq, MicroBatch* b) {
  const std::vector<int32_t>& comp = e.completions[k];
  const int64_t ctx_len = static_cast<int64_t>(e.context.size());
  const int64_t len = ctx_len + static_cast<int64_t>(comp.size());
  int32_t* tokens = b->tokens.data() + row * seq;
  int32_t* targets = b->targets.data() + row * seq;
  int32_t* mask = b->mask.data() + row * seq;
  std::copy(e.context.begin(), e.context.end(), tokens);
  std::copy(comp.begin(), comp.end(), tokens + ctx_len);
  for (int64_t t = 0; t + 1 < len; ++t) targets[t] = tokens[t + 1];
  for (int64_t t = ctx_len - 1; t < len - 1; ++t) mask[t] = 1;
}

ScoreBatch EmptyBatch(int64_t rows, int64_t seq) {
  ScoreBatch b;
  b.rows = rows;
  b.seq = seq;
  const size_t n = static_cast<size_t>(rows * seq);
  b.batch.tokens.assign(n, 0);
  b.batch.targets.assign(n, 0);
  b.batch.mask.assign(n, 0);
  return b;
}

// The index of the least of `v`, the first of equals.
int64_t ArgMin(const std::vector<double>& v) {
  int64_t best = 0;
  for (int64_t i = 1; i < static_cast<int64_t>(v.size()); ++i) {
    if (v[i] < v[best]) best = i;
  }
  return best;
}

double Fraction(int64_t part, int64_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

}  // namespace

Status CheckScoreFits(const EvalSet& set, int64_t rows, int64_t seq, std::string_view file) {
  for (int64_t i = 0; i < static_cast<int64_t>(set.examples.size()); ++i) {
    const EvalExample& e = set.examples[i];
    const std::string where = fmt::format("{}: example {} (index {})", file, i, e.index);
    if (CompletionCount(e) > rows) {
      return UsageError(
          "{}: {} completions, more than the score entry's {} rows (gptc compile --batch)", where,
          CompletionCount(e), rows);
    }
    if (e.context.empty()) {
      return CorruptError("{}: empty context, which leaves nothing to predict the completions",
                          where);
    }
    for (int64_t k = 0; k < CompletionCount(e); ++k) {
      if (e.completions[k].empty()) {
        return CorruptError("{}: completion {} is empty, which leaves no loss to score", where, k);
      }
    }
    const int64_t k = LongestCompletion(e);
    const int64_t ctx_len = static_cast<int64_t>(e.context.size());
    const int64_t comp_len = static_cast<int64_t>(e.completions[k].size());
    if (ctx_len + comp_len > seq) {
      return UsageError(
          "{}: context {} + completion {} ({} tokens) = {} tokens, more than the score entry's {} "
          "(gptc compile --seq or --score-seq)",
          where, ctx_len, k, comp_len, ctx_len + comp_len, seq);
    }
  }
  return Status::Ok();
}

ScoreBatch PackScoreBatch(const EvalSet& set, int64_t first, int64_t last, int64_t rows,
                          int64_t seq) {
  assert(0 <= first && first < last && last <= static_cast<int64_t>(set.examples.size()));
  ScoreBatch b = EmptyBatch(rows, seq);
  int64_t row = 0;  // the next free row
  for (int64_t i = first; i < last; ++i) {
    const EvalExample& e = set.examples[i];
    const int64_t n = CompletionCount(e);
    assert(n <= rows);
    if (row + n > rows) break;
    b.examples.push_back(i);
    b.first_row.push_back(row);
    for (int64_t k = 0; k < n; ++k) FillRow(e, k, row + k, seq, &b.batch);
    row += n;
  }
  return b;
}

std::vector<ScoreBatch> PackScoreBatches(const EvalSet& set, int64_t first, int64_t last,
                                         int64_t rows, int64_t seq) {
  assert(0 <= first && first <= last && last <= static_cast<int64_t>(set.examples.size()));
  std::vector<ScoreBatch> batches;
  for (int64_t next = first; next < last;) {
    batches.push_back(PackScoreBatch(set, next, last, rows, seq));
    next += static_cast<int64_t>(batches.back().examples.size());
  }
  return batches;
}

StatusOr<std::vector<ExampleScore>> ScoreExamples(const EvalSet& set, const ScoreBatch& batch,
                                                  std::span<const double> loss_sums,
                                                  std::span<const double> token_counts) {
  const auto rows = static_cast<size_t>(batch.rows);
  if (loss_sums.size() != rows || token_counts.size() != rows) {
    return InternalError("score batch: {} loss sums and {} token counts for its {} rows",
                         loss_sums.size(), token_counts.size(), rows);
  }
  if (batch.batch.mask.size() != rows * static_cast<size_t>(batch.seq)) {
    return InternalError("score batch: a mask of {} values for {} rows of {} tokens",
                         batch.batch.mask.size(), rows, batch.seq);
  }
  for (int64_t r = 0; r < batch.rows; ++r) {
    const auto row_mask = std::span(batch.batch.mask).subspan(r * batch.seq, batch.seq);
    const int64_t ones = std::count(row_mask.begin(), row_mask.end(), 1);
    if (token_counts[r] != static_cast<double>(ones)) {
      return InternalError("score batch row {}: the entry counted {} tokens, its mask holds {}", r,
                           token_counts[r], ones);
    }
  }
  std::vector<ExampleScore> scores;
  for (size_t j = 0; j < batch.examples.size(); ++j) {
    const EvalExample& e = set.examples[batch.examples[j]];
    ExampleScore s{.position = batch.examples[j], .index = e.index, .label = e.label};
    for (int64_t k = 0; k < CompletionCount(e); ++k) {
      const int64_t r = batch.first_row[j] + k;
      s.loss_sums.push_back(loss_sums[r]);
      s.mean_losses.push_back(loss_sums[r] / token_counts[r]);
    }
    s.choice_sum = ArgMin(s.loss_sums);
    s.choice_mean = ArgMin(s.mean_losses);
    scores.push_back(std::move(s));
  }
  return scores;
}

Interval Wilson95(int64_t correct, int64_t total) {
  if (total == 0) return {0, 1};
  constexpr double kZ = 1.959963984540054;  // the normal's 97.5th percentile
  const double n = static_cast<double>(total);
  const double p = static_cast<double>(correct) / n;
  const double z2 = kZ * kZ;
  const double center = (p + z2 / (2 * n)) / (1 + z2 / n);
  const double half = kZ / (1 + z2 / n) * std::sqrt(p * (1 - p) / n + z2 / (4 * n * n));
  return {std::max(0.0, center - half), std::min(1.0, center + half)};
}

void EvalTally::Add(std::span<const ExampleScore> scores) {
  for (const ExampleScore& s : scores) {
    ++examples;
    correct_sum += s.choice_sum == s.label ? 1 : 0;
    correct_mean += s.choice_mean == s.label ? 1 : 0;
  }
}

double EvalTally::acc() const { return Fraction(correct_sum, examples); }
double EvalTally::acc_norm() const { return Fraction(correct_mean, examples); }

}  // namespace gptc::rt
