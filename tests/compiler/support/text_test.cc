#include "compiler/support/text.h"

#include <gtest/gtest.h>

namespace gptc {
namespace {

TEST(TextTest, FormatBytesPicksTheBinaryUnit) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(int64_t{32} << 20), "32.00 MiB");
  EXPECT_EQ(FormatBytes(9014229760, 1), "8.4 GiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 40), "3.00 TiB");
}

TEST(TextTest, WithThousandsGroupsDigits) {
  EXPECT_EQ(WithThousands(0), "0");
  EXPECT_EQ(WithThousands(999), "999");
  EXPECT_EQ(WithThousands(124475904), "124,475,904");
  EXPECT_EQ(WithThousands(-1234), "-1,234");
  EXPECT_EQ(WithThousands(INT64_MIN), "-9,223,372,036,854,775,808");
}

}  // namespace
}  // namespace gptc
