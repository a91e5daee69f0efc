// End to end: `gptc import-hf` turns a Hugging Face GPT-2 directory into a
// checkpoint that gptrun resumes and export-hf gives back unchanged
// (runtime/hf_import_test.cc checks the mapping and its refusals through the
// library); the model is named after the built-in config of its sizes; usage
// errors exit 2, failures 1, each one line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
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

constexpr int64_t kVocab = 50257;  // GPT-2's, the only one gptc compile makes

int LineCount(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

// GPT2Model's state dict with `layers` blocks of `width`, 64 positions, as
// the released openai-community/gpt2 file names it (no "transformer.", the
// attention-mask buffers), at small exact values; `drop` is left out.
rt::SafeTensors StateDict(int64_t layers, int64_t width, const std::string& drop = "") {
  const int64_t c = width;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {{"wte.weight", {kVocab, c}},
                                                                      {"wpe.weight", {64, c}}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    shapes.insert(shapes.end(), {{h + "ln_1.weight", {c}},
                                 {h + "ln_1.bias", {c}},
                                 {h + "attn.bias", {1, 1, 64, 64}},  // a buffer, skipped
                                 {h + "attn.c_attn.weight", {c, 3 * c}},
                                 {h + "attn.c_attn.bias", {3 * c}},
                                 {h + "attn.c_proj.weight", {c, c}},
                                 {h + "attn.c_proj.bias", {c}},
                                 {h + "ln_2.weight", {c}},
                                 {h + "ln_2.bias", {c}},
                                 {h + "mlp.c_fc.weight", {c, 4 * c}},
                                 {h + "mlp.c_fc.bias", {4 * c}},
                                 {h + "mlp.c_proj.weight", {4 * c, c}},
                                 {h + "mlp.c_proj.bias", {c}}});
  }
  shapes.push_back({"ln_f.weight", {c}});
  shapes.push_back({"ln_f.bias", {c}});
  rt::SafeTensors out;
  out.metadata["format"] = "pt";
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto& [name, shape] = shapes[i];
    if (name == drop) continue;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(n);
    for (int64_t k = 0; k < n; ++k) v[k] = static_cast<float>((k * 7 + i * 13) % 61) / 1024 - 0.03f;
    out.tensors.push_back(rt::F32Tensor(name, shape, v));
  }
  return out;
}

void WriteHf(const fs::path& dir, int64_t layers, int64_t heads, int64_t width,
             const std::string& drop = "") {
  fs::create_directories(dir);
  const nlohmann::json config = {{"model_type", "gpt2"}, {"n_layer", layers}, {"n_head", heads},
                                 {"n_embd", width},      {"n_positions", 64}, {"n_ctx", 64},
                                 {"vocab_size", kVocab}};
  std::ofstream(dir / "config.json") << config.dump(2);
  ASSERT_TRUE(
      rt::WriteSafeTensors((dir / "model.safetensors").string(), StateDict(layers, width, drop))
          .ok());
}

class ImportHfTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::path(::testing::TempDir()) /
                        ("import_hf_test_" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 2000; ++i) tokens.push_back((i * 7 + i / 13) % 300);
    std::ofstream(*dir_ / "train_000.bin", std::ios::binary) << rt::EncodeShard(tokens);
    // The artifact whose model the HF directory has (positions 64, as gpt2-tiny).
    Result c = Run(std::string(GPTC_BIN) +
                   " compile --model gpt2-tiny --layers 1 --heads 2 --width 32 --batch 2 --seq 16"
                   " --no-codegen -o " +
                   (*dir_ / "tiny.gptx").string());
    ASSERT_EQ(c.code, 0) << c.out << c.err;
    WriteHf(*dir_ / "hf", 1, 2, 32);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  static Result Run(const std::string& command) { return testing::RunCommand(command, *dir_); }
  static Result Import(const std::string& args) {
    return Run(std::string(GPTC_BIN) + " import-hf " + args);
  }

  static fs::path* dir_;
};

fs::path* ImportHfTest::dir_ = nullptr;

TEST_F(ImportHfTest, GptrunResumesTheImportAndExportGivesItBack) {
  const fs::path hf = *dir_ / "hf", ckpt = *dir_ / "ckpt" / "step_000000";
  Result r = Import(hf.string() + " " + ckpt.string());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // hf-gpt2: one layer of width 32 is no built-in config's size.
  EXPECT_EQ(r.out, "imported " + hf.string() +
                       " (hf-gpt2: layers 1, heads 2, width 32, vocab 50257 padded to 50304) to " +
                       ckpt.string() + ": 16 tensors, 1,624,544 values\n");

  r = Run(std::string(GPTRUN_BIN) + " " + (*dir_ / "tiny.gptx").string() +
          " --device cpu --train '" + (*dir_ / "train_*.bin").string() + "' --steps 1 --resume " +
          ckpt.string());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("resumed from " + ckpt.string() + " at step 0"), std::string::npos) << r.out;

  const fs::path back = *dir_ / "hf_back";
  r = Run(std::string(GPTC_BIN) + " export-hf " + ckpt.string() + " " + back.string());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  StatusOr<rt::SafeTensors> original = rt::ReadSafeTensors((hf / "model.safetensors").string());
  StatusOr<rt::SafeTensors> exported = rt::ReadSafeTensors((back / "model.safetensors").string());
  ASSERT_TRUE(original.ok() && exported.ok());
  EXPECT_EQ(exported->tensors.size(), 16u);  // the buffers are not parameters
  for (const rt::SafeTensor& t : original->tensors) {
    if (t.name.ends_with(".attn.bias")) continue;  // the mask buffers
    const rt::SafeTensor* e = exported->Find("transformer." + t.name);
    ASSERT_NE(e, nullptr) << t.name;
    EXPECT_EQ(e->shape, t.shape) << t.name;
    EXPECT_TRUE(e->data == t.data) << t.name;
  }
}

TEST_F(ImportHfTest, NamesTheBuiltInConfigOfItsSizes) {
  const fs::path hf = *dir_ / "hf_tiny", ckpt = *dir_ / "ckpt_tiny";
  WriteHf(hf, 2, 4, 64);
  Result r = Import(hf.string() + " " + ckpt.string());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out,
            "imported " + hf.string() +
                " (gpt2-tiny: layers 2, heads 4, width 64, vocab 50257 padded to 50304) to " +
                ckpt.string() + ": 28 tensors, 3,323,648 values\n");
  const nlohmann::json config =
      nlohmann::json::parse(ReadAll(ckpt / "config.json"), nullptr, false);
  const nlohmann::json want = {{"name", "gpt2-tiny"},  {"layers", 2},     {"heads", 4},
                               {"width", 64},          {"positions", 64}, {"vocab", 50257},
                               {"padded_vocab", 50304}};
  EXPECT_EQ(config, want);
}

TEST_F(ImportHfTest, Errors) {
  // Usage: exit 2, naming --help.
  for (const std::string args : {"", "one", "a b c", "--bogus a b"}) {
    Result r = Import(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(LineCount(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("gptc import-hf --help"), std::string::npos) << r.err;
  }
  // The HF directory itself, or a non-empty directory without --force, is
  // never written into: the checkpoint's files have the names of the HF ones.
  const fs::path hf = *dir_ / "hf";
  const std::string model_before = ReadAll(hf / "model.safetensors");
  Result r = Import(hf.string() + " " + hf.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(LineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("is HF_DIR"), std::string::npos) << r.err;
  EXPECT_EQ(ReadAll(hf / "model.safetensors"), model_before);
  const fs::path full = *dir_ / "full";
  fs::create_directories(full);
  std::ofstream(full / "notes.txt") << "mine";
  r = Import(hf.string() + " " + full.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gptc: import-hf: CKPT_DIR " + full.string() +
                       " is not empty (--force writes into it)\n");
  r = Import("--force " + hf.string() + " " + full.string());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(full / "optim.safetensors"));
  EXPECT_EQ(ReadAll(full / "notes.txt"), "mine");

  // Failures: exit 1, one line naming the file.
  const std::string missing = (*dir_ / "nope").string();
  r = Import(missing + " " + (*dir_ / "out").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "gptc: " + missing + ": No such file or directory\n");
  const fs::path bad = *dir_ / "hf_bad";
  WriteHf(bad, 1, 2, 32, "ln_f.bias");
  r = Import(bad.string() + " " + (*dir_ / "out").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "gptc: " + (bad / "model.safetensors").string() +
                       ": no tensor 'ln_f.bias', which config.json's GPT-2 has\n");
  EXPECT_FALSE(fs::exists(*dir_ / "out"));
}

}  // namespace
}  // namespace gptc
