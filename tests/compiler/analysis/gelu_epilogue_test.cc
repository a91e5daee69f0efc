// GELU matching for the gemm epilogues (compiler/analysis/gelu_epilogue.h): the
// reference functions, the check on sample points, and the matcher on plain
// IR (the fusion rule runs the same matcher on its planner's view:
// tests/passes/gemm_fusion_test.cc).
#include "compiler/analysis/gelu_epilogue.h"

#include <gtest/gtest.h>

#include <string>

#include "compiler/ir/computation.h"
#include "tests/testing/pass_harness.h"

namespace gptc::analysis {
namespace {

using ::gptc::testing::ParseOrDie;

// The frontend's GELU of %x (f32[4,8]) ending in %g, as the lines of an entry.
constexpr const char* kGeluOfX = R"(
  %m = f32[4,8] mul(%x, %x)
  %m1 = f32[4,8] mul(%m, %x)
  %c0 = f32[] constant(0.044715)
  %b0 = f32[4,8] broadcast(%c0), dimensions={}
  %m2 = f32[4,8] mul(%b0, %m1)
  %a = f32[4,8] add(%x, %m2)
  %c1 = f32[] constant(0.7978846)
  %b1 = f32[4,8] broadcast(%c1), dimensions={}
  %m3 = f32[4,8] mul(%b1, %a)
  %t = f32[4,8] TANH(%m3)
  %c2 = f32[] constant(1)
  %b2 = f32[4,8] broadcast(%c2), dimensions={}
  %a1 = f32[4,8] add(%b2, %t)
  %c3 = f32[] constant(0.5)
  %b3 = f32[4,8] broadcast(%c3), dimensions={}
  %m4 = f32[4,8] mul(%b3, %x)
  %g = f32[4,8] mul(%m4, %a1)
)";

// With `tanh` in place of the tanh and `k` in place of sqrt(2/pi).
std::string GeluModule(const std::string& tanh = "tanh", const std::string& k = "0.7978846") {
  std::string body = kGeluOfX;
  body.replace(body.find("TANH"), 4, tanh);
  body.replace(body.find("0.7978846"), 9, k);
  return "module m\nENTRY %main {\n  %x = f32[4,8] parameter(0)" + body +
         "  ROOT %gb = bf16[4,8] convert(%g)\n}\n";
}

const ir::Instruction* Find(const ir::Module& m, const std::string& name) {
  return m.entry()->FindInstruction(name);
}

TEST(GeluEpilogueTest, ReferenceDerivativeMatchesFiniteDifferences) {
  for (double x : {-4.0, -1.5, -0.3, 0.0, 0.7, 2.0, 5.0}) {
    const double h = 1e-6;
    EXPECT_NEAR(GeluTanhGrad(x), (GeluTanh(x + h) - GeluTanh(x - h)) / (2 * h), 1e-7) << x;
  }
  EXPECT_NEAR(GeluTanh(1.0), 0.8411919906, 1e-9);
}

TEST(GeluEpilogueTest, MatchesTheFrontendGeluThroughItsStoreConvert) {
  auto m = ParseOrDie(GeluModule());
  std::optional<GeluRegion> r = MatchGelu(Find(*m, "x"));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->sink->name(), "gb");
  EXPECT_EQ(r->ops.back(), r->sink);
  EXPECT_EQ(r->ops.size(), 10u);  // the ops, not the constants' broadcasts
  EXPECT_TRUE(ComputesGelu(Find(*m, "g"), Find(*m, "x")));
}

TEST(GeluEpilogueTest, SamplesTellTheTanhFormFromOthers) {
  // The same graph with another constant: structure alone would take it.
  auto m = ParseOrDie(GeluModule("tanh", "0.8"));
  EXPECT_FALSE(ComputesGelu(Find(*m, "g"), Find(*m, "x")));
  EXPECT_FALSE(MatchGelu(Find(*m, "x")).has_value());
  // Another activation in place of tanh.
  m = ParseOrDie(GeluModule("exp"));
  EXPECT_FALSE(ComputesGelu(Find(*m, "g"), Find(*m, "x")));
  EXPECT_FALSE(MatchGelu(Find(*m, "x")).has_value());
  // The erf form has the structure but is not the tanh GELU cuBLASLt computes.
  m = ParseOrDie(GeluModule("erf"));
  EXPECT_FALSE(ComputesGelu(Find(*m, "g"), Find(*m, "x")));
  EXPECT_FALSE(MatchGelu(Find(*m, "x")).has_value());
}

TEST(GeluEpilogueTest, AnIntermediateUsedElsewhereIsNoRegion) {
  std::string text = GeluModule();
  text.replace(text.find("ROOT %gb = bf16[4,8] convert(%g)"),
               std::string("ROOT %gb = bf16[4,8] convert(%g)").size(),
               "ROOT %o = (f32[4,8], f32[4,8]) tuple(%g, %t)");
  auto m = ParseOrDie(text);
  EXPECT_FALSE(MatchGelu(Find(*m, "x")).has_value());
}

// Autodiff's GELU backward (as in the gpt2 train step): dy * GELU'(f32(x))
// from the bf16 aux %x, the intermediates recomputed from it.
constexpr const char* kGeluGrad = R"(module m
ENTRY %main {
  %x = bf16[4,8] parameter(0)
  %dy = f32[4,8] parameter(1)
  %c0 = f32[] constant(0.044715)
  %c1 = f32[] constant(0.7978846)
  %c2 = f32[] constant(1)
  %c3 = f32[] constant(0.5)
  %b0 = f32[4,8] broadcast(%c0), dimensions={}
  %b1 = f32[4,8] broadcast(%c1), dimensions={}
  %b2 = f32[4,8] broadcast(%c2), dimensions={}
  %b3 = f32[4,8] broadcast(%c3), dimensions={}
  %xf = f32[4,8] convert(%x)
  %m = f32[4,8] mul(%xf, %xf)
  %m1 = f32[4,8] mul(%m, %xf)
  %m2 = f32[4,8] mul(%b0, %m1)
  %a = f32[4,8] add(%xf, %m2)
  %m3 = f32[4,8] mul(%b1, %a)
  %t = f32[4,8] tanh(%m3)
  %a1 = f32[4,8] add(%b2, %t)
  %g5 = f32[4,8] mul(%dy, %a1)
  %g4 = f32[4,8] mul(%g5, %b3)
  %m4 = f32[4,8] mul(%b3, %xf)
  %g51 = f32[4,8] mul(%dy, %m4)
  %tt = f32[4,8] mul(%t, %t)
  %t3 = f32[4,8] sub(%b2, %tt)
  %t4 = f32[4,8] mul(%g51, %t3)
  %g3 = f32[4,8] mul(%t4, %b1)
  %s0 = f32[4,8] add(%g4, %g3)
  %g2 = f32[4,8] mul(%g3, %b0)
  %g11 = f32[4,8] mul(%g2, %m)
  %s1 = f32[4,8] add(%s0, %g11)
  %g1 = f32[4,8] mul(%g2, %xf)
  %g0 = f32[4,8] mul(%g1, %xf)
  %s2 = f32[4,8] add(%s1, %g0)
  %s3 = f32[4,8] add(%s2, %g0)
  ROOT %out = bf16[4,8] convert(%s3)
}
)";

TEST(GeluEpilogueTest, AutodiffsGeluBackwardComputesDyTimesGeluPrime) {
  auto m = ParseOrDie(kGeluGrad);
  // The bf16 store at the top is the caller's rounding, looked through.
  EXPECT_TRUE(ComputesGeluGrad(Find(*m, "out"), Find(*m, "dy"), Find(*m, "x")));
  EXPECT_TRUE(ComputesGeluGrad(Find(*m, "s3"), Find(*m, "dy"), Find(*m, "xf")));
  EXPECT_FALSE(ComputesGelu(Find(*m, "s3"), Find(*m, "x")));
}

TEST(GeluEpilogueTest, AWrongDerivativeIsNoGeluBackward) {
  // The 0.5 x (1 - t^2) k term dropped: a plausible graph, a wrong function.
  std::string text = kGeluGrad;
  text.replace(text.find("%s0 = f32[4,8] add(%g4, %g3)"),
               std::string("%s0 = f32[4,8] add(%g4, %g3)").size(), "%s0 = f32[4,8] add(%g4, %g4)");
  auto m = ParseOrDie(text);
  EXPECT_FALSE(ComputesGeluGrad(Find(*m, "s3"), Find(*m, "dy"), Find(*m, "x")));
}

}  // namespace
}  // namespace gptc::analysis
