#include "passes/remat.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "compiler/ir/printer.h"
#include "models/config.h"
#include "models/gpt2.h"
#include "passes/autodiff.h"
#include "passes/dce.h"
#include "passes/mixed_precision.h"
#include "tests/testing/pass_harness.h"

namespace gptc::passes {
namespace {

using ::gptc::testing::ParseOrDie;
using ::gptc::testing::RunPassAndCompare;

// autodiff + dce: the train step remat runs on.
std::unique_ptr<ir::Module> TrainStep(std::unique_ptr<ir::Module> forward) {
  Autodiff autodiff;
  Dce dce;
  EXPECT_TRUE(autodiff.Run(*forward).ok());
  EXPECT_TRUE(dce.Run(*forward).ok());
  return forward;
}

// An MLP whose backward needs %a (exp), %h (dot) and %t (tanh).
constexpr char kMlp[] = R"(module mlp
ENTRY %main {
  %x = f32[4,8] parameter(0)
  %w1 = f32[8,16] parameter(1)
  %w2 = f32[16,8] parameter(2)
  %a = f32[4,8] exp(%x), meta="l1"
  %h = f32[4,16] dot(%a, %w1), lhs_contracting={1}, rhs_contracting={0}, meta="l1"
  %t = f32[4,16] tanh(%h), meta="l2"
  %y = f32[4,8] dot(%t, %w2), lhs_contracting={1}, rhs_contracting={0}, meta="l2"
  %s = f32[4,8] mul(%y, %y), meta="loss"
  ROOT %l = f32[] reduce(%s), dimensions={0,1}, kind=sum, meta="loss"
}
)";

Remat Pass(RematPolicy policy) { return Remat({.policy = policy}); }

TEST(RematTest, NamesAndByteSizesParse) {
  for (RematPolicy p :
       {RematPolicy::kNone, RematPolicy::kDots, RematPolicy::kBlock, RematPolicy::kAuto}) {
    EXPECT_EQ(ParseRematPolicy(RematPolicyName(p)), p);
  }
  EXPECT_EQ(ParseRematPolicy("all"), std::nullopt);
  EXPECT_EQ(ParseByteSize("20GiB").value(), int64_t{20} << 30);
  EXPECT_EQ(ParseByteSize("512mib").value(), int64_t{512} << 20);
  EXPECT_EQ(ParseByteSize("1.5GB").value(), 1'500'000'000);
  EXPECT_EQ(ParseByteSize("4096").value(), 4096);
  EXPECT_FALSE(ParseByteSize("20 parsecs").ok());
  EXPECT_FALSE(ParseByteSize("GiB").ok());
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
}

TEST(RematTest, DotsRecomputesElementwiseBeforeItsBackwardUse) {
  auto module = TrainStep(ParseOrDie(kMlp));
  ASSERT_NE(module, nullptr);
  // Saved: %a, %h, %t, %y (each read by a gradient rule).
  const int64_t before = SavedActivationBytes(*module);
  Remat pass = Pass(RematPolicy::kDots);
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(pass, *module, after, /*trials=*/3, /*rel_tol=*/0.0));
  const ir::Computation* entry = after->entry();
  const ir::Instruction* a = entry->FindInstruction("remat.a");
  const ir::Instruction* t = entry->FindInstruction("remat.t");
  ASSERT_NE(a, nullptr) << ir::PrintModule(*after);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(a->metadata(), "remat.l1");
  EXPECT_EQ(t->operand(0), entry->FindInstruction("h"));  // from the saved dot
  // No gradient instruction reads the forward %a or %t any more.
  for (const char* name : {"a", "t"}) {
    for (const ir::Instruction* user : entry->FindInstruction(name)->users()) {
      EXPECT_EQ(user->metadata().rfind("grad", 0), std::string::npos) << user->name();
    }
  }
  EXPECT_LT(SavedActivationBytes(*after), before);
  // Running it again finds nothing left to recompute.
  EXPECT_FALSE(pass.Run(*after).value());
}

TEST(RematTest, TellsBackwardByNameWhenMetadataIsMissing) {
  // Without metadata autodiff tags nothing, but names its values `grad.*`.
  auto module = TrainStep(ParseOrDie(R"(module bare
ENTRY %main {
  %x = f32[4,8] parameter(0)
  %w = f32[8,8] parameter(1)
  %a = f32[4,8] exp(%x)
  %h = f32[4,8] dot(%a, %w), lhs_contracting={1}, rhs_contracting={0}
  ROOT %l = f32[] reduce(%h), dimensions={0,1}, kind=sum
}
)"));
  ASSERT_NE(module, nullptr);
  Remat pass = Pass(RematPolicy::kDots);
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(pass, *module, after, /*trials=*/2, /*rel_tol=*/0.0));
  EXPECT_NE(after->entry()->FindInstruction("remat.a"), nullptr) << ir::PrintModule(*after);
  EXPECT_EQ(SavedActivationBytes(*after), 0);  // %a is recomputed, the dot is not read
}

// Note [cheap recomputation]: even without a policy, %a = exp(%x) and
// %t = tanh(%h) are recomputed from the one value each reads.
TEST(RematTest, NoneRecomputesElementwiseOfOneValue) {
  auto module = TrainStep(ParseOrDie(kMlp));
  ASSERT_NE(module, nullptr);
  const int64_t before = SavedActivationBytes(*module);
  Remat pass = Pass(RematPolicy::kNone);
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(pass, *module, after, /*trials=*/2, /*rel_tol=*/0.0));
  const ir::Computation* entry = after->entry();
  const ir::Instruction* t = entry->FindInstruction("remat.t");
  ASSERT_NE(t, nullptr) << ir::PrintModule(*after);
  EXPECT_EQ(t->operand(0), entry->FindInstruction("h"));
  ASSERT_NE(entry->FindInstruction("remat.a"), nullptr);
  EXPECT_LT(SavedActivationBytes(*after), before);
  EXPECT_FALSE(pass.Run(*after).value());
}

// %t = tanh(%h * %g) reads two dots: kept. %y = convert(convert(%t)) is
// recomputed from %t, which the tanh gradient saves anyway.
TEST(RematTest, NoneKeepsValuesOfSeveralSources) {
  auto module = TrainStep(ParseOrDie(R"(module two
ENTRY %main {
  %x = f32[4,8] parameter(0)
  %w1 = f32[8,8] parameter(1)
  %w2 = f32[8,8] parameter(2)
  %h = f32[4,8] dot(%x, %w1), lhs_contracting={1}, rhs_contracting={0}, meta="l1"
  %g = f32[4,8] dot(%x, %w2), lhs_contracting={1}, rhs_contracting={0}, meta="l1"
  %m = f32[4,8] mul(%h, %g), meta="l2"
  %t = f32[4,8] tanh(%m), meta="l2"
  %n = bf16[4,8] convert(%t), meta="l3"
  %y = f32[4,8] convert(%n), meta="l3"
  %s = f32[4,8] mul(%y, %y), meta="loss"
  ROOT %l = f32[] reduce(%s), dimensions={0,1}, kind=sum, meta="loss"
}
)"));
  ASSERT_NE(module, nullptr);
  Remat pass = Pass(RematPolicy::kNone);
  std::unique_ptr<ir::Module> after;
  RunPassAndCompare(pass, *module, after, /*trials=*/1, /*rel_tol=*/0.0);
  const ir::Computation* entry = after->entry();
  EXPECT_EQ(entry->FindInstruction("remat.m"), nullptr) << ir::PrintModule(*after);
  EXPECT_EQ(entry->FindInstruction("remat.t"), nullptr);
  const ir::Instruction* y = entry->FindInstruction("remat.y");
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(y->operand(0)->operand(0), entry->FindInstruction("t"));
}

// Note [cheap recomputation]: under Note [bf16 GELU epilogue] the backward
// reads functions of %pre.f32 = f32(%pre.bf16), whose whole cone reaches the
// dot and the bias (two values): they are recomputed from %pre.bf16, the
// narrower value their cones pass through, and the f32 %pre is not kept.
TEST(RematTest, NoneRecomputesFromANarrowerCopy) {
  auto module = TrainStep(ParseOrDie(R"(module narrow
ENTRY %main {
  %x = f32[4,8] parameter(0)
  %w = f32[8,8] parameter(1)
  %b = f32[8] parameter(2)
  %h = f32[4,8] dot(%x, %w), lhs_contracting={1}, rhs_contracting={0}, meta="l1"
  %bb = f32[4,8] broadcast(%b), dimensions={1}, meta="l1"
  %pre = f32[4,8] add(%h, %bb), meta="l1"
  %n = bf16[4,8] convert(%pre), meta="l1"
  %y = f32[4,8] convert(%n), meta="l1"
  %t = f32[4,8] tanh(%y), meta="l2"
  %s = f32[4,8] mul(%t, %t), meta="loss"
  ROOT %l = f32[] reduce(%s), dimensions={0,1}, kind=sum, meta="loss"
}
)"));
  ASSERT_NE(module, nullptr);
  Remat pass = Pass(RematPolicy::kNone);
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(pass, *module, after, /*trials=*/1, /*rel_tol=*/0.0));
  const ir::Computation* entry = after->entry();
  const ir::Instruction* t = entry->FindInstruction("remat.t");
  ASSERT_NE(t, nullptr) << ir::PrintModule(*after);
  EXPECT_EQ(t->operand(0)->name(), "remat.y");
  EXPECT_EQ(t->operand(0)->operand(0), entry->FindInstruction("n"));
  // Saved: %n alone (bf16[4,8]).
  EXPECT_EQ(SavedActivationBytes(*after), 4 * 8 * 2) << ir::PrintModule(*after);
}

// Note [cheap recomputation]: a layer norm's x - mean reads x and a broadcast
// of the per-row mean, and x-hat = (x - mean) * rstd reads x - mean and a
// broadcast of rstd: both are recomputed from x (here a parameter), and the
// backward keeps only per-row values.
TEST(RematTest, NoneRecomputesThroughBroadcastsOfSmallValues) {
  auto module = TrainStep(ParseOrDie(R"(module layer_norm
ENTRY %main {
  %x = f32[16,8] parameter(0)
  %w = f32[8,8] parameter(1)
  %sum = f32[16] reduce(%x), dimensions={1}, kind=sum, meta="ln"
  %n = f32[] constant(8), meta="ln"
  %nb = f32[16] broadcast(%n), dimensions={}, meta="ln"
  %mean = f32[16] div(%sum, %nb), meta="ln"
  %mb = f32[16,8] broadcast(%mean), dimensions={0}, meta="ln"
  %d = f32[16,8] sub(%x, %mb), meta="ln"
  %d2 = f32[16,8] mul(%d, %d), meta="ln"
  %var = f32[16] reduce(%d2), dimensions={1}, kind=sum, meta="ln"
  %rstd = f32[16] rsqrt(%var), meta="ln"
  %rb = f32[16,8] broadcast(%rstd), dimensions={0}, meta="ln"
  %xhat = f32[16,8] mul(%d, %rb), meta="ln"
  %h = f32[16,8] dot(%xhat, %w), lhs_contracting={1}, rhs_contracting={0}, meta="fc"
  %s = f32[16,8] mul(%h, %h), meta="loss"
  ROOT %l = f32[] reduce(%s), dimensions={0,1}, kind=sum, meta="loss"
}
)"));
  ASSERT_NE(module, nullptr);
  Remat pass = Pass(RematPolicy::kNone);
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(pass, *module, after, /*trials=*/2, /*rel_tol=*/0.0));
  const ir::Computation* entry = after->entry();
  const ir::Instruction* xhat = entry->FindInstruction("remat.xhat");
  ASSERT_NE(xhat, nullptr) << ir::PrintModule(*after);
  EXPECT_EQ(xhat->operand(0)->name(), "remat.d");
  EXPECT_EQ(xhat->operand(0)->operand(0), entry->FindInstruction("x"));
  EXPECT_EQ(xhat->operand(1)->opcode(), ir::Opcode::kBroadcast);
  // The backward reads no full-size value of the layer norm's forward.
  for (const auto& inst : entry->instructions()) {
    if (inst->metadata() != "ln" || inst->shape().num_elements() != 16 * 8) continue;
    for (const ir::Instruction* user : inst->users()) {
      EXPECT_FALSE(user->metadata().starts_with("grad"))
          << user->name() << " reads " << inst->name();
    }
  }
}

TEST(RematTest, ForwardOnlyModuleIsLeftAlone) {
  auto module = ParseOrDie(kMlp);  // no backward: nothing is saved
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(SavedActivationBytes(*module), 0);
  for (RematPolicy policy : {RematPolicy::kDots, RematPolicy::kBlock}) {
    Remat pass = Pass(policy);
    std::unique_ptr<ir::Module> after;
    EXPECT_FALSE(RunPassAndCompare(pass, *module, after)) << RematPolicyName(policy);
  }
  // auto is a plan the compile driver chooses; the pass alone refuses it.
  Remat automatic = Pass(RematPolicy::kAuto);
  StatusOr<bool> refused = automatic.Run(*module);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--remat auto --memory-budget"), std::string::npos)
      << refused.status().message();
}

TEST(RematTest, PlansPrintAndParse) {
  using P = RematPolicy;
  const std::vector<P> plan = {P::kBlock, P::kBlock, P::kBlock, P::kDots, P::kNone, P::kNone};
  EXPECT_EQ(FormatRematPlan(plan), "block:0-2,dots:3,none:4-5");
  EXPECT_EQ(ParseRematPlan("block:0-2,dots:3,none:4-5").value(), plan);
  EXPECT_EQ(ParseRematPlan("none:0-11").value(), std::vector<P>(12, P::kNone));
  for (const char* bad : {"", "block:1-3", "fast:0-3", "block:0-x", "block:0-3,none:3",
                          "block:0-3,none:5-7", "auto:0-3", "block:3-1", "block"}) {
    StatusOr<std::vector<P>> parsed = ParseRematPlan(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    if (!parsed.ok()) {
      EXPECT_NE(parsed.status().message().find("remat plan"), std::string::npos);
    }
  }
}

// gpt2-tiny narrowed to width 32, batch 2, seq 16.
std::unique_ptr<ir::Module> TinyTrainStep() {
  models::GptConfig config = models::FindGptConfig("gpt2-tiny").value();
  models::ConfigOverrides narrow;
  narrow.width = 32;
  config = models::ApplyOverrides(config, narrow);
  StatusOr<frontend::TracedModule> traced = models::TraceGpt2Forward(config, 2, 16);
  EXPECT_TRUE(traced.ok()) << traced.status().message();
  return TrainStep(std::move(traced->module));
}

TEST(RematTest, Gpt2TinyPoliciesPreserveResultsAndShrinkSavedBytes) {
  std::unique_ptr<ir::Module> module = TinyTrainStep();
  ASSERT_NE(module, nullptr);
  const int64_t none = SavedActivationBytes(*module);
  std::printf("gpt2-tiny(w32,b2,t16) saved activations: none %lld\n", static_cast<long long>(none));
  int64_t previous = none;
  for (RematPolicy policy : {RematPolicy::kDots, RematPolicy::kBlock}) {
    Remat pass = Pass(policy);
    std::unique_ptr<ir::Module> after;
    EXPECT_TRUE(RunPassAndCompare(pass, *module, after, /*trials=*/1, /*rel_tol=*/0.0))
        << RematPolicyName(policy);
    int64_t saved = SavedActivationBytes(*after);
    std::printf("gpt2-tiny(w32,b2,t16) saved activations: %s %lld\n",
                std::string(RematPolicyName(policy)).c_str(), static_cast<long long>(saved));
    EXPECT_LT(saved, previous) << RematPolicyName(policy);
    previous = saved;
  }
}

TEST(RematTest, Gpt2TinyPlansPerBlock) {
  std::unique_ptr<ir::Module> module = TinyTrainStep();  // two blocks
  ASSERT_NE(module, nullptr);
  auto run = [&](RematOptions options) {
    std::unique_ptr<ir::Module> m = module->Clone();
    Remat pass(options);
    StatusOr<bool> changed = pass.Run(*m);
    EXPECT_TRUE(changed.ok()) << changed.status().message();
    return m;
  };
  using P = RematPolicy;
  // A uniform plan is its policy, instruction for instruction.
  for (P p : {P::kNone, P::kDots, P::kWide, P::kBlock}) {
    EXPECT_EQ(ir::PrintModule(*run({.layers = {p, p}})), ir::PrintModule(*run({.policy = p})))
        << RematPolicyName(p);
  }
  // Mixed plans compute the same values, and save between the uniform ones.
  const int64_t none = SavedActivationBytes(*run({.policy = P::kNone}));
  const int64_t block = SavedActivationBytes(*run({.policy = P::kBlock}));
  for (std::vector<P> plan : {std::vector<P>{P::kBlock, P::kNone},
                              {P::kNone, P::kBlock},
                              {P::kDots, P::kNone},
                              {P::kBlock, P::kDots}}) {
    Remat pass({.layers = plan});
    std::unique_ptr<ir::Module> after;
    EXPECT_TRUE(RunPassAndCompare(pass, *module, after, /*trials=*/1, /*rel_tol=*/0.0))
        << FormatRematPlan(plan);
    const int64_t saved = SavedActivationBytes(*after);
    EXPECT_LT(saved, none) << FormatRematPlan(plan);
    EXPECT_GT(saved, block) << FormatRematPlan(plan);
  }
  // A plan for another depth is refused, naming both counts.
  std::unique_ptr<ir::Module> m = module->Clone();
  Remat wrong({.layers = {P::kBlock, P::kNone, P::kNone}});
  StatusOr<bool> failed = wrong.Run(*m);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("names 3 blocks but"), std::string::npos)
      << failed.status().message();
  EXPECT_NE(failed.status().message().find("has 2"), std::string::npos);
}

TEST(RematTest, Gpt2TinyMixedPrecisionThenRematIsExact) {
  models::GptConfig config = models::FindGptConfig("gpt2-tiny").value();
  models::ConfigOverrides narrow;
  narrow.width = 32;
  config = models::ApplyOverrides(config, narrow);
  StatusOr<frontend::TracedModule> traced = models::TraceGpt2Forward(config, 2, 16);
  ASSERT_TRUE(traced.ok());
  MixedPrecision mp;
  ASSERT_TRUE(mp.Run(*traced->module).value());
  std::unique_ptr<ir::Module> module = TrainStep(std::move(traced->module));
  Remat pass = Pass(RematPolicy::kBlock);
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(pass, *module, after, /*trials=*/1, /*rel_tol=*/0.0));
}

// The numbers for the report: gpt2-124m, batch 16, seq 1024 (trace and
// autodiff only). Run with --gtest_also_run_disabled_tests.
TEST(RematTest, DISABLED_Gpt2_124mSavedActivationBytes) {
  models::GptConfig config = models::FindGptConfig("gpt2-124m").value();
  for (bool bf16 : {false, true}) {
    StatusOr<frontend::TracedModule> traced = models::TraceGpt2Forward(config, 16, 1024);
    ASSERT_TRUE(traced.ok());
    if (bf16) {
      MixedPrecision mp;
      ASSERT_TRUE(mp.Run(*traced->module).ok());
    }
    std::unique_ptr<ir::Module> module = TrainStep(std::move(traced->module));
    for (RematPolicy policy : {RematPolicy::kNone, RematPolicy::kDots, RematPolicy::kBlock}) {
      std::unique_ptr<ir::Module> m = module->Clone();
      Remat pass = Pass(policy);
      ASSERT_TRUE(pass.Run(*m).ok());
      int64_t saved = SavedActivationBytes(*m);
      std::printf("gpt2-124m b16 t1024 %s remat=%s: %lld bytes (%s)\n", bf16 ? "bf16" : "f32",
                  std::string(RematPolicyName(policy)).c_str(), static_cast<long long>(saved),
                  FormatBytes(saved).c_str());
    }
  }
}

}  // namespace
}  // namespace gptc::passes
