#include "runtime/lr_schedule.h"

#include <gtest/gtest.h>

namespace gptc::rt {
namespace {

TEST(LrScheduleTest, WarmupThenCosineToFloor) {
  LrSchedule s{.max_lr = 6e-4, .min_lr = 6e-5, .warmup_steps = 10, .total_steps = 110};
  EXPECT_DOUBLE_EQ(s.At(1), 6e-5);
  EXPECT_DOUBLE_EQ(s.At(5), 3e-4);
  EXPECT_DOUBLE_EQ(s.At(10), 6e-4);
  EXPECT_NEAR(s.At(60), (6e-4 + 6e-5) / 2, 1e-15);  // half way through the decay
  EXPECT_DOUBLE_EQ(s.At(110), 6e-5);
  EXPECT_DOUBLE_EQ(s.At(500), 6e-5);
  for (int64_t t = 11; t < 110; ++t) EXPECT_LT(s.At(t + 1), s.At(t)) << t;
}

TEST(LrScheduleTest, NoWarmup) {
  LrSchedule s{.max_lr = 1e-3, .min_lr = 0, .warmup_steps = 0, .total_steps = 100};
  EXPECT_NEAR(s.At(1), 1e-3, 1e-6);
  EXPECT_DOUBLE_EQ(s.At(100), 0.0);
}

}  // namespace
}  // namespace gptc::rt
