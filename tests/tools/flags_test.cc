// Note [flag rules] (tools/common/flags.h): flags that apply only with
// another, or contradict it, are refused by Parse with one line naming both.
#include "tools/common/flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gptc::tools {
namespace {

Flags Declared() {
  Flags flags("tool");
  flags.Value("device", "D")
      .Value("gpu", "N")
      .Conflicts("device", "cpu")
      .Value("dir", "DIR")
      .Value("every", "N")
      .Requires("dir")
      .Bool("fast")
      .Requires("device", "emu")
      .Bool("a")
      .Bool("b")
      .Conflicts("a");
  return flags;
}

// The error of parsing `args`, or "" when they parse.
std::string Parse(std::vector<std::string> args) {
  Flags flags = Declared();
  std::vector<char*> argv = {const_cast<char*>("tool")};
  for (std::string& a : args) argv.push_back(a.data());
  Status s = flags.Parse(static_cast<int>(argv.size()), argv.data(), 1);
  return s.ok() ? "" : std::string(s.message());
}

TEST(FlagsTest, RulesRefuseFlagsThatMeanNothingThereOrContradict) {
  EXPECT_EQ(Parse({"--every", "2", "--dir", "d"}), "");
  EXPECT_EQ(Parse({"--every", "2"}), "--every applies with --dir");
  EXPECT_EQ(Parse({"--fast", "--device", "emu"}), "");
  EXPECT_EQ(Parse({"--fast", "--device", "gpu"}), "--fast applies with --device emu");
  EXPECT_EQ(Parse({"--fast"}), "--fast applies with --device emu");
  EXPECT_EQ(Parse({"--gpu", "1", "--device", "gpu"}), "");
  EXPECT_EQ(Parse({"--gpu", "1"}), "");
  EXPECT_EQ(Parse({"--gpu", "1", "--device", "cpu"}), "--gpu does not apply to --device cpu");
  EXPECT_EQ(Parse({"--a"}), "");
  EXPECT_EQ(Parse({"--a", "--b"}), "--b and --a contradict");
  // A flag error comes first; --help next to a rule's breach still helps.
  EXPECT_EQ(Parse({"--every", "2", "--bogus"}), "unknown flag --bogus (see tool --help)");
  EXPECT_EQ(Parse({"--every", "2", "--help"}), "");
}

}  // namespace
TEST(FlagsTest, RepeatedValueFlagKeepsEveryValueInOrder) {
  Flags flags("tool");
  flags.Value("log", "FILE").Value("o", "FILE");
  std::vector<std::string> args = {"--log", "a.jsonl", "--o", "x", "--log=b.jsonl"};
  std::vector<char*> argv = {const_cast<char*>("tool")};
  for (std::string& a : args) argv.push_back(a.data());
  ASSERT_TRUE(flags.Parse(static_cast<int>(argv.size()), argv.data(), 1).ok());
  EXPECT_EQ(flags.GetAll("log"), (std::vector<std::string>{"a.jsonl", "b.jsonl"}));
  EXPECT_EQ(flags.Get("log"), "b.jsonl");
  EXPECT_EQ(flags.GetAll("o"), (std::vector<std::string>{"x"}));
  EXPECT_TRUE(flags.GetAll("missing").empty());
}

}  // namespace gptc::tools

namespace gptc::tools {
namespace {

// A tool's exit code comes from its error's kind (ExitCodeOf), not its text.
TEST(ExitCodeTest, UsageIsTwoEveryOtherFailureOneOkZero) {
  EXPECT_EQ(ExitCodeOf(Status::Ok()), 0);
  EXPECT_EQ(ExitCodeOf(UsageError("--steps must be >= 1, got 0")), kExitUsage);
  EXPECT_EQ(ExitCodeOf(UsageError("x").WithPrefix("step 3")), kExitUsage);
  EXPECT_EQ(ExitCodeOf(Error("usage: looks like one but is not")), kExitFailure);
  for (StatusCode code :
       {StatusCode::kUnknown, StatusCode::kNotFound, StatusCode::kCorrupt, StatusCode::kResource,
        StatusCode::kUnavailable, StatusCode::kTimedOut, StatusCode::kInternal}) {
    EXPECT_EQ(ExitCodeOf(Status::Error("e", code)), kExitFailure) << StatusCodeName(code);
  }
}

TEST(ExitCodeTest, FlagParseErrorsAreUsageErrors) {
  Flags flags = Declared();
  std::vector<std::string> args = {"--bogus"};
  std::vector<char*> argv = {const_cast<char*>("tool")};
  for (std::string& a : args) argv.push_back(a.data());
  Status s = flags.Parse(static_cast<int>(argv.size()), argv.data(), 1);
  EXPECT_EQ(s.code(), StatusCode::kUsage) << s.message();
  std::string every = "--every=x";
  std::string dir = "--dir=d";
  std::vector<char*> bad_number = {const_cast<char*>("tool"), every.data(), dir.data()};
  Flags numbers = Declared();
  ASSERT_TRUE(numbers.Parse(3, bad_number.data(), 1).ok());
  EXPECT_EQ(numbers.GetInt("every").status().code(), StatusCode::kUsage);
}

}  // namespace
}  // namespace gptc::tools
