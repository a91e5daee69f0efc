#include "runtime/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace gptc::rt {

double LrSchedule::At(int64_t step) const {
  if (warmup_steps > 0 && step <= warmup_steps) {
    return max_lr * static_cast<double>(step) / static_cast<double>(warmup_steps);
  }
  if (step >= total_steps) return total_steps <= warmup_steps ? max_lr : min_lr;
  const double progress = static_cast<double>(step - warmup_steps) /
                          static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return min_lr + coeff * (max_lr - min_lr);
}

}  // namespace gptc::rt
