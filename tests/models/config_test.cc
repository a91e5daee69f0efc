// Model configs: published parameter counts, the traced module agreeing
// with the formula, overrides and validation messages.
#include "models/config.h"

#include <gtest/gtest.h>

#include "models/gpt2.h"

namespace gptc::models {
namespace {

int64_t Count(std::string_view name, bool padded) {
  StatusOr<GptConfig> c = FindGptConfig(name);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return ParameterCount(*c, padded ? c->padded_vocab : c->vocab);
}

TEST(ConfigTest, PublishedParameterCounts) {
  // The GPT-2 paper's models with the 50,257-token vocabulary (as Hugging Face reports).
  EXPECT_EQ(Count("gpt2-124m", false), 124'439'808);
  EXPECT_EQ(Count("gpt2-350m", false), 354'823'168);
  EXPECT_EQ(Count("gpt2-774m", false), 774'030'080);
  EXPECT_EQ(Count("gpt2-1558m", false), 1'557'611'200);
  // Padding the token table to 50,304 rows adds 47 * width.
  EXPECT_EQ(Count("gpt2-124m", true), 124'439'808 + 47 * 768);
  EXPECT_EQ(Count("gpt2-1558m", true), 1'557'611'200 + 47 * 1600);
  EXPECT_EQ(Count("gpt2-tiny", false), 3'320'640);
}

TEST(ConfigTest, PaddedVocabulary) {
  EXPECT_EQ(PadVocab(kGpt2Vocab), 50'304);
  EXPECT_EQ(PadVocab(128), 128);
  for (const GptConfig& c : GptConfigs()) {
    EXPECT_EQ(c.vocab, 50'257) << c.name;
    EXPECT_EQ(c.padded_vocab, 50'304) << c.name;
    EXPECT_TRUE(ValidateGptConfig(c).ok()) << c.name;
  }
}

TEST(ConfigTest, TracedParametersMatchTheFormulaForEveryConfig) {
  // Tracing is cheap (no tensors are allocated), so every config is traced.
  for (const GptConfig& c : GptConfigs()) {
    StatusOr<frontend::TracedModule> traced = TraceGpt2Forward(c, 1, 8);
    ASSERT_TRUE(traced.ok()) << c.name << ": " << traced.status().message();
    EXPECT_EQ(traced->ParameterValues(), ParameterCount(c, c.padded_vocab)) << c.name;
    // wte, wpe; 12 per block; ln_f gain and bias.
    EXPECT_EQ(static_cast<int64_t>(traced->params.size()), 2 + 12 * c.layers + 2) << c.name;
  }
}

TEST(ConfigTest, UnknownModelListsTheKnownOnes) {
  StatusOr<GptConfig> c = FindGptConfig("gpt3");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "unknown model 'gpt3' (known: gpt2-tiny, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m)");
}

ConfigOverrides Override(std::optional<int64_t> layers, std::optional<int64_t> heads,
                         std::optional<int64_t> width) {
  ConfigOverrides o;
  o.layers = layers;
  o.heads = heads;
  o.width = width;
  return o;
}

TEST(ConfigTest, OverridesAndValidation) {
  GptConfig base = *FindGptConfig("gpt2-124m");
  GptConfig c = ApplyOverrides(base, Override(2, 4, 64));
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.head_dim(), 16);
  EXPECT_EQ(c.positions, 1024);
  EXPECT_TRUE(ValidateGptConfig(c).ok());

  EXPECT_EQ(ValidateGptConfig(ApplyOverrides(base, Override({}, 7, {}))).message(),
            "gpt2-124m: heads (7) must divide width (768)");
  EXPECT_EQ(ValidateGptConfig(ApplyOverrides(base, Override(0, {}, {}))).message(),
            "gpt2-124m: layers must be in [1, 4096], got 0");
  EXPECT_EQ(ValidateTraceShape(base, 16, 2048).message(),
            "gpt2-124m: seq 2048 exceeds the position table (1024 positions)");
  EXPECT_EQ(ValidateTraceShape(base, 0, 16).message(),
            "gpt2-124m: batch must be in [1, 16777216], got 0");
  GptConfig long_context = base;
  long_context.positions = 1 << 24;
  // (B, H, T, T) attention scores would not be indexable in int64.
  EXPECT_EQ(ValidateTraceShape(long_context, 1 << 20, 1 << 22).message(),
            "gpt2-124m: batch 1048576 x seq 4194304 is too large to index");
  EXPECT_TRUE(ValidateTraceShape(base, 16, 1024).ok());
  StatusOr<frontend::TracedModule> traced = TraceGpt2Forward(base, 16, 2048);
  ASSERT_FALSE(traced.ok());
  EXPECT_EQ(traced.status().message(),
            "gpt2-124m: seq 2048 exceeds the position table (1024 positions)");
}

}  // namespace
}  // namespace gptc::models
