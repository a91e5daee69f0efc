// The Hugging Face import (runtime/hf_import.h), checked without transformers:
// a checkpoint exported and imported again is bit-identical; GPT2LMHeadModel's
// names (with "transformer.", a tied lm_head.weight) and GPT2Model's (without,
// with the attention-mask buffers) both import; F16 and BF16 widen exactly;
// and every refusal names the file and the tensor or key.
#include "runtime/hf_import.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "compiler/support/file.h"
#include "compiler/support/float_bits.h"
#include "models/gpt2.h"
#include "runtime/checkpoint.h"
#include "runtime/hf_export.h"

namespace gptc::rt {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kLayers = 2, kHeads = 2, kWidth = 32, kPositions = 16, kVocab = 200;

// What gptc import-hf names a model of sizes no built-in config has.
program::ModelConfig Model() {
  return {.name = "hf-gpt2",
          .layers = kLayers,
          .heads = kHeads,
          .width = kWidth,
          .positions = kPositions,
          .vocab = kVocab,
          .padded_vocab = models::PadVocab(kVocab)};  // 256
}

// GPT2Config as the released openai-community/gpt2 config.json has it (both
// n_ctx and n_positions), at the test's sizes.
nlohmann::json HfConfig() {
  return {{"model_type", "gpt2"},
          {"architectures", {"GPT2LMHeadModel"}},
          {"n_layer", kLayers},
          {"n_head", kHeads},
          {"n_embd", kWidth},
          {"n_positions", kPositions},
          {"n_ctx", kPositions},
          {"vocab_size", kVocab},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5}};
}

struct Ours {
  program::ModelConfig model;
  std::vector<program::ParamSpec> params;
};

// Our model of `sizes` as gptc import-hf makes it (tools/gptc/import_hf_command.cc):
// named, padded, its parameters traced.
StatusOr<Ours> OursOf(program::ModelConfig sizes) {
  sizes.name = "hf-gpt2";
  sizes.padded_vocab = models::PadVocab(sizes.vocab);
  models::GptConfig c{.name = sizes.name,
                      .layers = sizes.layers,
                      .heads = sizes.heads,
                      .width = sizes.width,
                      .positions = sizes.positions,
                      .vocab = sizes.vocab,
                      .padded_vocab = sizes.padded_vocab};
  ASSIGN_OR_RETURN(frontend::TracedModule traced, models::TraceGpt2Forward(c, 1, 1));
  return Ours{sizes, std::move(traced.params)};
}

// Element k of parameter i: a multiple of 1/32 within [-1, 1], exact in F16
// and BF16, and different in neighbouring tensors.
float Value(size_t i, size_t k) {
  return static_cast<float>(static_cast<int>((k * 7 + i * 13) % 61) - 30) / 32;
}

// A tensor of `dtype` holding `v` (exactly, for the values of Value()).
SafeTensor Encode(std::string name, const std::string& dtype, std::vector<int64_t> shape,
                  const std::vector<float>& v) {
  if (dtype == "F32") return F32Tensor(std::move(name), std::move(shape), v);
  SafeTensor t{std::move(name), dtype, std::move(shape), std::string(2 * v.size(), '\0')};
  for (size_t k = 0; k < v.size(); ++k) {
    const uint16_t bits = dtype == "F16" ? F32ToF16Bits(v[k]) : F32ToBF16Bits(v[k]);
    std::memcpy(t.data.data() + 2 * k, &bits, 2);
  }
  return t;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class HfImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gptc_hf_import_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    hf_ = dir_ + "/hf";
    ckpt_ = dir_ + "/ckpt";
    StatusOr<Ours> ours = OursOf(Model());
    ASSERT_TRUE(ours.ok()) << ours.status().message();
    ours_ = std::move(*ours);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // GPT2LMHeadModel's state dict at Value(): names with `prefix`, the token
  // table with the real rows, every tensor of `dtype`.
  SafeTensors StateDict(const std::string& prefix, const std::string& dtype = "F32") const {
    SafeTensors out;
    out.metadata["format"] = "pt";
    for (size_t i = 0; i < ours_.params.size(); ++i) {
      const program::ParamSpec& p = ours_.params[i];
      std::vector<int64_t> shape = p.shape.dims();
      if (p.name == "wte.weight") shape[0] = kVocab;
      std::vector<float> v(ir::Shape(ir::DType::kF32, shape).num_elements());
      for (size_t k = 0; k < v.size(); ++k) v[k] = Value(i, k);
      out.tensors.push_back(Encode(prefix + p.name, dtype, shape, v));
    }
    return out;
  }
  // What the checkpoint must hold for StateDict(): Value(), then the padding rows zero.
  std::vector<std::vector<float>> Expected() const {
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < ours_.params.size(); ++i) {
      const program::ParamSpec& p = ours_.params[i];
      std::vector<float> v(p.shape.num_elements(), 0.0f);
      const size_t real = p.name == "wte.weight" ? kVocab * kWidth : v.size();
      for (size_t k = 0; k < real; ++k) v[k] = Value(i, k);
      out.push_back(std::move(v));
    }
    return out;
  }

  void WriteHf(const SafeTensors& dict, const nlohmann::json& config = HfConfig()) {
    fs::create_directories(hf_);
    ASSERT_TRUE(WriteFileAtomically(hf_ + "/config.json", config.dump(2)).ok());
    ASSERT_TRUE(WriteSafeTensors(hf_ + "/model.safetensors", dict).ok());
  }

  // What gptc import-hf does, through the library.
  StatusOr<HfImportSummary> Import() {
    ASSIGN_OR_RETURN(program::ModelConfig sizes, ReadHfConfig(hf_));
    ASSIGN_OR_RETURN(Ours ours, OursOf(sizes));
    return ImportHuggingFace(hf_, ours.model, ckpt_);
  }
  // The import's error; fails the test if it succeeded or wrote anything.
  std::string ImportError() {
    StatusOr<HfImportSummary> r = Import();
    EXPECT_FALSE(r.ok());
    EXPECT_FALSE(fs::exists(ckpt_));
    return r.ok() ? "" : r.status().message();
  }
  // The imported checkpoint, loaded as gptrun --resume loads it.
  CheckpointData Load() {
    StatusOr<CheckpointData> data = LoadCheckpoint(ckpt_, ours_.params);
    EXPECT_TRUE(data.ok()) << data.status().message();
    return data.ok() ? std::move(*data) : CheckpointData{};
  }

  std::string dir_, hf_, ckpt_;
  Ours ours_;
};

TEST_F(HfImportTest, ExportThenImportIsBitExact) {
  // A trained-looking checkpoint, with values a conversion could disturb:
  // -0, a subnormal, the extremes. Its padding rows are zero, as an import's
  // are: the export drops them.
  CheckpointData data;
  data.step = 1234;
  data.data = {.epoch = 2, .shard = 1, .sequence = 17};
  data.model = Model();
  data.params = ours_.params;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (const program::ParamSpec& p : data.params) {
    std::vector<float> v(p.shape.num_elements());
    for (float& x : v) x = normal(rng);
    if (p.name == "wte.weight") std::fill(v.begin() + kVocab * kWidth, v.end(), 0.0f);
    if (p.name == "ln_f.bias") {
      v[0] = -0.0f;
      v[1] = std::numeric_limits<float>::denorm_min();
      v[2] = std::numeric_limits<float>::max();
      v[3] = std::numeric_limits<float>::lowest();
    }
    data.values.push_back(v);
    data.adam_m.push_back(std::vector<float>(v.size(), 0.5f));
    data.adam_v.push_back(std::vector<float>(v.size(), 0.25f));
  }
  const std::string trained = dir_ + "/trained";
  ASSERT_TRUE(SaveCheckpoint(trained, data).ok());
  StatusOr<HfExportSummary> exported = ExportHuggingFace(trained, hf_);
  ASSERT_TRUE(exported.ok()) << exported.status().message();

  StatusOr<program::ModelConfig> sizes = ReadHfConfig(hf_);
  ASSERT_TRUE(sizes.ok()) << sizes.status().message();
  program::ModelConfig unnamed = Model();
  unnamed.name = "";
  unnamed.padded_vocab = kVocab;
  EXPECT_EQ(*sizes, unnamed);

  StatusOr<HfImportSummary> summary = Import();
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_EQ(summary->model, Model());
  EXPECT_EQ(summary->tensors, static_cast<int64_t>(ours_.params.size()));
  int64_t values = 0;
  for (const program::ParamSpec& p : ours_.params) values += p.shape.num_elements();
  EXPECT_EQ(summary->values, values);  // the padding rows included

  const CheckpointData imported = Load();
  ASSERT_EQ(imported.values.size(), data.values.size());
  for (size_t i = 0; i < data.values.size(); ++i) {
    EXPECT_TRUE(SameBits(imported.values[i], data.values[i])) << data.params[i].name;
    EXPECT_EQ(imported.adam_m[i], std::vector<float>(data.values[i].size(), 0.0f));
    EXPECT_EQ(imported.adam_v[i], std::vector<float>(data.values[i].size(), 0.0f));
  }
  EXPECT_EQ(imported.step, 0);  // a fresh run's, not the exported one's
  EXPECT_EQ(imported.data, DataLoader::State{});
  EXPECT_FALSE(imported.data_source.known());
  EXPECT_EQ(imported.run_id, "");
  StatusOr<program::ModelConfig> config = ReadCheckpointConfig(ckpt_);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(*config, Model());
  StatusOr<std::map<std::string, std::string>> meta =
      ReadSafeTensorsMetadata(ckpt_ + "/model.safetensors");
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ((*meta)[kImportedFromKey], hf_);

  // And out again: the same Hugging Face files, byte for byte.
  ASSERT_TRUE(ExportHuggingFace(ckpt_, dir_ + "/hf2").ok());
  EXPECT_EQ(*ReadFile(dir_ + "/hf2/model.safetensors"), *ReadFile(hf_ + "/model.safetensors"));
  EXPECT_EQ(*ReadFile(dir_ + "/hf2/config.json"), *ReadFile(hf_ + "/config.json"));
}

// GPT2LMHeadModel.save_pretrained's names and the released files' (GPT2Model's,
// with the mask buffers that older transformers saved) give one checkpoint.
TEST_F(HfImportTest, ReadsNamesWithAndWithoutTransformerPrefix) {
  SafeTensors lm = StateDict("transformer.");
  SafeTensor head = *lm.Find("transformer.wte.weight");
  head.name = "lm_head.weight";  // tied: the same values
  lm.tensors.push_back(std::move(head));
  WriteHf(lm);
  StatusOr<HfImportSummary> r = Import();
  ASSERT_TRUE(r.ok()) << r.status().message();
  const CheckpointData with_prefix = Load();
  EXPECT_EQ(with_prefix.values, Expected());

  fs::remove_all(ckpt_);
  SafeTensors released = StateDict("");
  for (int l = 0; l < kLayers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".attn.";
    released.tensors.push_back(F32Tensor(h + "bias", {1, 1, kPositions, kPositions},
                                         std::vector<float>(kPositions * kPositions, 1.0f)));
    released.tensors.push_back(F32Tensor(h + "masked_bias", {}, {-1e4f}));
  }
  nlohmann::json config = HfConfig();
  config.erase("n_positions");  // n_ctx alone, as configs from before n_positions have it
  config.erase("model_type");   // transformers reads it as GPT-2's too
  WriteHf(released, config);
  r = Import();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Load().values, with_prefix.values);
}

TEST_F(HfImportTest, WidensF16AndBf16Exactly) {
  for (const std::string dtype : {"F16", "BF16"}) {
    fs::remove_all(ckpt_);
    SafeTensors dict = StateDict("transformer.", dtype);
    std::vector<std::vector<float>> expected = Expected();
    // The smallest subnormal of each, which is an f32 value too.
    const uint16_t smallest = 0x0001;
    std::memcpy(dict.tensors[1].data.data(), &smallest, 2);  // wpe.weight[0, 0]
    expected[1][0] = dtype == "F16" ? std::ldexp(1.0f, -24) : std::bit_cast<float>(0x00010000u);
    // A head tied to the table in another dtype is still the same values.
    std::vector<float> table = expected[0];  // wte.weight, the first parameter
    table.resize(kVocab * kWidth);
    dict.tensors.push_back(
        Encode("lm_head.weight", dtype == "F16" ? "BF16" : "F16", {kVocab, kWidth}, table));
    WriteHf(dict);
    StatusOr<HfImportSummary> r = Import();
    ASSERT_TRUE(r.ok()) << dtype << ": " << r.status().message();
    EXPECT_EQ(Load().values, expected) << dtype;
  }
}

TEST_F(HfImportTest, RefusesMissingMisshapenAndUnknownTensors) {
  const std::string path = hf_ + "/model.safetensors";
  SafeTensors dict = StateDict("transformer.");
  std::erase_if(dict.tensors,
                [](const SafeTensor& t) { return t.name == "transformer.h.1.mlp.c_fc.bias"; });
  WriteHf(dict);
  EXPECT_EQ(ImportError(),
            path + ": no tensor 'transformer.h.1.mlp.c_fc.bias', which config.json's GPT-2 has");
  WriteHf([&] {
    SafeTensors d = StateDict("");
    std::erase_if(d.tensors, [](const SafeTensor& t) { return t.name == "ln_f.weight"; });
    return d;
  }());
  EXPECT_EQ(ImportError(), path + ": no tensor 'ln_f.weight', which config.json's GPT-2 has");

  dict = StateDict("transformer.");
  for (SafeTensor& t : dict.tensors) {
    if (t.name == "transformer.h.0.attn.c_attn.weight") {  // (C, 2C): a truncated qkv
      t = F32Tensor(t.name, {kWidth, 2 * kWidth}, std::vector<float>(2 * kWidth * kWidth));
    }
  }
  WriteHf(dict);
  EXPECT_EQ(ImportError(), path +
                               ": tensor 'transformer.h.0.attn.c_attn.weight' is F32{32,64}, "
                               "config.json's GPT-2 needs {32,96}");
  // The token table has the real rows, not our padded ones.
  dict = StateDict("transformer.");
  dict.tensors[0] =
      F32Tensor("transformer.wte.weight", {256, kWidth}, std::vector<float>(256 * kWidth));
  WriteHf(dict);
  EXPECT_EQ(ImportError(), path +
                               ": tensor 'transformer.wte.weight' is F32{256,32}, config.json's "
                               "GPT-2 needs {200,32}");

  for (const std::string name : {"transformer.h.2.ln_1.weight", "score.weight",
                                 "transformer.h.2.attn.bias", "transformer.lm_head.weight"}) {
    dict = StateDict("transformer.");
    dict.tensors.push_back(F32Tensor(name, {kWidth}, std::vector<float>(kWidth)));
    WriteHf(dict);
    EXPECT_EQ(ImportError(), path + ": tensor '" + name +
                                 "' is not a parameter of config.json's GPT-2 ('n_layer' 2)");
  }
  dict = StateDict("transformer.");
  SafeTensor twin = *dict.Find("transformer.ln_f.bias");
  twin.name = "ln_f.bias";
  dict.tensors.push_back(std::move(twin));
  WriteHf(dict);
  EXPECT_EQ(ImportError(), path +
                               ": tensor 'ln_f.bias' is there both as 'ln_f.bias' and as "
                               "'transformer.ln_f.bias'");
}

TEST_F(HfImportTest, RefusesAnUntiedLmHead) {
  const std::string path = hf_ + "/model.safetensors";
  SafeTensors dict = StateDict("transformer.");
  SafeTensor head = *dict.Find("transformer.wte.weight");
  head.name = "lm_head.weight";
  const float was = Value(0, 3 * kWidth + 5);
  const float now = was + 1.0f;
  std::memcpy(head.data.data() + (3 * kWidth + 5) * sizeof(float), &now, sizeof(float));
  dict.tensors.push_back(head);
  WriteHf(dict);
  EXPECT_EQ(ImportError(),
            fmt::format("{}: tensor 'lm_head.weight' differs from 'transformer.wte.weight' at [3, "
                        "5] ({} vs {}): gptc ties the logits to the token table, so an untied "
                        "head cannot be imported",
                        path, now, was));
  dict.tensors.back() =
      F32Tensor("lm_head.weight", {256, kWidth}, std::vector<float>(256 * kWidth));
  WriteHf(dict);
  EXPECT_EQ(ImportError(), path +
                               ": tensor 'lm_head.weight' is F32{256,32} where "
                               "'transformer.wte.weight' is {200,32}: gptc ties the logits to the "
                               "token table");
}

TEST_F(HfImportTest, RefusesOtherDtypesAndNonFiniteValues) {
  const std::string path = hf_ + "/model.safetensors";
  for (const std::string dtype : {"I64", "F64"}) {
    SafeTensors dict = StateDict("transformer.");
    for (SafeTensor& t : dict.tensors) {
      if (t.name == "transformer.ln_f.bias") {
        t.dtype = dtype;
        t.data.resize(kWidth * 8);
      }
    }
    WriteHf(dict);
    EXPECT_EQ(ImportError(),
              path + ": tensor 'transformer.ln_f.bias' is " + dtype + ", not F32, F16 or BF16");
  }
  SafeTensors dict = StateDict("transformer.", "F16");
  SafeTensor& ln = dict.tensors[2];  // h.0.ln_1.weight
  const uint16_t inf = 0x7c00;
  std::memcpy(ln.data.data() + 2 * 5, &inf, 2);
  WriteHf(dict);
  EXPECT_EQ(ImportError(), path + ": tensor '" + ln.name + "' holds inf at element 5");
}

TEST_F(HfImportTest, ReadsAndRefusesConfigs) {
  const std::string path = hf_ + "/config.json";
  EXPECT_EQ(ReadHfConfig(hf_).status().message(), hf_ + ": No such file or directory");
  WriteHf(StateDict("transformer."));
  auto refusal = [&](const nlohmann::json& config) {
    EXPECT_TRUE(WriteFileAtomically(path, config.dump()).ok());
    return ImportError();
  };
  nlohmann::json c = HfConfig();
  c["model_type"] = "gpt_neo";
  EXPECT_EQ(refusal(c), path + ": 'model_type' is \"gpt_neo\", not \"gpt2\"");
  c = HfConfig();
  c.erase("n_layer");
  EXPECT_EQ(refusal(c), path + ": no 'n_layer'");
  c = HfConfig();
  c.erase("n_positions");
  c.erase("n_ctx");
  EXPECT_EQ(refusal(c), path + ": no 'n_positions'");
  c = HfConfig();
  c["n_embd"] = "32";
  EXPECT_EQ(refusal(c), path + ": 'n_embd' is \"32\", not a positive integer");
  c = HfConfig();
  c["vocab_size"] = 0;
  EXPECT_EQ(refusal(c), path + ": 'vocab_size' is 0, not a positive integer");
  c = HfConfig();
  c["n_head"] = 3;
  EXPECT_EQ(refusal(c), path + ": 'n_head' 3 does not divide 'n_embd' 32");
  c = HfConfig();
  c["n_inner"] = 64;
  EXPECT_EQ(refusal(c), path +
                            ": 'n_inner' is 64, not null or 4 * 'n_embd' (128), the only MLP "
                            "width gptc has");
  // The sizes decide the tensors: one layer more is a missing tensor.
  c = HfConfig();
  c["n_layer"] = 3;
  EXPECT_EQ(refusal(c), hf_ +
                            "/model.safetensors: no tensor 'transformer.h.2.ln_1.weight', "
                            "which config.json's GPT-2 has");
  EXPECT_EQ(refusal(nlohmann::json::array()), path + ": not a JSON object");
  c = HfConfig();
  c["n_inner"] = nullptr;
  c["activation_function"] = "gelu";  // not read
  EXPECT_TRUE(WriteFileAtomically(path, c.dump()).ok());
  EXPECT_TRUE(Import().ok());

  const std::string file = dir_ + "/a_file";
  ASSERT_TRUE(WriteFileAtomically(file, "x").ok());
  EXPECT_EQ(ReadHfConfig(file).status().message(),
            file +
                ": not a directory (a Hugging Face model is a directory holding config.json "
                "and model.safetensors)");
}

TEST_F(HfImportTest, RefusesShardsAndACheckpointPathThatIsAFile) {
  WriteHf(StateDict("transformer."));
  ASSERT_TRUE(WriteFileAtomically(ckpt_, "a file").ok());
  StatusOr<HfImportSummary> r = Import();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), ckpt_ + ": exists and is not a directory");
  fs::remove(ckpt_);

  fs::remove(hf_ + "/model.safetensors");
  EXPECT_EQ(ImportError(), hf_ + "/model.safetensors: No such file or directory");
  ASSERT_TRUE(WriteFileAtomically(hf_ + "/model.safetensors.index.json", "{}").ok());
  EXPECT_EQ(ImportError(), hf_ +
                               "/model.safetensors.index.json: sharded weights are not supported "
                               "(save_pretrained(DIR, max_shard_size=\"20GB\") writes one "
                               "model.safetensors)");
  // Created with its parents.
  WriteHf(StateDict("transformer."));
  ckpt_ = dir_ + "/a/b/step_000000";
  EXPECT_TRUE(Import().ok());
  EXPECT_TRUE(fs::exists(ckpt_ + "/optim.safetensors"));
}

}  // namespace
}  // namespace gptc::rt
