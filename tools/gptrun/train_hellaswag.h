// HellaSwag during training (gptrun --hellaswag FILE.bin --hellaswag-every
// N): every N steps and after the last, the accuracy of the current
// parameters on the eval set through the artifact's score entry
// (tools/gptrun/eval_set.h), a console line and a "hellaswag" log event
// (and so TensorBoard and the report's runs view). Every rank runs it: each
// scores its share of the examples and the counts are summed.
#ifndef GPTC_TOOLS_GPTRUN_TRAIN_HELLASWAG_H_
#define GPTC_TOOLS_GPTRUN_TRAIN_HELLASWAG_H_

#include <cstdint>
#include <optional>

#include "compiler/support/status.h"
#include "runtime/eval_file.h"
#include "tools/gptrun/train_context.h"

namespace gptc::tools {

class HellaSwagPhase {
 public:
  explicit HellaSwagPhase(RunContext& run) : run_(run) {}

  // Once the trainer is made: reads the set and checks that the artifact
  // has a score entry that every example fits, so that a bad file or
  // artifact ends the run before its first step.
  Status Prepare();

  // After step `step` (`last`: the run's last): the evaluation, when due.
  Status AfterStep(int64_t step, bool last);

 private:
  RunContext& run_;
  std::optional<rt::EvalSet> set_;
  const program::TrainEntry* score_ = nullptr;
};

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_TRAIN_HELLASWAG_H_
