// The table of targets and the rule of which instructions a target has
// (compiler/codegen/target.h), and codegen's check of its options by them.
#include "compiler/codegen/target.h"

#include <gtest/gtest.h>

#include "compiler/codegen/codegen.h"

namespace gptc::codegen {
namespace {

TEST(TargetTest, EveryTargetParsesFromItsName) {
  for (const TargetInfo& info : kTargets) {
    EXPECT_EQ(ParseTarget(info.name), info.target) << info.name;
    EXPECT_EQ(TargetName(info.target), info.name);
    EXPECT_TRUE(CheckTarget(info.name).ok()) << info.name;
  }
  EXPECT_EQ(ParseTarget("sm_75"), std::nullopt);
  EXPECT_EQ(TargetNames(", ", " or "), "sm_90a, sm_90 or sm_80");
  EXPECT_EQ(TargetNames("|", "|"), "sm_90a|sm_90|sm_80");
}

TEST(TargetTest, WgmmaNeedsTheArchSpecificHopperTarget) {
  EXPECT_EQ(TargetRequiredBy(AttentionMma::kWgmma), Target::kSm90a);
  EXPECT_EQ(TargetRequiredBy(AttentionMma::kMmaSync), std::nullopt);
  for (const TargetInfo& info : kTargets) {
    EXPECT_TRUE(TargetHas(info.target, AttentionMma::kMmaSync)) << info.name;
    // The instructions wgmma needs are arch-specific: only an "a" target has them.
    EXPECT_EQ(TargetHas(info.target, AttentionMma::kWgmma), info.arch_specific) << info.name;
  }
}

TEST(TargetTest, CodegenRefusesWgmmaOffSm90a) {
  CodegenOptions options;
  options.attention_mma = AttentionMma::kWgmma;
  EXPECT_TRUE(CheckCodegenOptions(options).ok());
  options.target = "sm_80";
  EXPECT_EQ(CheckCodegenOptions(options).message(),
            "attention on wgmma needs target sm_90a, not sm_80");
  options.target = "sm_75";
  EXPECT_EQ(CheckCodegenOptions(options).message(),
            "target sm_75: expected sm_90a, sm_90 or sm_80");
}

}  // namespace
}  // namespace gptc::codegen
