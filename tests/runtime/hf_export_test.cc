// The Hugging Face export of a checkpoint, checked without transformers:
// every name, shape and dtype against GPT2LMHeadModel's state dict for the
// config (written out here, independently of runtime/hf_export.cc), every
// value against the checkpoint's, GPT2Config's fields, and the errors.
#include "runtime/hf_export.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "compiler/support/file.h"
#include "models/gpt2.h"
#include "runtime/checkpoint.h"

namespace gptc::rt {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kLayers = 2, kHeads = 2, kWidth = 32, kPositions = 16, kVocab = 200;
constexpr int64_t kPaddedVocab = 256;

program::ModelConfig Model() {
  return {.name = "gpt2-tiny",
          .layers = kLayers,
          .heads = kHeads,
          .width = kWidth,
          .positions = kPositions,
          .vocab = kVocab,
          .padded_vocab = kPaddedVocab};
}

// GPT2LMHeadModel(GPT2Config(vocab_size=200, n_positions=16, n_embd=32,
// n_layer=2, n_head=2)).state_dict(), less the tied lm_head.weight and the
// attention-mask buffers: names and shapes in its order.
std::vector<std::pair<std::string, std::vector<int64_t>>> ExpectedStateDict() {
  const int64_t c = kWidth;
  std::vector<std::pair<std::string, std::vector<int64_t>>> out = {
      {"transformer.wte.weight", {kVocab, c}}, {"transformer.wpe.weight", {kPositions, c}}};
  for (int l = 0; l < kLayers; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    out.insert(out.end(), {{h + "ln_1.weight", {c}},
                           {h + "ln_1.bias", {c}},
                           {h + "attn.c_attn.weight", {c, 3 * c}},  // Conv1D: (in, out)
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
  out.push_back({"transformer.ln_f.weight", {c}});
  out.push_back({"transformer.ln_f.bias", {c}});
  return out;
}

class HfExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gptc_hf_export_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ckpt_ = dir_ + "/step_000007";
    out_ = dir_ + "/hf";
    // The parameters of the traced model, each value distinct from every
    // other tensor's, so that a swapped, transposed or shifted tensor shows.
    StatusOr<models::GptConfig> config = models::FindGptConfig("gpt2-tiny");
    ASSERT_TRUE(config.ok());
    config->layers = kLayers;
    config->heads = kHeads;
    config->width = kWidth;
    config->positions = kPositions;
    config->vocab = kVocab;
    config->padded_vocab = kPaddedVocab;
    StatusOr<frontend::TracedModule> traced = models::TraceGpt2Forward(*config, 1, 8);
    ASSERT_TRUE(traced.ok()) << traced.status().message();
    data_.step = 7;
    data_.model = Model();
    data_.params = traced->params;
    for (size_t i = 0; i < data_.params.size(); ++i) {
      std::vector<float> v(data_.params[i].shape.num_elements());
      for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(i) + 1e-4f * k;
      data_.values.push_back(v);
      data_.adam_m.push_back(std::vector<float>(v.size(), 0.0f));
      data_.adam_v.push_back(std::vector<float>(v.size(), 0.0f));
    }
    ASSERT_TRUE(SaveCheckpoint(ckpt_, data_).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The export's error message; fails the test if it succeeded.
  std::string ExportError() {
    StatusOr<HfExportSummary> r = ExportHuggingFace(ckpt_, out_);
    EXPECT_FALSE(r.ok());
    return r.ok() ? "" : r.status().message();
  }

  std::string dir_, ckpt_, out_;
  CheckpointData data_;
};

TEST_F(HfExportTest, WritesGpt2LMHeadModelStateDict) {
  StatusOr<HfExportSummary> summary = ExportHuggingFace(ckpt_, out_);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  StatusOr<SafeTensors> hf = ReadSafeTensors(out_ + "/model.safetensors");
  ASSERT_TRUE(hf.ok()) << hf.status().message();
  EXPECT_EQ(hf->metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  const auto expected = ExpectedStateDict();
  ASSERT_EQ(hf->tensors.size(), expected.size());  // and no other name
  int64_t values = 0;
  for (const auto& [name, shape] : expected) {
    const SafeTensor* found = hf->Find(name);
    ASSERT_NE(found, nullptr) << name;
    const SafeTensor& t = *found;
    EXPECT_EQ(t.dtype, "F32") << name;
    EXPECT_EQ(t.shape, shape) << name;
    // The checkpoint's tensor of the same name without "transformer.",
    // unchanged (no transpose), the token table cut to the real rows.
    const std::string ours = name.substr(std::string("transformer.").size());
    size_t p = 0;
    while (p < data_.params.size() && data_.params[p].name != ours) ++p;
    ASSERT_LT(p, data_.params.size()) << ours;
    std::vector<float> want = data_.values[p];
    want.resize(t.data.size() / sizeof(float));
    EXPECT_EQ(F32Values(t), want) << name;
    values += static_cast<int64_t>(want.size());
  }
  EXPECT_EQ(hf->Find("lm_head.weight"), nullptr);  // tied to transformer.wte.weight
  EXPECT_EQ(summary->model, Model());
  EXPECT_EQ(summary->step, 7);
  EXPECT_EQ(summary->tensors, static_cast<int64_t>(expected.size()));
  EXPECT_EQ(summary->values, values);
  // The padding rows are gone: the table ends with row kVocab - 1.
  EXPECT_EQ(hf->Find("transformer.wte.weight")->data.size(), kVocab * kWidth * sizeof(float));
}

TEST_F(HfExportTest, WritesGpt2Config) {
  ASSERT_TRUE(ExportHuggingFace(ckpt_, out_).ok());
  StatusOr<std::string> text = ReadFile(out_ + "/config.json");
  ASSERT_TRUE(text.ok());
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  ASSERT_TRUE(j.is_object()) << *text;
  const nlohmann::json want = {
      {"model_type", "gpt2"},
      {"architectures", {"GPT2LMHeadModel"}},
      {"vocab_size", kVocab},
      {"n_positions", kPositions},
      {"n_embd", kWidth},
      {"n_layer", kLayers},
      {"n_head", kHeads},
      {"n_inner", nullptr},
      {"activation_function", "gelu_new"},
      {"resid_pdrop", 0.1},
      {"embd_pdrop", 0.1},
      {"attn_pdrop", 0.1},
      {"layer_norm_epsilon", 1e-5},
      {"initializer_range", 0.02},
      {"summary_type", "cls_index"},
      {"summary_use_proj", true},
      {"summary_activation", nullptr},
      {"summary_proj_to_labels", true},
      {"summary_first_dropout", 0.1},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"use_cache", true},
      {"bos_token_id", kVocab - 1},
      {"eos_token_id", kVocab - 1},
      {"tie_word_embeddings", true},
      {"torch_dtype", "float32"},
  };
  EXPECT_EQ(j, want) << *text;
  // GPT-2's own vocabulary: <|endoftext|> is 50256, GPT2Config's default.
  program::ModelConfig gpt2 = Model();
  gpt2.vocab = 50257;
  gpt2.padded_vocab = 50304;
  const nlohmann::json g = nlohmann::json::parse(HfConfigJson(gpt2), nullptr, false);
  EXPECT_EQ(g["vocab_size"], 50257);
  EXPECT_EQ(g["bos_token_id"], 50256);
  EXPECT_EQ(g["eos_token_id"], 50256);
}

TEST_F(HfExportTest, AMissingCheckpointIsNamed) {
  ckpt_ = dir_ + "/nope";
  EXPECT_EQ(ExportError(), ckpt_ + ": No such file or directory");
  ckpt_ = dir_ + "/step_000007/model.safetensors";
  EXPECT_EQ(ExportError(), ckpt_ +
                               ": not a directory (a checkpoint is a directory such as "
                               "CKPT_DIR/step_000100)");
  ckpt_ = dir_ + "/step_000007";
  fs::remove(ckpt_ + "/config.json");
  EXPECT_EQ(ExportError(), ckpt_ +
                               "/config.json: No such file or directory (checkpoints from before "
                               "config.json lack it; docs/CHECKPOINTS.md shows how to write one)");
  ASSERT_TRUE(SaveCheckpoint(ckpt_, data_).ok());
  fs::remove(ckpt_ + "/model.safetensors");
  EXPECT_EQ(ExportError(), ckpt_ + "/model.safetensors: No such file or directory");
  EXPECT_FALSE(fs::exists(out_));  // nothing written for a bad checkpoint
}

TEST_F(HfExportTest, ACorruptCheckpointIsNamed) {
  const std::string path = ckpt_ + "/model.safetensors";
  StatusOr<std::string> good = ReadFile(path);
  ASSERT_TRUE(good.ok());
  std::string flipped = *good;
  flipped[flipped.size() - 5] ^= 0x01;
  ASSERT_TRUE(WriteFileAtomically(path, flipped).ok());
  EXPECT_TRUE(ExportError().starts_with(path + ": checksum mismatch:"));
  ASSERT_TRUE(WriteFileAtomically(path, good->substr(0, good->size() - 8)).ok());
  EXPECT_TRUE(ExportError().starts_with(path + ": truncated:"));
  ASSERT_TRUE(WriteFileAtomically(path, "junk").ok());
  EXPECT_TRUE(ExportError().starts_with(path + ": ")) << ExportError();
  ASSERT_TRUE(WriteFileAtomically(ckpt_ + "/config.json", "{").ok());
  EXPECT_EQ(ExportError(), ckpt_ + "/config.json: not a JSON object");
  EXPECT_FALSE(fs::exists(out_));
}

// config.json and the tensors must describe the same model.
TEST_F(HfExportTest, AConfigThatDisagreesWithTheTensorsIsRefused) {
  const std::string path = ckpt_ + "/model.safetensors";
  auto with_config = [&](program::ModelConfig model) {
    nlohmann::ordered_json j = {{"name", model.name},
                                {"layers", model.layers},
                                {"heads", model.heads},
                                {"width", model.width},
                                {"positions", model.positions},
                                {"vocab", model.vocab},
                                {"padded_vocab", model.padded_vocab}};
    EXPECT_TRUE(WriteFileAtomically(ckpt_ + "/config.json", j.dump()).ok());
    return ExportError();
  };
  program::ModelConfig m = Model();
  m.layers = 3;
  EXPECT_EQ(with_config(m),
            path + ": no tensor 'h.2.ln_1.weight', which config.json's model ('layers' 3) has");
  m.layers = 1;
  EXPECT_EQ(with_config(m),
            path +
                ": tensor 'h.1.attn.c_attn.bias' is not a parameter of config.json's model "
                "('layers' 1)");
  m = Model();
  m.width = 64;
  EXPECT_EQ(with_config(m),
            path + ": tensor 'wte.weight' is F32{256,32}, config.json's model needs F32{256,64}");
  m = Model();
  m.vocab = 150;
  EXPECT_EQ(with_config(m), path + ": __metadata__ 'gptc.vocab' is 200 but " + ckpt_ +
                                "/config.json says 'vocab' 150");
  EXPECT_FALSE(fs::exists(out_));
}

TEST_F(HfExportTest, AnOutputThatIsAFileIsRefused) {
  ASSERT_TRUE(WriteFileAtomically(out_, "a file").ok());
  EXPECT_EQ(ExportError(), out_ + ": exists and is not a directory");
  // An existing directory is fine: its files are replaced.
  fs::remove(out_);
  fs::create_directories(out_);
  ASSERT_TRUE(WriteFileAtomically(out_ + "/config.json", "old").ok());
  ASSERT_TRUE(ExportHuggingFace(ckpt_, out_).ok());
  EXPECT_NE(*ReadFile(out_ + "/config.json"), "old");
  // Created with its parents.
  out_ = dir_ + "/a/b/hf";
  EXPECT_TRUE(ExportHuggingFace(ckpt_, out_).ok());
  EXPECT_TRUE(fs::exists(out_ + "/model.safetensors"));
}

}  // namespace
}  // namespace gptc::rt
