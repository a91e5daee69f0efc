// A --ckpt-dir's housekeeping (tools/gptrun/checkpoint_dir.h): Note [whole
// step directories] (a step directory appears and goes in one rename, an
// incomplete one is skipped and never counted) and Note [lock file].
#include "tools/gptrun/checkpoint_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/testing/command.h"

namespace gptc::tools {
namespace {

namespace fs = std::filesystem;

// A tiny checkpoint: one 8 x 4 token table.
rt::CheckpointData Tiny(int64_t step) {
  rt::CheckpointData d;
  d.step = step;
  d.run_id = "00000000000000aa";
  d.model = {.name = "tiny",
             .layers = 1,
             .heads = 1,
             .width = 4,
             .positions = 4,
             .vocab = 8,
             .padded_vocab = 8};
  d.params = {
      program::ParamSpec{.name = "wte.weight", .shape = ir::Shape(ir::DType::kF32, {8, 4})}};
  d.values = d.adam_m = d.adam_v = {std::vector<float>(32, static_cast<float>(step))};
  return d;
}

class CheckpointDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("ckpt_dir_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

TEST_F(CheckpointDirTest, IncompleteStepDirectoriesAreSkippedAndNeverCounted) {
  for (int64_t step : {1, 2}) ASSERT_TRUE(SaveStepCheckpoint(dir_, step, Tiny(step)).ok());
  // What a gptrun that deleted in place left when killed: config.json alone.
  fs::create_directories(dir_ / "step_000003");
  std::ofstream(dir_ / "step_000003" / "config.json") << "{}";
  std::vector<std::string> skipped;
  StatusOr<std::string> latest = LatestCheckpoint(dir_, &skipped);
  ASSERT_TRUE(latest.ok()) << latest.status().message();
  EXPECT_EQ(*latest, (dir_ / "step_000002").string());
  EXPECT_EQ(skipped,
            std::vector<std::string>{(dir_ / "step_000003").string() + " (no model.safetensors)"});
  // --ckpt-keep 2 keeps two whole ones beside it.
  ASSERT_TRUE(SaveStepCheckpoint(dir_, 4, Tiny(4)).ok());
  StatusOr<std::vector<std::string>> pruned = PruneCheckpoints(dir_, 2);
  ASSERT_TRUE(pruned.ok());
  EXPECT_EQ(*pruned, std::vector<std::string>{"step_000001"});
  EXPECT_EQ(Names(), (std::vector<std::string>{"step_000002", "step_000003", "step_000004"}));
  // Saving its step again replaces it with a whole one.
  ASSERT_TRUE(SaveStepCheckpoint(dir_, 3, Tiny(3)).ok());
  skipped.clear();
  ASSERT_TRUE(LatestCheckpoint(dir_, &skipped).ok());
  EXPECT_TRUE(skipped.empty());
  EXPECT_TRUE(fs::exists(dir_ / "step_000003" / "optim.safetensors"));
  EXPECT_EQ(Names(), (std::vector<std::string>{"step_000002", "step_000003", "step_000004"}));
}

// What a run killed while removing or swapping leaves under the temporary
// names is removed by the next one, and no step directory is ever partial.
TEST_F(CheckpointDirTest, LeftoversOfAKilledRunAreRemoved) {
  ASSERT_TRUE(SaveStepCheckpoint(dir_, 5, Tiny(5)).ok());
  fs::create_directories(dir_ / "step_000004.removing");
  fs::create_directories(dir_ / "step_000006.tmp");
  StatusOr<std::vector<std::string>> removed = RemoveStaleTemporaries(dir_);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, (std::vector<std::string>{"step_000006.tmp", "step_000004.removing"}));
  EXPECT_EQ(Names(), std::vector<std::string>{"step_000005"});
  StatusOr<std::vector<StepCheckpoint>> all = ListCheckpoints(dir_);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].incomplete, "");
  EXPECT_EQ((*all)[0].run_id, "00000000000000aa");
}

// Note [lock file]: a symbolic link or a FIFO at the lock is refused; what
// the link points to stays as it was.
TEST_F(CheckpointDirTest, ALockThatIsNoRegularFileIsRefused) {
  const fs::path victim = dir_ / "victim.txt", ckpt = dir_ / "ckpt";
  std::ofstream(victim) << "precious";
  fs::create_directories(ckpt);
  fs::create_symlink(victim, ckpt / ".gptrun.lock");
  StatusOr<CheckpointDirLock> lock = CheckpointDirLock::Acquire(ckpt);
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().message(),
            "--ckpt-dir " + ckpt.string() + ": the lock " + (ckpt / ".gptrun.lock").string() +
                " is a symbolic link, which gptrun refuses to write through: remove it");
  EXPECT_EQ(testing::ReadAll(victim), "precious");
  fs::remove(ckpt / ".gptrun.lock");
  ASSERT_EQ(mkfifo((ckpt / ".gptrun.lock").c_str(), 0644), 0);
  StatusOr<CheckpointDirLock> fifo = CheckpointDirLock::Acquire(ckpt);
  ASSERT_FALSE(fifo.ok());
  EXPECT_NE(fifo.status().message().find("is not a regular file"), std::string::npos);
  fs::remove(ckpt / ".gptrun.lock");
  EXPECT_TRUE(CheckpointDirLock::Acquire(ckpt).ok());
}

}  // namespace
}  // namespace gptc::tools
