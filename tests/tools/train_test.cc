// Train (tools/gptrun/train_loop.h, library gptc_train) called in-process:
// the code gptrun runs, with its summary read directly. Its losses equal
// gptrun's own (the JSON log's full precision), a validation lands in the
// summary, and failures return gptrun's exit codes with the one-line error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "runtime/data_loader.h"
#include "runtime/safetensors.h"
#include "tests/testing/command.h"
#include "tools/gptrun/train_loop.h"

namespace gptc {
namespace {

namespace fs = std::filesystem;

class TrainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ =
        new fs::path(fs::path(::testing::TempDir()) / ("train_test_" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 4000; ++i) tokens.push_back((i * 7 + (i / 13)) % 300);
    std::ofstream(*dir_ / "train_000.bin", std::ios::binary) << rt::EncodeShard(tokens);
    testing::CommandResult r = testing::RunCommand(
        std::string(GPTC_BIN) +
            " compile --model gpt2-tiny --layers 1 --heads 2 --width 32 --batch 2 --seq 16"
            " --no-codegen -o " +
            (*dir_ / "tiny.gptx").string(),
        *dir_);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  static tools::TrainOptions Options() {
    tools::TrainOptions o;
    o.artifact = (*dir_ / "tiny.gptx").string();
    o.device = "cpu";
    o.train = (*dir_ / "train_*.bin").string();
    o.steps = 6;
    o.lr = 1e-3;
    o.seed = 7;
    o.quiet = true;
    return o;
  }

  static fs::path* dir_;
};
fs::path* TrainTest::dir_ = nullptr;

TEST_F(TrainTest, LossesEqualGptrunsLogAndFall) {
  tools::TrainOptions o = Options();
  tools::TrainSummary summary;
  ASSERT_EQ(tools::Train(o, &summary), 0) << summary.error;
  EXPECT_EQ(summary.device, "cpu");
  EXPECT_EQ(summary.first_step, 1);
  ASSERT_EQ(summary.losses.size(), 6u);
  EXPECT_TRUE(summary.error.empty());
  EXPECT_GT(summary.tokens_per_second, 0);
  EXPECT_GT(summary.train_seconds, 0);
  // gpt2-tiny starts near ln(vocab) and learns the repeating pattern.
  EXPECT_NEAR(summary.losses.front(), std::log(50257.0), 1.0);
  EXPECT_LT(summary.losses.back(), summary.losses.front());

  // The same run through the gptrun executable.
  const fs::path log = *dir_ / "gptrun.jsonl";
  testing::CommandResult r =
      testing::RunCommand(std::string(GPTRUN_BIN) + " " + o.artifact + " --device cpu --train '" +
                              o.train + "' --steps 6 --lr 1e-3 --seed 7 --log " + log.string(),
                          *dir_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::vector<double> logged;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j["event"] == "step") logged.push_back(j["loss"].get<double>());
  }
  EXPECT_EQ(logged, summary.losses);
}

TEST_F(TrainTest, ValidationLandsInTheSummary) {
  tools::TrainOptions o = Options();
  o.steps = 4;
  o.val = o.train;
  o.val_every = 2;
  o.val_steps = 2;
  tools::TrainSummary summary;
  ASSERT_EQ(tools::Train(o, &summary), 0) << summary.error;
  ASSERT_EQ(summary.val_losses.size(), 2u);
  EXPECT_EQ(summary.val_losses[0].first, 2);
  EXPECT_EQ(summary.val_losses[1].first, 4);
  EXPECT_TRUE(std::isfinite(summary.val_losses[1].second));
}

// --resume auto in a job that is stopped and started again: the first start
// finds no checkpoint and starts at step 1, every restart continues from the
// newest one, and the losses are those of one uninterrupted run.
TEST_F(TrainTest, ResumeAutoServesTheFirstStartAndEveryRestart) {
  tools::TrainOptions whole = Options();
  tools::TrainSummary one_run;
  ASSERT_EQ(tools::Train(whole, &one_run), 0) << one_run.error;
  ASSERT_EQ(one_run.losses.size(), 6u);

  tools::TrainOptions o = Options();
  o.ckpt_dir = (*dir_ / "auto").string();
  o.ckpt_every = 1;
  o.resume = "auto";
  std::vector<double> losses;
  for (int64_t stop : {2, 3, 5, 6}) {  // each start runs to `stop`, then the job is restarted
    o.steps = stop;
    tools::TrainSummary part;
    ASSERT_EQ(tools::Train(o, &part), 0) << part.error;
    EXPECT_EQ(part.first_step, static_cast<int64_t>(losses.size()) + 1);
    losses.insert(losses.end(), part.losses.begin(), part.losses.end());
  }
  EXPECT_EQ(losses, one_run.losses);
}

// Note [checkpoint ownership]: a fresh run refuses a directory holding
// another run's checkpoints (--overwrite removes them), a resumed run keeps
// its checkpoint's run, and --resume latest refuses a directory mixing runs.
TEST_F(TrainTest, ACheckpointDirHoldsOneRun) {
  tools::TrainOptions first = Options();
  first.ckpt_dir = (*dir_ / "owned").string();
  first.steps = 2;
  tools::TrainSummary summary;
  ASSERT_EQ(tools::Train(first, &summary), 0) << summary.error;

  tools::TrainOptions fresh = first;
  EXPECT_EQ(tools::Train(fresh, &summary), 1);
  EXPECT_EQ(summary.error, "--ckpt-dir " + first.ckpt_dir +
                               " holds another run's checkpoints (step_000002): --resume latest "
                               "continues that run, --overwrite removes them, or choose another "
                               "--ckpt-dir");
  tools::TrainOptions resumed = first;
  resumed.steps = 3;
  resumed.resume = "latest";
  ASSERT_EQ(tools::Train(resumed, &summary), 0) << summary.error;
  EXPECT_EQ(summary.first_step, 3);

  // Another run's checkpoint copied in: latest is ambiguous.
  tools::TrainOptions other = Options();
  other.ckpt_dir = (*dir_ / "other").string();
  other.steps = 4;
  ASSERT_EQ(tools::Train(other, &summary), 0) << summary.error;
  fs::copy(*dir_ / "other" / "step_000004", *dir_ / "owned" / "step_000004",
           fs::copy_options::recursive);
  resumed.steps = 5;
  EXPECT_EQ(tools::Train(resumed, &summary), 1);
  EXPECT_NE(summary.error.find("holds the checkpoints of 2 runs"), std::string::npos)
      << summary.error;
  resumed.resume = "auto";
  EXPECT_EQ(tools::Train(resumed, &summary), 1);
  EXPECT_NE(
      summary.error.find("--resume auto: " + first.ckpt_dir + " holds the checkpoints of 2 runs"),
      std::string::npos)
      << summary.error;

  fresh.overwrite = true;
  ASSERT_EQ(tools::Train(fresh, &summary), 0) << summary.error;
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(first.ckpt_dir)) {
    names.insert(e.path().filename().string());
  }
  EXPECT_EQ(names, (std::set<std::string>{".gptrun.lock", "step_000002"}));
}

// Note [data source]: the data loader's position is refused with other data,
// seed or sequence length, unless --reset-data starts the data over; the
// checkpoints after it record the new source.
TEST_F(TrainTest, ResumingWithOtherDataNeedsResetData) {
  tools::TrainOptions o = Options();
  o.ckpt_dir = (*dir_ / "data_source").string();
  o.steps = 2;
  tools::TrainSummary summary;
  ASSERT_EQ(tools::Train(o, &summary), 0) << summary.error;
  const std::string ckpt = o.ckpt_dir + "/step_000002";

  tools::TrainOptions seed = o;
  seed.resume = ckpt;
  seed.steps = 4;
  seed.seed = 8;
  EXPECT_EQ(tools::Train(seed, &summary), 2);
  EXPECT_EQ(summary.error, "--resume " + ckpt +
                               ": this run has --seed 8 where the checkpoint had 7: the data "
                               "order would "
                               "change (some data repeated, some skipped); --reset-data starts "
                               "the data over");
  fs::create_directories(*dir_ / "two");
  fs::copy(*dir_ / "train_000.bin", *dir_ / "two" / "train_000.bin");
  fs::copy(*dir_ / "train_000.bin", *dir_ / "two" / "train_001.bin");
  tools::TrainOptions shards = seed;
  shards.seed = 7;
  shards.train = (*dir_ / "two" / "train_*.bin").string();
  EXPECT_EQ(tools::Train(shards, &summary), 2);
  EXPECT_NE(summary.error.find("this run has --train '" + shards.train +
                               "' finding 2 shards where the checkpoint read 1 from '" + o.train +
                               "': it adds train_001.bin ("),
            std::string::npos)
      << summary.error;
  // The same file under another pattern is the same data (Note [shard identity]).
  tools::TrainOptions same = seed;
  same.seed = 7;
  same.train = (*dir_ / "two" / "train_000.bin").string();
  EXPECT_EQ(tools::Train(same, &summary), 0) << summary.error;

  seed.reset_data = true;
  ASSERT_EQ(tools::Train(seed, &summary), 0) << summary.error;
  EXPECT_EQ(summary.first_step, 3);
  StatusOr<std::map<std::string, std::string>> meta =
      rt::ReadSafeTensorsMetadata(o.ckpt_dir + "/step_000004/model.safetensors");
  ASSERT_TRUE(meta.ok()) << meta.status().message();
  EXPECT_EQ((*meta)["gptc.data.seed"], "8");
  tools::TrainOptions after = o;  // seed 8 is now the run's: no --reset-data
  after.seed = 8;
  after.steps = 5;
  after.resume = "latest";
  EXPECT_EQ(tools::Train(after, &summary), 0) << summary.error;
}

// A run whose steps `steps` report a NaN loss (fault injection).
tools::TrainHooks NonfiniteAt(std::vector<int64_t> steps) {
  return {.after_step = [steps](int64_t step, double& loss, double&) {
    if (std::find(steps.begin(), steps.end(), step) != steps.end()) {
      loss = std::numeric_limits<double>::quiet_NaN();
    }
  }};
}

// Note [divergence]: --skip-nonfinite undoes a bad step (here one made bad
// by fault injection): its checkpoint holds the previous step's parameters
// and moments under its own step count, and the run goes on; one bad step
// more than allowed ends the run naming it.
TEST_F(TrainTest, SkipNonfiniteUndoesABadStep) {
  tools::TrainOptions o = Options();
  o.ckpt_dir = (*dir_ / "skips").string();
  o.ckpt_every = 1;
  o.ckpt_keep = 0;
  o.steps = 5;
  o.skip_nonfinite = 1;
  tools::TrainSummary summary;
  ASSERT_EQ(tools::Train(o, &summary, NonfiniteAt({3})), 0) << summary.error;
  ASSERT_EQ(summary.losses.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(std::isnan(summary.losses[i]), i == 2) << i;
  for (const char* file : {"model.safetensors", "optim.safetensors"}) {
    StatusOr<rt::SafeTensors> two = rt::ReadSafeTensors(o.ckpt_dir + "/step_000002/" + file);
    StatusOr<rt::SafeTensors> three = rt::ReadSafeTensors(o.ckpt_dir + "/step_000003/" + file);
    ASSERT_TRUE(two.ok() && three.ok()) << file;
    EXPECT_EQ(three->metadata["gptc.step"], "3");
    ASSERT_EQ(two->tensors.size(), three->tensors.size());
    for (size_t t = 0; t < two->tensors.size(); ++t) {
      EXPECT_EQ(two->tensors[t].data, three->tensors[t].data)
          << file << " " << two->tensors[t].name;
    }
  }

  tools::TrainOptions twice = Options();
  twice.steps = 5;
  twice.skip_nonfinite = 1;
  EXPECT_EQ(tools::Train(twice, &summary, NonfiniteAt({2, 4})), 1);
  EXPECT_NE(summary.error.find("step 4: the loss is nan"), std::string::npos) << summary.error;
  EXPECT_NE(summary.error.find("1 steps skipped already, --skip-nonfinite 1"), std::string::npos)
      << summary.error;
}

TEST_F(TrainTest, FailuresReturnGptrunsExitCodesAndTheError) {
  tools::TrainOptions o = Options();
  o.artifact = (*dir_ / "missing.gptx").string();
  tools::TrainSummary summary;
  EXPECT_EQ(tools::Train(o, &summary), 1);
  EXPECT_NE(summary.error.find("missing.gptx"), std::string::npos) << summary.error;
  EXPECT_TRUE(summary.losses.empty());

  o = Options();
  o.grad_accum = 3;  // the artifact was compiled with 1: a bad request
  EXPECT_EQ(tools::Train(o, &summary), 2);
  EXPECT_NE(summary.error.find("--grad-accum 3"), std::string::npos) << summary.error;
}

}  // namespace
}  // namespace gptc
