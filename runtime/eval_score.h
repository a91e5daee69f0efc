// Scoring multiple-choice examples (HellaSwag) with the compiled `score`
// entry: packing an eval set's examples into its batches, and turning the
// rows' masked loss sums back into each example's choice and the accuracy.
//
// As llm.c does (llmc/dataloader.h's eval loader): each completion of an
// example is one row, the context's tokens then the completion's; an
// example's completions take consecutive rows, and a batch holds as many
// whole examples as its rows allow. Several examples are never packed into
// one row: causal attention would let a later example see an earlier one,
// and its positions would shift. The targets are the next tokens; the mask
// is 1 at the positions whose target is a completion token (the last
// context token predicts the first completion token).
//
// Two scores per completion: acc takes the completion of least summed loss,
// acc_norm the least mean loss (llm.c's C eval reports acc_norm). Ties go to
// the lowest index.
//
//   RETURN_IF_ERROR(CheckScoreFits(set, rows, seq, path));
//   for (const ScoreBatch& b : PackScoreBatches(set, 0, n, rows, seq)) {
//     ... run the entry on b.batch: loss_sums, token_counts (rows each) ...
//     ASSIGN_OR_RETURN(auto results, ScoreExamples(set, b, loss_sums, token_counts));
//     tally.Add(results);
//   }
#ifndef GPTC_RUNTIME_EVAL_SCORE_H_
#define GPTC_RUNTIME_EVAL_SCORE_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "compiler/support/status.h"
#include "runtime/eval_file.h"
#include "runtime/trainer.h"

namespace gptc::rt {

// One batch of the score entry, s32[rows, seq] each: rows past the last
// example's hold zeros (mask 0).
struct ScoreBatch {
  MicroBatch batch;                // tokens, targets, mask
  int64_t rows = 0, seq = 0;       // the entry's batch shape, which `batch` fills
  std::vector<int64_t> examples;   // positions in the set's examples, in row order
  std::vector<int64_t> first_row;  // the row of each example's first completion
};

// Refuses, in one line naming `file` and the example (position and index),
// an example that no batch of `rows` rows of `seq` tokens can hold: more
// completions than rows, or a context and completion longer than `seq`
// tokens together, as kUsage (a larger --batch or --seq compiles one that
// can). Nothing is truncated (llm.c refuses these too). An empty context
// (nothing predicts the first completion token) or an empty completion (no
// loss to average) cannot be scored at any size: kCorrupt.
Status CheckScoreFits(const EvalSet& set, int64_t rows, int64_t seq, std::string_view file);

// The next batch: examples first, first + 1, ... of [first, last) as long
// as their completions fit its rows (at least example `first`; first <
// last, and CheckScoreFits must hold). A scorer that runs each batch as it
// is packed holds one batch at a time.
ScoreBatch PackScoreBatch(const EvalSet& set, int64_t first, int64_t last, int64_t rows,
                          int64_t seq);

// Examples [first, last) of `set`, in order, packed into batches by
// PackScoreBatch (CheckScoreFits must hold).
std::vector<ScoreBatch> PackScoreBatches(const EvalSet& set, int64_t first, int64_t last,
                                         int64_t rows, int64_t seq);

// What the model made of one example.
struct ExampleScore {
  int64_t position = 0;  // in the set's examples
  int64_t index = 0;     // the example's index field
  int64_t label = 0;
  std::vector<double> loss_sums;   // per completion: its tokens' summed loss
  std::vector<double> mean_losses;  // per completion: the same over its token count
  int64_t choice_sum = 0;   // the least summed loss (acc)
  int64_t choice_mean = 0;  // the least mean loss (acc_norm)
};

// Each example of `batch` from the entry's outputs for it (one value a row).
// Refuses outputs of another length than `batch.rows`, and a token count
// that differs from the number of ones in its row of the batch's mask (the
// entry did not read the mask it was given), as kInternal naming the row.
StatusOr<std::vector<ExampleScore>> ScoreExamples(const EvalSet& set, const ScoreBatch& batch,
                                                  std::span<const double> loss_sums,
                                                  std::span<const double> token_counts);

// A proportion's 95% interval (Wilson's score interval: sound at small
// counts and near 0 or 1, where the normal approximation is not). No
// examples say nothing: [0, 1].
struct Interval {
  double low = 0, high = 0;
};
Interval Wilson95(int64_t correct, int64_t total);

// The counts of an evaluation: summed over batches, and over ranks.
struct EvalTally {
  int64_t examples = 0;
  int64_t correct_sum = 0;   // acc
  int64_t correct_mean = 0;  // acc_norm
  void Add(std::span<const ExampleScore> scores);
  // The fractions of the examples chosen right (0 when there are none).
  double acc() const;
  double acc_norm() const;
};

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_EVAL_SCORE_H_
