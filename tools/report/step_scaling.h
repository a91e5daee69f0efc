// One rank's train step as the data-parallel scaling model reads it (Note
// [scaling model] in compiler/perf/scaling_model.h), taken off an artifact:
// each thunk's time, from the plan's roofline, the H100 model (Note [step
// model] in compiler/perf/step_model.h) or a measured gptrun --profile-json
// of the same artifact, and the step's timeline. `gptc simulate` prints the
// model's rows from it and the HTML report's scaling view draws them, so
// both predict from the same inputs.
#ifndef GPTC_TOOLS_REPORT_STEP_SCALING_H_
#define GPTC_TOOLS_REPORT_STEP_SCALING_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/perf/scaling_model.h"
#include "compiler/program/container.h"
#include "compiler/program/plan.h"
#include "compiler/support/status.h"
#include "tools/report/report_data.h"

namespace gptc::tools::report {

// The times of one entry's thunks, by index, and where they came from.
struct ThunkTimes {
  std::vector<double> us;
  std::string source;  // "H100 model", "H100 roofline", "measured (FILE, 10 steps on NVIDIA H100)"
  int64_t unmeasured = 0;  // a profile's: thunks that do work but have no row (timed 0)
  // `source`, and the unmeasured thunks when there are any.
  std::string Described() const;
};

// Refuses an entry with a thunk that has no kernel (an artifact compiled
// with --no-codegen, a fusion codegen could not lower): nothing times it.
// The error names the artifact and the thunk.
Status CheckTimeable(const program::Artifact& artifact, std::string_view artifact_path,
                     const program::EntryPlan& entry);

// `entry`'s times from the H100 model's launches.
ThunkTimes TimesFromModel(const ModelTimes& model, const program::EntryPlan& entry);
// `entry`'s times from a gptc-profile-1 object (checked by CheckProfile),
// called `label` in the source ("p.json", "this run").
ThunkTimes TimesFromProfile(const nlohmann::json& profile, std::string_view label,
                            const program::EntryPlan& entry);

// `source`: "model", "roofline" or a gptc-profile-1 file (checked against
// `artifact`, read from `artifact_path`), as `gptc simulate --times` takes
// it. Errors name --times or the artifact.
StatusOr<ThunkTimes> TimesOf(const program::Artifact& artifact, const std::string& artifact_path,
                             const program::EntryPlan& entry, const std::string& source);

// The plan's train_step entry; an artifact compiled with --grad-accum K > 1
// has none (accumulate and apply instead) and the error says so.
StatusOr<const program::EntryPlan*> TrainStepEntry(const program::Plan& plan,
                                                   const program::Artifact& artifact,
                                                   std::string_view artifact_path);

// The scaling model shards the optimizer itself (ScalingConfig::zero): from
// a ZeRO-1 artifact, whose optimizer already runs on 1/N, it would shard
// twice. An error naming the artifact for one compiled with --zero 1.
Status CheckUnsharded(const program::Artifact& artifact, std::string_view artifact_path);

// The step's timeline from `times` of `entry` (TrainStepEntry's): the
// gradients, the parameters to all-gather in the compute dtype, the tokens
// of one GPU's micro-batch. Errors name the artifact.
StatusOr<perf::StepTimeline> TrainStepTimeline(const program::Artifact& artifact,
                                               std::string_view artifact_path,
                                               const program::EntryPlan& entry,
                                               const ThunkTimes& times);

// One row of the model, and the link's parameters, as gptc-simulate-1 and
// the report's data hold them.
nlohmann::json ScalingRowJson(const perf::ScalingRow& row);
nlohmann::json LinkJson(const perf::LinkModel& link);

}  // namespace gptc::tools::report

#endif  // GPTC_TOOLS_REPORT_STEP_SCALING_H_
