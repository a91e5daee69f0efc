// llm.c's eval file (runtime/eval_file.h): a write and a read give the
// examples back, and every damaged field is refused in one line naming the
// file, the example and the field.
#include "runtime/eval_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "compiler/support/file.h"

namespace gptc::rt {
namespace {

constexpr char kName[] = "sets/hellaswag_val.bin";

std::vector<EvalExample> SmallSet() {
  std::vector<EvalExample> set;
  for (int64_t i = 0; i < 5; ++i) {
    EvalExample e{.index = i, .label = i % 4, .context = {}, .completions = {}};
    for (int64_t t = 0; t < 3 + i; ++t) e.context.push_back(static_cast<int32_t>(100 * i + t));
    for (int64_t k = 0; k < 4; ++k) {
      e.completions.push_back(std::vector<int32_t>(1 + (i + k) % 3, 50256 - k));
    }
    set.push_back(e);
  }
  return set;
}

// The byte offset of example `i` of `bytes`.
int64_t ExampleOffset(const std::string& bytes, int64_t i) {
  int64_t offset = kEvalHeaderBytes;
  for (int64_t k = 0; k < i; ++k) {
    uint16_t size;
    std::memcpy(&size, bytes.data() + offset + 2, 2);
    offset += size;
  }
  return offset;
}

void PutU16(std::string& bytes, int64_t offset, uint16_t v) {
  std::memcpy(bytes.data() + offset, &v, 2);
}
void PutI32(std::string& bytes, int64_t offset, int32_t v) {
  std::memcpy(bytes.data() + offset, &v, 4);
}

// The error for `bytes`, which must be refused as corrupt in one line naming the file.
std::string Refusal(const std::string& bytes) {
  StatusOr<EvalSet> set = ParseEvalFile(bytes, kName);
  if (set.ok()) return "accepted";
  EXPECT_EQ(set.status().code(), StatusCode::kCorrupt) << set.status().message();
  const std::string& m = set.status().message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_TRUE(m.starts_with(std::string(kName) + ": ")) << m;
  return m;
}

TEST(EvalFileTest, WriteAndReadGiveTheExamplesBack) {
  const std::vector<EvalExample> set = SmallSet();
  StatusOr<std::string> bytes = EncodeEvalFile(set);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  const auto path = std::filesystem::path(::testing::TempDir()) / "eval_round_trip.bin";
  ASSERT_TRUE(WriteFileAtomically(path.string(), *bytes).ok());
  StatusOr<EvalSet> read = ReadEvalFile(path.string());
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->examples, set);
  int64_t longest = 0;
  for (int64_t i = 0; i < 5; ++i) {
    longest = std::max(longest, ExampleOffset(*bytes, i + 1) - ExampleOffset(*bytes, i));
  }
  EXPECT_EQ(read->longest_example_bytes, longest);
  EXPECT_EQ(ExampleOffset(*bytes, 5), static_cast<int64_t>(bytes->size()));
  std::filesystem::remove(path);
}

TEST(EvalFileTest, MissingFileIsNotFound) {
  StatusOr<EvalSet> set = ReadEvalFile("/nonexistent/hellaswag_val.bin");
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), StatusCode::kNotFound);
  EXPECT_NE(set.status().message().find("/nonexistent/hellaswag_val.bin"), std::string::npos);
}

TEST(EvalFileTest, WriterRefusesWhatTheFormatCannotHold) {
  std::vector<EvalExample> set = SmallSet();
  set[2].label = 4;
  EXPECT_FALSE(EncodeEvalFile(set).ok());
  set = SmallSet();
  set[1].context.push_back(65535);
  EXPECT_FALSE(EncodeEvalFile(set).ok());
  set = SmallSet();
  set[0].completions.clear();
  set[0].label = 0;
  EXPECT_FALSE(EncodeEvalFile(set).ok());
  EXPECT_FALSE(EncodeEvalFile({}).ok());
}

// Each damaged field: what is changed, and the words its error must hold.
TEST(EvalFileTest, EveryDamagedFieldIsRefusedInOneLineNamingIt) {
  const std::string good = *EncodeEvalFile(SmallSet());
  const int64_t ex2 = ExampleOffset(good, 2);
  const std::string at2 = "example 2 (index 2, byte offset " + std::to_string(ex2) + ")";
  struct Case {
    const char* what;
    std::function<void(std::string&)> damage;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"magic", [](std::string& b) { PutI32(b, 0, 20240520); }, "offset 0: bad magic 20240520"},
      {"version", [](std::string& b) { PutI32(b, 4, 2); }, "offset 4: unsupported version 2"},
      {"count 0", [](std::string& b) { PutI32(b, 8, 0); }, "offset 8: example count 0"},
      {"count huge", [](std::string& b) { PutI32(b, 8, 2000000000); }, "example count 2000000000"},
      {"count short", [](std::string& b) { PutI32(b, 8, 4); },
       "trailing bytes after the last of 4"},
      {"longest 0", [](std::string& b) { PutI32(b, 12, 0); }, "offset 12: longest example 0"},
      {"longest low", [&](std::string& b) { PutI32(b, 12, 20); }, "byte count"},
      {"longest high", [](std::string& b) { PutI32(b, 12, 1000); }, "but the longest is"},
      {"marker", [&](std::string& b) { PutU16(b, ex2, 7); }, "start marker is 7"},
      {"byte count odd", [&](std::string& b) { PutU16(b, ex2 + 2, 33); }, at2 + ": byte count 33"},
      {"byte count long", [&](std::string& b) { PutU16(b, ex2 + 2, 16); },
       at2 + ": context length"},
      {"label", [&](std::string& b) { PutU16(b, ex2 + 6, 4); }, at2 + ": label 4 is not one of"},
      {"completion count", [&](std::string& b) { PutU16(b, ex2 + 8, 0); }, "completion count is 0"},
      {"fewer completions", [&](std::string& b) { PutU16(b, ex2 + 8, 3); }, "but its fields fill"},
      {"context length", [&](std::string& b) { PutU16(b, ex2 + 10, 900); }, "context length 900"},
      {"completion length", [&](std::string& b) { PutU16(b, ex2 + 12 + 10, 900); },
       "completion 0 length 900"},
      {"token", [&](std::string& b) { PutU16(b, ex2 + 12, 50257); },
       at2 + ": context token 0 is id 50257"},
      {"truncated", [](std::string& b) { b.resize(b.size() - 3); }, "truncated"},
      {"truncated header", [](std::string& b) { b.resize(1000); }, "short file: 1000 bytes"},
      {"trailing", [](std::string& b) { b += "xy"; }, "2 trailing bytes"},
  };
  for (const Case& c : cases) {
    std::string bytes = good;
    c.damage(bytes);
    const std::string m = Refusal(bytes);
    EXPECT_NE(m.find(c.expected), std::string::npos) << c.what << ": " << m;
  }
}

}  // namespace
}  // namespace gptc::rt
