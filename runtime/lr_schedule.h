// Learning-rate schedule of GPT-2/GPT-3 training (as llm.c): linear warmup
// from 0 to `max_lr` over `warmup_steps`, then cosine decay to `min_lr` at
// `total_steps`, and `min_lr` after that. Steps are 1-based, as the
// optimizer's bias correction counts them.
#ifndef GPTC_RUNTIME_LR_SCHEDULE_H_
#define GPTC_RUNTIME_LR_SCHEDULE_H_

#include <cstdint>

namespace gptc::rt {

struct LrSchedule {
  double max_lr = 6e-4;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  // The learning rate of `step` (1-based).
  double At(int64_t step) const;
};

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_LR_SCHEDULE_H_
