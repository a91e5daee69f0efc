// The evaluation phase of a gptrun run (tools/gptrun/train_loop.cc): the
// validation loss over --val (every --val-every steps and after the last)
// and the text samples (every --sample-every steps), each a console line and
// a log event. Rank 0 evaluates; the other ranks never call it.
#ifndef GPTC_TOOLS_GPTRUN_TRAIN_EVALUATE_H_
#define GPTC_TOOLS_GPTRUN_TRAIN_EVALUATE_H_

#include <cstdint>
#include <optional>
#include <utility>

#include "compiler/support/status.h"
#include "runtime/tokenizer.h"
#include "tools/gptrun/train_context.h"

namespace gptc::tools {

class EvaluatePhase {
 public:
  explicit EvaluatePhase(RunContext& run) : run_(run) {}

  // Once the trainer is made: what the run can evaluate (no samples or
  // validation without a logits entry; no samples without a tokenizer,
  // which is an error only when --tokenizer named it). Notes what it skips.
  Status Prepare();

  // After step `step` (`last`: the run's last): its validation and sample,
  // when due.
  Status AfterStep(int64_t step, bool last);

  // The validation loss of `step`, when it was validated.
  std::optional<double> ValLossAt(int64_t step) const {
    return last_val_.first == step ? std::optional<double>(last_val_.second) : std::nullopt;
  }

 private:
  Status Validate(int64_t step);
  Status Sample(int64_t step);

  RunContext& run_;
  std::optional<rt::Tokenizer> tokenizer_;
  int64_t sample_every_ = 0;
  bool validate_ = false;
  std::pair<int64_t, double> last_val_{-1, 0.0};  // (step, loss) of the latest validation
};

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_TRAIN_EVALUATE_H_
