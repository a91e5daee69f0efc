// Multiple-choice evaluation (HellaSwag) on a trainer's current parameters,
// through the artifact's `score` entry: what `gptrun eval` and training's
// --hellaswag-every run (docs/EVAL.md).
//
// With data-parallel ranks each rank scores its own contiguous share of the
// examples (llm.c's split: ceil(n / world) each, the last rank fewer) and the
// counts are summed over the ranks (Trainer::SumOverRanks), so that every
// rank ends with the totals; every rank must call ScoreEvalSet.
//
//   ASSIGN_OR_RETURN(rt::EvalSet set, LoadEvalSet(path, limit, *score, vocab));
//   ASSIGN_OR_RETURN(EvalSetScores s, ScoreEvalSet(trainer, *score, set, rank, world));
//   console.Line(EvalLine("hellaswag", s));
#ifndef GPTC_TOOLS_GPTRUN_EVAL_SET_H_
#define GPTC_TOOLS_GPTRUN_EVAL_SET_H_

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/program/program.h"
#include "compiler/support/status.h"
#include "runtime/eval_file.h"
#include "runtime/eval_score.h"
#include "runtime/trainer.h"

namespace gptc::tools {

// The score entry's rows and window (its tokens input, s32[rows, seq]).
StatusOr<std::pair<int64_t, int64_t>> ScoreShape(const program::TrainEntry& score);

// The eval file at `path`, its first `limit` examples (0: all), each checked
// to fit the score entry (rt::CheckScoreFits). Errors are one line naming the
// file; an example that does not fit is kUsage.
StatusOr<rt::EvalSet> LoadEvalSet(const std::string& path, int64_t limit,
                                  const program::TrainEntry& score, int64_t vocab);

// Rank `rank`'s examples of `n`: [first, last).
std::pair<int64_t, int64_t> RankExamples(int64_t n, int64_t rank, int64_t world);

struct EvalSetScores {
  rt::EvalTally tally;                     // over every rank
  std::vector<rt::ExampleScore> examples;  // this rank's, in order
  int64_t batches = 0;                     // this rank's runs of the score entry
  double seconds = 0;
};

// Scores this rank's share of `set`; `progress(done, total)` after each
// batch with this rank's examples.
StatusOr<EvalSetScores> ScoreEvalSet(
    rt::Trainer& trainer, const program::TrainEntry& score, const rt::EvalSet& set, int64_t rank,
    int64_t world, const std::function<void(int64_t, int64_t)>& progress = nullptr);

// "hellaswag 10042 examples | acc 0.2859 [0.2771, 0.2948] | acc_norm 0.2945
// [0.2856, 0.3035] | 38.1 s": the accuracies with their 95% intervals.
std::string EvalLine(std::string_view name, const EvalSetScores& scores);

// The tally as JSON: examples, acc, acc_norm, each accuracy's interval
// ([low, high]) and the correct counts.
nlohmann::json TallyJson(const rt::EvalTally& tally);

// One example's scores as JSON (index, label, loss sums, mean losses, choices).
nlohmann::json ExampleJson(const rt::ExampleScore& example);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_EVAL_SET_H_
