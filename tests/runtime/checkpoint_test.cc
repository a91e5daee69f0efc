// Checkpoints on the CPU device: N steps + save + load into a fresh trainer
// and data loader + N steps ends with exactly the losses of 2N steps.
#include "runtime/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <tuple>
#include <vector>

#include "compiler/support/file.h"
#include "models/gpt2.h"
#include "runtime/lr_schedule.h"
#include "runtime/safetensors.h"
#include "passes/train_step.h"

namespace gptc::rt {
namespace {

constexpr int64_t kBatch = 2, kSeq = 8, kVocab = 200, kSteps = 3;

// gpt2-tiny with one layer and 200 tokens, as Compile() traces it.
program::ModelConfig Model() {
  return {.name = "gpt2-tiny",
          .layers = 1,
          .heads = 4,
          .width = 64,
          .positions = 64,
          .vocab = kVocab,
          .padded_vocab = models::PadVocab(kVocab)};  // 256: padding rows are saved too
}

StatusOr<program::TrainProgram> Compile() {
  ASSIGN_OR_RETURN(models::GptConfig config, models::FindGptConfig("gpt2-tiny"));
  config.layers = 1;
  config.vocab = kVocab;
  config.padded_vocab = models::PadVocab(kVocab);
  EXPECT_EQ(config.heads, Model().heads);
  EXPECT_EQ(config.width, Model().width);
  EXPECT_EQ(config.positions, Model().positions);
  ASSIGN_OR_RETURN(frontend::TracedModule traced, models::TraceGpt2Forward(config, kBatch, kSeq));
  return passes::BuildTrainProgram(std::move(traced.module), std::move(traced.params),
                                   traced.inputs, passes::TrainStepOptions{});
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gptc_ckpt_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::vector<int32_t> tokens(1000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (i * 37 + i / 7) % kVocab;
    ASSERT_TRUE(WriteFileAtomically(dir_ + "/train_000.bin", EncodeShard(tokens)).ok());
    StatusOr<program::TrainProgram> program = Compile();
    ASSERT_TRUE(program.ok()) << program.status().message();
    program_ = std::move(*program);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  DataLoader Loader() {
    StatusOr<DataLoader> l = DataLoader::Open({.pattern = dir_ + "/train_*.bin",
                                               .batch = kBatch,
                                               .seq = kSeq,
                                               .seed = 11,
                                               .vocab = kVocab});
    EXPECT_TRUE(l.ok()) << l.status().message();
    return std::move(*l);
  }

  // Runs `steps` steps, appending the losses.
  void Train(CpuTrainer& trainer, DataLoader& loader, int64_t steps, std::vector<double>* losses) {
    LrSchedule schedule{
        .max_lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 2, .total_steps = 2 * kSteps};
    for (int64_t i = 0; i < steps; ++i) {
      StatusOr<MicroBatch> mb = loader.Next();
      ASSERT_TRUE(mb.ok()) << mb.status().message();
      StatusOr<StepResult> r =
          trainer.Step(std::span<const MicroBatch>(&*mb, 1), schedule.At(trainer.steps_done() + 1));
      ASSERT_TRUE(r.ok()) << r.status().message();
      losses->push_back(r->loss);
    }
  }

  std::string dir_;
  program::TrainProgram program_;
};

TEST_F(CheckpointTest, ResumeIsBitIdentical) {
  std::vector<double> straight;
  {
    CpuTrainer trainer(&program_, /*seed=*/5);
    DataLoader loader = Loader();
    Train(trainer, loader, 2 * kSteps, &straight);
  }
  std::vector<double> resumed;
  const std::string ckpt = dir_ + "/ckpt";
  {
    CpuTrainer trainer(&program_, /*seed=*/5);
    DataLoader loader = Loader();
    Train(trainer, loader, kSteps, &resumed);
    CheckpointData data = CaptureCpuTrainer(trainer, program_.params, loader.state(), Model());
    ASSERT_TRUE(SaveCheckpoint(ckpt, data).ok());
  }
  {
    CpuTrainer trainer(&program_, /*seed=*/99);  // different init: all of it must be loaded
    DataLoader loader = Loader();
    StatusOr<CheckpointData> data = LoadCheckpoint(ckpt, program_.params);
    ASSERT_TRUE(data.ok()) << data.status().message();
    EXPECT_EQ(data->step, kSteps);
    EXPECT_EQ(data->model, Model());
    RestoreCpuTrainer(*data, &trainer);
    ASSERT_TRUE(loader.Restore(data->data).ok());
    Train(trainer, loader, kSteps, &resumed);
  }
  ASSERT_EQ(resumed.size(), straight.size());
  for (size_t i = 0; i < straight.size(); ++i) {
    EXPECT_EQ(resumed[i], straight[i]) << "step " << i + 1;  // bit-identical
  }
}

TEST_F(CheckpointTest, FilesUseHuggingFaceNames) {
  CpuTrainer trainer(&program_, 1);
  const std::string ckpt = dir_ + "/ckpt";
  ASSERT_TRUE(SaveCheckpoint(ckpt, CaptureCpuTrainer(trainer, program_.params, {}, Model())).ok());
  StatusOr<SafeTensors> model = ReadSafeTensors(ckpt + "/model.safetensors");
  StatusOr<SafeTensors> optim = ReadSafeTensors(ckpt + "/optim.safetensors");
  ASSERT_TRUE(model.ok() && optim.ok());
  const SafeTensor* wte = model->Find("wte.weight");
  ASSERT_NE(wte, nullptr);
  EXPECT_EQ(wte->shape, (std::vector<int64_t>{256, 64}));  // padded rows (Note [padded wte])
  EXPECT_EQ(model->metadata.at("gptc.wte_rows"), "256");
  EXPECT_EQ(model->metadata.at("gptc.vocab"), "200");
  EXPECT_NE(model->Find("h.0.attn.c_attn.weight"), nullptr);
  EXPECT_NE(optim->Find("adam_m.h.0.attn.c_attn.weight"), nullptr);
  EXPECT_NE(optim->Find("adam_v.wte.weight"), nullptr);
  EXPECT_EQ(optim->tensors.size(), 2 * model->tensors.size());
}

// Note [checkpoint config]: config.json says which model the checkpoint
// holds, with the manifest's keys; a checkpoint without it (an older one)
// still loads.
TEST_F(CheckpointTest, WritesTheModelConfig) {
  CpuTrainer trainer(&program_, 1);
  const std::string ckpt = dir_ + "/ckpt";
  ASSERT_TRUE(SaveCheckpoint(ckpt, CaptureCpuTrainer(trainer, program_.params, {}, Model())).ok());
  StatusOr<std::string> text = ReadFile(ckpt + "/config.json");
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(*text,
            "{\n"
            "  \"name\": \"gpt2-tiny\",\n"
            "  \"layers\": 1,\n"
            "  \"heads\": 4,\n"
            "  \"width\": 64,\n"
            "  \"positions\": 64,\n"
            "  \"vocab\": 200,\n"
            "  \"padded_vocab\": 256\n"
            "}\n");
  StatusOr<program::ModelConfig> config = ReadCheckpointConfig(ckpt);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(*config, Model());
  StatusOr<CheckpointData> loaded = LoadCheckpoint(ckpt, program_.params);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->model, Model());

  std::filesystem::remove(ckpt + "/config.json");
  loaded = LoadCheckpoint(ckpt, program_.params);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->model.vocab, kVocab);  // from the safetensors metadata
  EXPECT_EQ(ReadCheckpointConfig(ckpt).status().message(),
            ckpt + "/config.json: No such file or directory");
}

TEST_F(CheckpointTest, ABadModelConfigIsRefused) {
  CpuTrainer trainer(&program_, 1);
  const std::string ckpt = dir_ + "/ckpt";
  const std::string path = ckpt + "/config.json";
  // At save: a config never filled in, or one of another model.
  CheckpointData data = CaptureCpuTrainer(trainer, program_.params, {}, program::ModelConfig{});
  EXPECT_EQ(SaveCheckpoint(ckpt, data).message(), path + ": 'layers' is 0, not positive");
  data.model = Model();
  data.model.padded_vocab = 50304;
  EXPECT_EQ(SaveCheckpoint(ckpt, data).message(),
            path + ": 'padded_vocab' 50304 but wte.weight has 256 rows");
  // At load: each damage names the file and the key.
  data.model = Model();
  ASSERT_TRUE(SaveCheckpoint(ckpt, data).ok());
  const std::string ok_tail = R"("width": 64, "positions": 64, "vocab": 200, "padded_vocab": 256})";
  for (const auto& [text, error] : std::vector<std::pair<std::string, std::string>>{
           {"{\"name\": \"gpt2-tiny\", \"layers\": 1,", "not a JSON object"},
           {"[1, 2]", "not a JSON object"},
           {R"({"layers": 1, "heads": 4, )" + ok_tail, "no string 'name'"},
           {R"({"name": "t", "heads": 4, )" + ok_tail, "no 'layers'"},
           {R"({"name": "t", "layers": "1", "heads": 4, )" + ok_tail,
            "'layers' is \"1\", not an integer"},
           {R"({"name": "t", "layers": 1, "heads": 3, )" + ok_tail,
            "'heads' 3 does not divide 'width' 64"},
           {R"({"name": "t", "layers": 1, "heads": 4, "width": 64, "positions": 64, )"
            R"("vocab": 300, "padded_vocab": 256})",
            "'vocab' 300 exceeds 'padded_vocab' 256"},
       }) {
    ASSERT_TRUE(WriteFileAtomically(path, text).ok());
    EXPECT_EQ(ReadCheckpointConfig(ckpt).status().message(), path + ": " + error) << text;
    EXPECT_EQ(LoadCheckpoint(ckpt, program_.params).status().message(), path + ": " + error);
  }
}

TEST_F(CheckpointTest, MismatchedStepsAreCaught) {
  CpuTrainer trainer(&program_, 1);
  const std::string ckpt = dir_ + "/ckpt";
  CheckpointData data = CaptureCpuTrainer(trainer, program_.params, {}, Model());
  ASSERT_TRUE(SaveCheckpoint(ckpt, data).ok());
  StatusOr<std::string> old_optim = ReadFile(ckpt + "/optim.safetensors");
  data.step = 7;
  ASSERT_TRUE(SaveCheckpoint(ckpt, data).ok());
  ASSERT_TRUE(WriteFileAtomically(ckpt + "/optim.safetensors", *old_optim).ok());
  StatusOr<CheckpointData> r = LoadCheckpoint(ckpt, program_.params);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), ckpt + ": model is at step 7 but optim.safetensors is at step 0");
}

// Note [checkpoint checksums]: a flipped byte inside tensor data (the header
// still parses) is refused at load, naming the file; a file written before
// checksums existed still loads.
TEST_F(CheckpointTest, AFlippedTensorByteIsRefused) {
  CpuTrainer trainer(&program_, 1);
  const std::string ckpt = dir_ + "/ckpt";
  ASSERT_TRUE(SaveCheckpoint(ckpt, CaptureCpuTrainer(trainer, program_.params, {}, Model())).ok());
  ASSERT_TRUE(LoadCheckpoint(ckpt, program_.params).ok());
  for (const std::string file : {"model.safetensors", "optim.safetensors"}) {
    const std::string path = ckpt + "/" + file;
    StatusOr<std::string> good = ReadFile(path);
    ASSERT_TRUE(good.ok());
    std::string bad = *good;
    bad[bad.size() - 3] ^= 0x10;  // inside the last tensor
    ASSERT_TRUE(WriteFileAtomically(path, bad).ok());
    StatusOr<CheckpointData> r = LoadCheckpoint(ckpt, program_.params);
    ASSERT_FALSE(r.ok()) << file;
    EXPECT_TRUE(r.status().message().starts_with(path + ": checksum mismatch: __metadata__ says "
                                                        "fnv1a64m:"))
        << r.status().message();
    ASSERT_TRUE(WriteFileAtomically(path, *good).ok());
  }
  // Without the checksum (an older checkpoint): loads as before.
  StatusOr<SafeTensors> model = ReadSafeTensors(ckpt + "/model.safetensors");
  ASSERT_TRUE(model.ok());
  EXPECT_TRUE(model->metadata.at("gptc.checksum").starts_with("fnv1a64m:"));
  model->metadata.erase("gptc.checksum");
  ASSERT_TRUE(WriteSafeTensors(ckpt + "/model.safetensors", *model).ok());
  EXPECT_TRUE(LoadCheckpoint(ckpt, program_.params).ok());
}

// Note [checkpoint checksums]: the checksum covers the metadata too; a file
// of an older gptrun, whose "fnv1a64:" covers the tensors alone, still loads.
TEST_F(CheckpointTest, TheChecksumCoversTheMetadata) {
  CpuTrainer trainer(&program_, 1);
  const std::string ckpt = dir_ + "/ckpt", path = ckpt + "/model.safetensors";
  ASSERT_TRUE(SaveCheckpoint(ckpt, CaptureCpuTrainer(trainer, program_.params, {}, Model())).ok());
  StatusOr<SafeTensors> model = ReadSafeTensors(path);
  ASSERT_TRUE(model.ok());
  SafeTensors edited = *model;
  edited.metadata["gptc.step"] = "9223372036854775807";
  ASSERT_TRUE(WriteSafeTensors(path, edited).ok());
  StatusOr<CheckpointData> r = LoadCheckpoint(ckpt, program_.params);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().message().starts_with(path + ": checksum mismatch"))
      << r.status().message();
  // An older file: the tensors' checksum alone.
  SafeTensors older = *model;
  SafeTensors tensors_only{.tensors = model->tensors};
  const std::string all = CheckpointChecksum(tensors_only);
  older.metadata["gptc.checksum"] = "fnv1a64:" + all.substr(all.find(':') + 1);
  ASSERT_TRUE(WriteSafeTensors(path, older).ok());
  EXPECT_TRUE(LoadCheckpoint(ckpt, program_.params).ok());
  older.metadata["gptc.checksum"] = "sha7:abc";
  ASSERT_TRUE(WriteSafeTensors(path, older).ok());
  EXPECT_EQ(LoadCheckpoint(ckpt, program_.params).status().message(),
            path + ": __metadata__ 'gptc.checksum' is sha7:abc, not a checksum this gptrun knows");
}

// Note [checkpoint metadata ranges]: without a checksum to catch an edit,
// every field is checked against what a run can mean, in one line.
TEST_F(CheckpointTest, MetadataOutOfRangeIsRefused) {
  CpuTrainer trainer(&program_, 1);
  const std::string ckpt = dir_ + "/ckpt", path = ckpt + "/model.safetensors";
  CheckpointData data = CaptureCpuTrainer(trainer, program_.params, {}, Model());
  data.step = 3;
  data.run_id = "0123456789abcdef";
  StatusOr<DataSource> source =
      MakeDataSource("x/train_*.bin", {dir_ + "/train_000.bin"}, kSeq, 11);
  ASSERT_TRUE(source.ok());
  data.data_source = *source;
  ASSERT_TRUE(SaveCheckpoint(ckpt, data).ok());
  StatusOr<SafeTensors> good = ReadSafeTensors(path);
  ASSERT_TRUE(good.ok());
  ASSERT_TRUE(LoadCheckpoint(ckpt, program_.params).ok());
  const std::string big(200000, 'x');
  using Case = std::tuple<std::string, std::string, std::string>;
  for (const auto& [key, value, error] : std::vector<Case>{
           {"gptc.step", "9223372036854775807", "is 9223372036854775807, not in [0, 2^40]"},
           {"gptc.step", "-5", "is -5, not in [0, 2^40]"},
           {"gptc.step", big,
            "is '" + std::string(40, 'x') + "...' (200000 bytes), not an integer"},
           {"gptc.data.epoch", "4", "is 4, beyond the step 3 (an epoch takes at least one step)"},
           {"gptc.data.shard", "2", "is 2, beyond the 1 shards the run read"},
           {"gptc.data.sequence", "-1", "is -1, not in [0, 2147483648]"},
           {"gptc.vocab", "257", "is 257, not in [1, 256]"},
           {"gptc.run_id", "abc\nd", "is 'abc\\x0ad', not 16 hex digits"},
           {"gptc.data.seq", "0", "is 0, not in [1, 16777216]"},
           {"gptc.data.seed", "-1", "is '-1', not a seed"},
           {"gptc.val_loss", "nan", "is 'nan', not a finite loss (>= 0)"},
           {"gptc.val_loss", "-2", "is '-2', not a finite loss (>= 0)"},
           {"gptc.data.files", "[[\"a/b.bin\", 2048, \"0000000000000001\"]]",
            "entry 0: 'a/b.bin' is not a file name"},
           {"gptc.data.files", "[]", "lists 0 shards, not 1 to 1048576"},
       }) {
    SafeTensors bad = *good;
    bad.metadata.erase("gptc.checksum");
    bad.metadata[key] = value;
    ASSERT_TRUE(WriteSafeTensors(path, bad).ok());
    EXPECT_EQ(LoadCheckpoint(ckpt, program_.params).status().message(),
              path + ": __metadata__ '" + key + "' " + error);
  }
}

// Generation reads the model file alone; a Hugging Face directory is named.
TEST_F(CheckpointTest, ModelOnlyLoadsWithoutTheOptimizerFile) {
  CpuTrainer trainer(&program_, 1);
  const std::string ckpt = dir_ + "/ckpt";
  ASSERT_TRUE(SaveCheckpoint(ckpt, CaptureCpuTrainer(trainer, program_.params, {}, Model())).ok());
  std::filesystem::remove(ckpt + "/optim.safetensors");
  EXPECT_FALSE(LoadCheckpoint(ckpt, program_.params).ok());
  StatusOr<CheckpointData> r = LoadCheckpoint(ckpt, program_.params, CheckpointParts::kModelOnly);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->adam_m.size(), program_.params.size());
  EXPECT_EQ(r->adam_m[0], std::vector<float>(r->values[0].size(), 0.0f));
  ASSERT_TRUE(WriteFileAtomically(ckpt + "/config.json", R"({"model_type": "gpt2", "n_layer": 1})")
                  .ok());
  EXPECT_EQ(LoadCheckpoint(ckpt, program_.params, CheckpointParts::kModelOnly).status().message(),
            ckpt + "/config.json: a Hugging Face model's config (gptc export-hf writes these), not "
                   "a gptc checkpoint's: make one with gptc import-hf " +
                ckpt + " OUT_DIR, then use OUT_DIR");
}

// Note [shard identity]: the same files under another pattern or directory
// are the same data; other files are named.
TEST_F(CheckpointTest, DataSourcesCompareTheFilesNotThePatterns) {
  const std::string a = dir_ + "/a", b = dir_ + "/b";
  std::filesystem::create_directories(a);
  std::filesystem::create_directories(b);
  std::vector<int32_t> t1(500, 3), t2(700, 4), t3(500, 5);
  for (const std::string& d : {a, b}) {
    ASSERT_TRUE(WriteFileAtomically(d + "/train_000.bin", EncodeShard(t1)).ok());
    ASSERT_TRUE(WriteFileAtomically(d + "/train_001.bin", EncodeShard(t2)).ok());
  }
  auto source = [&](const std::string& pattern, std::vector<std::string> files) {
    StatusOr<DataSource> s = MakeDataSource(pattern, files, kSeq, 11);
    EXPECT_TRUE(s.ok());
    return *s;
  };
  const DataSource was = source("a/train_*.bin", {a + "/train_000.bin", a + "/train_001.bin"});
  EXPECT_EQ(DataSourceChanges(was, source("b/train_00*.bin",
                                          {b + "/train_000.bin", b + "/train_001.bin"})),
            std::vector<std::string>{});
  EXPECT_EQ(DataSourceChanges(was, source("b/train_000.bin", {b + "/train_000.bin"})),
            std::vector<std::string>{
                "--train 'b/train_000.bin' finding 1 shard where the checkpoint read 2 from "
                "'a/train_*.bin': it lacks the checkpoint's train_001.bin (2,424 bytes)"});
  ASSERT_TRUE(WriteFileAtomically(b + "/train_000.bin", EncodeShard(t3)).ok());
  EXPECT_EQ(DataSourceChanges(was, source("b/*", {b + "/train_000.bin", b + "/train_001.bin"})),
            std::vector<std::string>{
                "--train 'b/*' finding 2 shards where the checkpoint read 2 from "
                "'a/train_*.bin': its train_000.bin begins with other tokens than the "
                "checkpoint's"});
  DataSource legacy{.train = "old", .legacy_shards = was.NamesHash(), .seq = kSeq, .seed = "11"};
  EXPECT_EQ(DataSourceChanges(legacy, was), std::vector<std::string>{});
  DataSource reseeded = was;
  reseeded.seed = "7";
  EXPECT_EQ(DataSourceChanges(was, reseeded),
            std::vector<std::string>{"--seed 7 where the checkpoint had 11"});
}

}  // namespace
}  // namespace gptc::rt
