// End to end: gptrun's checkpoint carries config.json, and `gptc export-hf`
// turns it into a Hugging Face GPT-2 directory (runtime/hf_export_test.cc
// checks the mapping tensor by tensor); its usage errors exit 2, its failures
// 1, each one line.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/data_loader.h"
#include "runtime/safetensors.h"
#include "tests/testing/command.h"

namespace gptc {
namespace {

namespace fs = std::filesystem;
using testing::ReadAll;

using Result = testing::CommandResult;

int LineCount(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

class ExportHfTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::path(::testing::TempDir()) /
                        ("export_hf_test_" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 2000; ++i) tokens.push_back((i * 7 + i / 13) % 300);
    std::ofstream(*dir_ / "train_000.bin", std::ios::binary) << rt::EncodeShard(tokens);
    const std::string gptx = (*dir_ / "tiny.gptx").string();
    Result c = Run(std::string(GPTC_BIN) +
                   " compile --model gpt2-tiny --layers 1 --heads 2 --width 32 --batch 2 --seq 16"
                   " --no-codegen -o " +
                   gptx);
    ASSERT_EQ(c.code, 0) << c.out << c.err;
    Result r = Run(std::string(GPTRUN_BIN) + " " + gptx + " --device cpu --train '" +
                   (*dir_ / "train_*.bin").string() + "' --steps 1 --ckpt-dir " +
                   (*dir_ / "ckpt").string());
    ASSERT_EQ(r.code, 0) << r.out << r.err;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  static Result Run(const std::string& command) { return testing::RunCommand(command, *dir_); }
  static Result Export(const std::string& args) {
    return Run(std::string(GPTC_BIN) + " export-hf " + args);
  }

  static fs::path* dir_;
};

fs::path* ExportHfTest::dir_ = nullptr;

TEST_F(ExportHfTest, GptrunWritesTheModelConfig) {
  const nlohmann::json config = nlohmann::json::parse(
      ReadAll(*dir_ / "ckpt" / "step_000001" / "config.json"), nullptr, false);
  const nlohmann::json want = {{"name", "gpt2-tiny"},  {"layers", 1},     {"heads", 2},
                               {"width", 32},          {"positions", 64}, {"vocab", 50257},
                               {"padded_vocab", 50304}};
  EXPECT_EQ(config, want);
}

TEST_F(ExportHfTest, ExportsTheCheckpoint) {
  const fs::path ckpt = *dir_ / "ckpt" / "step_000001", out = *dir_ / "hf";
  Result r = Export(ckpt.string() + " " + out.string());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "exported " + ckpt.string() +
                       " (gpt2-tiny at step 1: layers 1, heads 2, width 32, vocab 50257) to " +
                       out.string() + ": 16 tensors, 1,623,040 values\n");
  StatusOr<rt::SafeTensors> hf = rt::ReadSafeTensors((out / "model.safetensors").string());
  ASSERT_TRUE(hf.ok()) << hf.status().message();
  const rt::SafeTensor* wte = hf->Find("transformer.wte.weight");
  ASSERT_NE(wte, nullptr);
  EXPECT_EQ(wte->shape, (std::vector<int64_t>{50257, 32}));  // the real rows, not 50304
  ASSERT_NE(hf->Find("transformer.h.0.attn.c_attn.weight"), nullptr);
  EXPECT_EQ(hf->Find("transformer.h.0.attn.c_attn.weight")->shape, (std::vector<int64_t>{32, 96}));
  const nlohmann::json config = nlohmann::json::parse(ReadAll(out / "config.json"), nullptr, false);
  EXPECT_EQ(config["model_type"], "gpt2");
  EXPECT_EQ(config["vocab_size"], 50257);
  EXPECT_EQ(config["n_positions"], 64);
  EXPECT_EQ(config["eos_token_id"], 50256);
}

// The checkpoint itself, or a non-empty directory without --force, is never
// written into: a checkpoint's config.json and model.safetensors have the
// names the HF files take.
TEST_F(ExportHfTest, RefusesTheCheckpointAndNonEmptyDirectories) {
  const fs::path ckpt = *dir_ / "ckpt" / "step_000001";
  const std::string model_before = ReadAll(ckpt / "model.safetensors");
  Result r = Export(ckpt.string() + " " + ckpt.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(LineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("is the checkpoint"), std::string::npos) << r.err;
  EXPECT_EQ(ReadAll(ckpt / "model.safetensors"), model_before);
  const fs::path full = *dir_ / "full";
  fs::create_directories(full);
  std::ofstream(full / "notes.txt") << "mine";
  r = Export(ckpt.string() + " " + full.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gptc: export-hf: OUT_DIR " + full.string() +
                       " is not empty (--force writes into it)\n");
  r = Export("--force " + ckpt.string() + " " + full.string());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(full / "model.safetensors"));
  EXPECT_EQ(ReadAll(full / "notes.txt"), "mine");
}

TEST_F(ExportHfTest, Errors) {
  // Usage: exit 2, naming --help.
  for (const std::string args : {"", "one", "a b c", "--bogus a b"}) {
    Result r = Export(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(LineCount(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("gptc export-hf --help"), std::string::npos) << r.err;
  }
  // Failures: exit 1, one line naming the file.
  const std::string missing = (*dir_ / "nope").string();
  Result r = Export(missing + " " + (*dir_ / "out").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "gptc: " + missing + ": No such file or directory\n");
  const std::string file = (*dir_ / "a_file").string();
  std::ofstream(file) << "x";
  r = Export((*dir_ / "ckpt" / "step_000001").string() + " " + file);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "gptc: " + file + ": exists and is not a directory\n");
}

}  // namespace
}  // namespace gptc
