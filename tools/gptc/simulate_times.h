// Where `gptc simulate` takes each thunk's time from (Note [scaling model]
// in compiler/perf/scaling_model.h): the plan's roofline, the H100 model
// (Note [step model] in compiler/perf/step_model.h), or a measured gptrun
// --profile-json of the same artifact.
#ifndef GPTC_TOOLS_GPTC_SIMULATE_TIMES_H_
#define GPTC_TOOLS_GPTC_SIMULATE_TIMES_H_

#include <string>
#include <vector>

#include "compiler/program/container.h"
#include "compiler/program/plan.h"
#include "compiler/support/status.h"

namespace gptc::tools {

// The times of one entry's thunks, by index, and where they came from.
struct ThunkTimes {
  std::vector<double> us;
  std::string source;  // "H100 model", "H100 roofline", "measured (FILE, 10 steps on NVIDIA H100)"
  int64_t unmeasured = 0;  // a profile's: thunks that do work but have no row (timed 0)
};

// `source`: "model", "roofline" or a gptc-profile-1 file (checked against
// `artifact`, read from `artifact_path`). A thunk without a kernel (an
// artifact compiled with --no-codegen) is refused: nothing times it. Errors
// name --times or the artifact.
StatusOr<ThunkTimes> TimesOf(const program::Artifact& artifact, const std::string& artifact_path,
                             const program::EntryPlan& entry, const std::string& source);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTC_SIMULATE_TIMES_H_
