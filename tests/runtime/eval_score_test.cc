// Scoring eval examples (runtime/eval_score.h): each completion a row laid
// out as llm.c's eval loader lays it out, whole examples packed greedily into
// batches, the rows' loss sums turned into choices (least sum, least mean),
// the tally and its Wilson interval.
#include "runtime/eval_score.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gptc::rt {
namespace {

constexpr char kFile[] = "hellaswag_val.bin";

// An example whose context is `context` tokens and whose completions have
// the lengths `lengths`; token ids tell the example, the completion and the
// position apart.
EvalExample Example(int64_t index, int64_t context, std::vector<int64_t> lengths,
                    int64_t label = 0) {
  EvalExample e{.index = index, .label = label, .context = {}, .completions = {}};
  for (int64_t t = 0; t < context; ++t) e.context.push_back(static_cast<int32_t>(1000 * index + t));
  for (size_t k = 0; k < lengths.size(); ++k) {
    std::vector<int32_t> c;
    for (int64_t t = 0; t < lengths[k]; ++t) {
      c.push_back(static_cast<int32_t>(1000 * index + 100 * (k + 1) + t));
    }
    e.completions.push_back(c);
  }
  return e;
}

// Row `row` of an s32[rows, seq] vector.
std::vector<int32_t> Row(const std::vector<int32_t>& v, int64_t row, int64_t seq) {
  return std::vector<int32_t>(v.begin() + row * seq, v.begin() + (row + 1) * seq);
}

// The token counts an entry that reads the mask returns: its ones per row.
std::vector<double> MaskCounts(const ScoreBatch& b) {
  std::vector<double> counts(b.rows, 0);
  for (int64_t r = 0; r < b.rows; ++r) {
    for (int32_t m : Row(b.batch.mask, r, b.seq)) counts[r] += m;
  }
  return counts;
}

TEST(ScorePackTest, RowLayoutIsContextThenCompletionWithNextTokenTargets) {
  EvalSet set;
  set.examples.push_back(EvalExample{
      .index = 0, .label = 0, .context = {10, 11, 12}, .completions = {{20, 21}, {30}}});
  const std::vector<ScoreBatch> batches = PackScoreBatches(set, 0, 1, /*rows=*/3, /*seq=*/8);
  ASSERT_EQ(batches.size(), 1u);
  const ScoreBatch& b = batches[0];
  EXPECT_EQ(b.rows, 3);
  EXPECT_EQ(b.seq, 8);
  EXPECT_EQ(b.examples, std::vector<int64_t>({0}));
  EXPECT_EQ(b.first_row, std::vector<int64_t>({0}));
  ASSERT_EQ(b.batch.tokens.size(), 24u);
  ASSERT_EQ(b.batch.targets.size(), 24u);
  ASSERT_EQ(b.batch.mask.size(), 24u);
  // The last context token predicts the first completion token.
  EXPECT_EQ(Row(b.batch.tokens, 0, 8), std::vector<int32_t>({10, 11, 12, 20, 21, 0, 0, 0}));
  EXPECT_EQ(Row(b.batch.targets, 0, 8), std::vector<int32_t>({11, 12, 20, 21, 0, 0, 0, 0}));
  EXPECT_EQ(Row(b.batch.mask, 0, 8), std::vector<int32_t>({0, 0, 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(Row(b.batch.tokens, 1, 8), std::vector<int32_t>({10, 11, 12, 30, 0, 0, 0, 0}));
  EXPECT_EQ(Row(b.batch.targets, 1, 8), std::vector<int32_t>({11, 12, 30, 0, 0, 0, 0, 0}));
  EXPECT_EQ(Row(b.batch.mask, 1, 8), std::vector<int32_t>({0, 0, 1, 0, 0, 0, 0, 0}));
  const std::vector<int32_t> zeros(8, 0);
  EXPECT_EQ(Row(b.batch.tokens, 2, 8), zeros);
  EXPECT_EQ(Row(b.batch.targets, 2, 8), zeros);
  EXPECT_EQ(Row(b.batch.mask, 2, 8), zeros);
}

TEST(ScorePackTest, AFullRowHasNoTargetAfterItsLastToken) {
  EvalSet set;
  set.examples.push_back(
      EvalExample{.index = 0, .label = 0, .context = {1, 2}, .completions = {{3, 4}}});
  const ScoreBatch b = PackScoreBatches(set, 0, 1, /*rows=*/1, /*seq=*/4)[0];
  EXPECT_EQ(b.batch.tokens, std::vector<int32_t>({1, 2, 3, 4}));
  EXPECT_EQ(b.batch.targets, std::vector<int32_t>({2, 3, 4, 0}));
  EXPECT_EQ(b.batch.mask, std::vector<int32_t>({0, 1, 1, 0}));
}

TEST(ScorePackTest, WholeExamplesFillBatchesInOrder) {
  EvalSet set;
  for (int64_t i = 0; i < 3; ++i) set.examples.push_back(Example(i, 3, {1, 2, 1, 2}));
  const std::vector<ScoreBatch> batches = PackScoreBatches(set, 0, 3, /*rows=*/8, /*seq=*/6);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].examples, std::vector<int64_t>({0, 1}));
  EXPECT_EQ(batches[0].first_row, std::vector<int64_t>({0, 4}));
  EXPECT_EQ(batches[1].examples, std::vector<int64_t>({2}));
  EXPECT_EQ(batches[1].first_row, std::vector<int64_t>({0}));
  // Example 1's completion 1 in row 5; example 2's completion 3 in row 3 of batch 1.
  EXPECT_EQ(Row(batches[0].batch.tokens, 5, 6),
            std::vector<int32_t>({1000, 1001, 1002, 1200, 1201, 0}));
  EXPECT_EQ(Row(batches[1].batch.tokens, 3, 6),
            std::vector<int32_t>({2000, 2001, 2002, 2400, 2401, 0}));
  const std::vector<int32_t> zeros(6, 0);
  for (int64_t r = 4; r < 8; ++r) {
    EXPECT_EQ(Row(batches[1].batch.tokens, r, 6), zeros) << "row " << r;
    EXPECT_EQ(Row(batches[1].batch.targets, r, 6), zeros) << "row " << r;
    EXPECT_EQ(Row(batches[1].batch.mask, r, 6), zeros) << "row " << r;
  }
}

TEST(ScorePackTest, ExamplesOfOtherCompletionCountsPackBesideEachOther) {
  EvalSet set;
  set.examples.push_back(Example(0, 2, {1, 1, 1, 1}));
  set.examples.push_back(Example(1, 2, {1, 1}));
  set.examples.push_back(Example(2, 2, {1, 1, 1, 1}));
  set.examples.push_back(Example(3, 2, {1, 1}));
  // 4 + 2 fit 6 rows, then 4 + 2 again.
  std::vector<ScoreBatch> batches = PackScoreBatches(set, 0, 4, /*rows=*/6, /*seq=*/4);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].examples, std::vector<int64_t>({0, 1}));
  EXPECT_EQ(batches[0].first_row, std::vector<int64_t>({0, 4}));
  EXPECT_EQ(batches[1].examples, std::vector<int64_t>({2, 3}));
  EXPECT_EQ(batches[1].first_row, std::vector<int64_t>({0, 4}));
  // 8 rows: 4 + 2 leave 2, too few for the next 4; the last 2 join it.
  batches = PackScoreBatches(set, 0, 4, /*rows=*/8, /*seq=*/4);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].examples, std::vector<int64_t>({0, 1}));
  EXPECT_EQ(batches[1].examples, std::vector<int64_t>({2, 3}));
  EXPECT_EQ(batches[1].first_row, std::vector<int64_t>({0, 4}));
  EXPECT_EQ(Row(batches[0].batch.mask, 6, 4), std::vector<int32_t>(4, 0));
  // A range packs only its examples, positions kept.
  batches = PackScoreBatches(set, 1, 3, /*rows=*/8, /*seq=*/4);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].examples, std::vector<int64_t>({1, 2}));
  EXPECT_EQ(batches[0].first_row, std::vector<int64_t>({0, 2}));
  EXPECT_TRUE(PackScoreBatches(set, 2, 2, 8, 4).empty());
}

// The error for `set` at `rows` x `seq`: one line naming the file, of kind `code`.
std::string Refusal(const EvalSet& set, int64_t rows, int64_t seq, StatusCode code) {
  const Status s = CheckScoreFits(set, rows, seq, kFile);
  if (s.ok()) return "accepted";
  EXPECT_EQ(s.code(), code) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  EXPECT_TRUE(s.message().starts_with(std::string(kFile) + ": ")) << s.message();
  return s.message();
}

TEST(ScoreFitsTest, AnExampleExactlyFillingARowFitsAndOneTokenMoreDoesNot) {
  EvalSet set;
  set.examples.push_back(Example(0, 5, {2, 3, 2, 1}));
  set.examples.push_back(Example(17, 90, {40, 39, 41, 41}));
  EXPECT_TRUE(CheckScoreFits(set, 4, 131, kFile).ok());
  EXPECT_EQ(Refusal(set, 4, 130, StatusCode::kUsage),
            "hellaswag_val.bin: example 1 (index 17): context 90 + completion 2 (41 tokens) = "
            "131 tokens, more than the score entry's 130 (gptc compile --seq or --score-seq)");
}

TEST(ScoreFitsTest, MoreCompletionsThanRowsAreRefused) {
  EvalSet set;
  set.examples.push_back(Example(0, 2, {1, 1, 1, 1}));
  set.examples.push_back(Example(1, 2, {1, 1, 1, 1, 1}));
  EXPECT_TRUE(CheckScoreFits(set, 5, 3, kFile).ok());
  EXPECT_EQ(Refusal(set, 4, 3, StatusCode::kUsage),
            "hellaswag_val.bin: example 1 (index 1): 5 completions, more than the score entry's 4 "
            "rows (gptc compile --batch)");
}

TEST(ScoreFitsTest, AnEmptyContextOrCompletionCannotBeScored) {
  EvalSet set;
  set.examples.push_back(Example(0, 2, {1, 1}));
  set.examples.push_back(Example(1, 0, {1, 1}));
  EXPECT_EQ(Refusal(set, 4, 8, StatusCode::kCorrupt),
            "hellaswag_val.bin: example 1 (index 1): empty context, which leaves nothing to "
            "predict the completions");
  set.examples[1] = Example(1, 2, {1, 0});
  EXPECT_EQ(Refusal(set, 4, 8, StatusCode::kCorrupt),
            "hellaswag_val.bin: example 1 (index 1): completion 1 is empty, which leaves no loss "
            "to score");
}

TEST(ScoreExamplesTest, AccTakesTheLeastSumAndAccNormTheLeastMean) {
  EvalSet set;
  // Completion 1 is long: the largest sum but the least mean loss.
  set.examples.push_back(Example(7, 3, {1, 4, 2}, /*label=*/1));
  set.examples.push_back(Example(8, 3, {2, 2}, /*label=*/0));
  const std::vector<ScoreBatch> batches = PackScoreBatches(set, 0, 2, /*rows=*/6, /*seq=*/8);
  ASSERT_EQ(batches.size(), 1u);
  const std::vector<double> sums = {2.0, 4.0, 3.0, 1.5, 2.5, 0};
  const std::vector<double> counts = {1, 4, 2, 2, 2, 0};
  ASSERT_EQ(MaskCounts(batches[0]), counts);
  StatusOr<std::vector<ExampleScore>> scores = ScoreExamples(set, batches[0], sums, counts);
  ASSERT_TRUE(scores.ok()) << scores.status().message();
  ASSERT_EQ(scores->size(), 2u);
  const ExampleScore& a = (*scores)[0];
  EXPECT_EQ(a.position, 0);
  EXPECT_EQ(a.index, 7);
  EXPECT_EQ(a.label, 1);
  EXPECT_EQ(a.loss_sums, std::vector<double>({2.0, 4.0, 3.0}));
  EXPECT_EQ(a.mean_losses, std::vector<double>({2.0, 1.0, 1.5}));
  EXPECT_EQ(a.choice_sum, 0);
  EXPECT_EQ(a.choice_mean, 1);
  const ExampleScore& b = (*scores)[1];
  EXPECT_EQ(b.position, 1);
  EXPECT_EQ(b.index, 8);
  EXPECT_EQ(b.loss_sums, std::vector<double>({1.5, 2.5}));
  EXPECT_EQ(b.mean_losses, std::vector<double>({0.75, 1.25}));
  EXPECT_EQ(b.choice_sum, 0);
  EXPECT_EQ(b.choice_mean, 0);
  EvalTally tally;
  tally.Add(*scores);
  EXPECT_EQ(tally.examples, 2);
  EXPECT_EQ(tally.correct_sum, 1);   // example 8 only
  EXPECT_EQ(tally.correct_mean, 2);  // both
}

TEST(ScoreExamplesTest, TiesGoToTheLowestIndex) {
  EvalSet set;
  set.examples.push_back(Example(0, 2, {2, 2, 2, 2}));
  set.examples.push_back(Example(1, 2, {1, 1, 1, 1}));
  const ScoreBatch b = PackScoreBatches(set, 0, 2, /*rows=*/8, /*seq=*/4)[0];
  const std::vector<double> sums = {3, 1, 1, 2, 5, 5, 5, 5};
  StatusOr<std::vector<ExampleScore>> scores = ScoreExamples(set, b, sums, MaskCounts(b));
  ASSERT_TRUE(scores.ok()) << scores.status().message();
  EXPECT_EQ((*scores)[0].choice_sum, 1);
  EXPECT_EQ((*scores)[0].choice_mean, 1);
  EXPECT_EQ((*scores)[1].choice_sum, 0);
  EXPECT_EQ((*scores)[1].choice_mean, 0);
}

TEST(ScoreExamplesTest, OutputsOfAnotherLengthOrCountAreRefused) {
  EvalSet set;
  set.examples.push_back(Example(0, 2, {1, 3}));
  const ScoreBatch b = PackScoreBatches(set, 0, 1, /*rows=*/3, /*seq=*/6)[0];
  const std::vector<double> sums = {1, 2, 0};
  const std::vector<double> counts = {1, 3, 0};
  ASSERT_TRUE(ScoreExamples(set, b, sums, counts).ok());
  StatusOr<std::vector<ExampleScore>> s = ScoreExamples(set, b, std::span(sums).first(2), counts);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInternal);
  EXPECT_EQ(s.status().message(), "score batch: 2 loss sums and 3 token counts for its 3 rows");
  const std::vector<double> wrong = {1, 2, 0, 0};
  EXPECT_FALSE(ScoreExamples(set, b, sums, wrong).ok());
  // An entry that summed the whole row (5 targets) instead of the mask's 3.
  const std::vector<double> unmasked = {1, 5, 0};
  s = ScoreExamples(set, b, sums, unmasked);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInternal);
  EXPECT_EQ(s.status().message(),
            "score batch row 1: the entry counted 5 tokens, its mask holds 3");
  // A padding row must count nothing too.
  s = ScoreExamples(set, b, sums, std::vector<double>({1, 3, 1}));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            "score batch row 2: the entry counted 1 tokens, its mask holds 0");
}

// Expected values: the roots p of (p - k/n)^2 = z^2 p (1 - p) / n, solved
// with python3 at z = 1.959963984540054.
TEST(WilsonTest, MatchesTheScoreIntervalSolvedByHand) {
  struct Case {
    int64_t correct, total;
    double low, high;
  };
  for (const Case& c : {Case{0, 10, 0.0, 0.2775327999}, Case{5, 10, 0.2365930905, 0.7634069095},
                        Case{10, 10, 0.7224672001, 1.0}, Case{1, 1, 0.2065493144, 1.0},
                        Case{2945, 10000, 0.2856464164, 0.3035114070}}) {
    const Interval i = Wilson95(c.correct, c.total);
    EXPECT_NEAR(i.low, c.low, 1e-9) << c.correct << "/" << c.total;
    EXPECT_NEAR(i.high, c.high, 1e-9) << c.correct << "/" << c.total;
    EXPECT_GE(i.low, 0.0);
    EXPECT_LE(i.high, 1.0);
  }
  const Interval none = Wilson95(0, 0);
  EXPECT_EQ(none.low, 0.0);
  EXPECT_EQ(none.high, 1.0);
}

ExampleScore Scored(int64_t label, int64_t choice_sum, int64_t choice_mean) {
  return ExampleScore{.label = label, .choice_sum = choice_sum, .choice_mean = choice_mean};
}

TEST(EvalTallyTest, SumsExamplesAndCorrectChoicesOverBatches) {
  EvalTally tally;
  EXPECT_EQ(tally.acc(), 0.0);
  EXPECT_EQ(tally.acc_norm(), 0.0);
  const std::vector<ExampleScore> first = {Scored(0, 0, 1), Scored(2, 2, 2), Scored(3, 1, 3)};
  const std::vector<ExampleScore> second = {Scored(1, 0, 0)};
  tally.Add(first);
  tally.Add(second);
  tally.Add({});
  EXPECT_EQ(tally.examples, 4);
  EXPECT_EQ(tally.correct_sum, 2);
  EXPECT_EQ(tally.correct_mean, 2);
  EXPECT_DOUBLE_EQ(tally.acc(), 0.5);
  EXPECT_DOUBLE_EQ(tally.acc_norm(), 0.5);
  tally.Add(std::vector<ExampleScore>{Scored(1, 1, 0)});
  EXPECT_DOUBLE_EQ(tally.acc(), 0.6);
  EXPECT_DOUBLE_EQ(tally.acc_norm(), 0.4);
}

}  // namespace
}  // namespace gptc::rt
