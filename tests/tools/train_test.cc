// Train (tools/gptrun/train_loop.h, library gptc_train) called in-process:
// the code gptrun runs, with its summary read directly. Its losses equal
// gptrun's own (the JSON log's full precision), a validation lands in the
// summary, and failures return gptrun's exit codes with the one-line error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/data_loader.h"
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
