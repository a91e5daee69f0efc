// Failures gptrun reports before step 1, not late:
// - a rendezvous that waits says for whom every 5 s (was: silent until the
//   timeout);
// - a --device gpu rank without a GPU says so, and the ranks waiting for it
//   hear why (was: after waiting for the rendezvous);
// - a token id beyond the vocabulary in any shard (was: when the loader
//   reached that shard);
// - a --ckpt-dir that cannot take checkpoints (was: at the first
//   checkpoint, by default after the last step).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/data_loader.h"
#include "tests/testing/command.h"

namespace gptc {
namespace {

namespace fs = std::filesystem;
using testing::ReadAll;

using Result = testing::CommandResult;

int CountLines(const std::string& text, const std::string& prefix = "") {
  std::stringstream s(text);
  int n = 0;
  for (std::string line; std::getline(s, line);) n += line.starts_with(prefix) ? 1 : 0;
  return n;
}

// A noisy repeating pattern over 300 ids, with `bad` at index `at` (if >= 0).
void WriteShard(const fs::path& path, int count, int at = -1, int32_t bad = 0) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < count; ++i) tokens.push_back((i * 7 + i / 13) % 300);
  if (at >= 0) tokens[at] = bad;
  std::ofstream(path, std::ios::binary) << rt::EncodeShard(tokens);
}

class GptrunEarlyFailureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::path(::testing::TempDir()) /
                        ("gptrun_early_failures_" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    WriteShard(*dir_ / "train_000.bin", 3000);
    WriteShard(*dir_ / "val_000.bin", 1500);
    for (const auto& [name, flags] :
         {std::pair{"tiny.gptx", "--batch 2"}, std::pair{"dp2.gptx", "--batch 1 --dp 2"}}) {
      Result r = Run(std::string(GPTC_BIN) +
                     " compile --model gpt2-tiny --layers 1 --heads 2 --width 32 --seq 16 "
                     "--no-codegen " +
                     flags + " -o " + (*dir_ / name).string());
      ASSERT_EQ(r.code, 0) << r.out << r.err;
    }
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  static Result Run(const std::string& command) { return testing::RunCommand(command, *dir_); }

  // gptrun on the tiny artifact for 2 steps with `extra` flags, run by
  // `prefix` (setpriv, to run as another user), with `train` and `val` shard globs.
  static Result Gptrun(const std::string& extra, const std::string& prefix = "",
                       const std::string& train = "train_*.bin",
                       const std::string& val = "val_*.bin") {
    return Run(prefix + GPTRUN_BIN + " " + (*dir_ / "tiny.gptx").string() +
               " --device cpu --steps 2 --val-steps 1 --train '" + (*dir_ / train).string() +
               "' --val '" + (*dir_ / val).string() + "' " + extra);
  }

  // Exit 1, one line on stderr holding `message`, and no step ran.
  static void ExpectRefusedAtStart(const Result& r, const std::string& message) {
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_EQ(CountLines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_EQ(CountLines(r.out, "step "), 0) << r.out;
  }

  static int Port() {
    std::random_device rd;
    return 20000 + static_cast<int>(rd() % 20000);
  }

  static fs::path* dir_;
};

fs::path* GptrunEarlyFailureTest::dir_ = nullptr;

// Rank 0 of 3, alone: every 5 s a line names the ranks it waits for, then
// the timeout's one-line error.
TEST_F(GptrunEarlyFailureTest, RendezvousSaysWhomItWaitsFor) {
  const fs::path dp3 = *dir_ / "dp3.gptx";
  Result compiled = Run(std::string(GPTC_BIN) +
                        " compile --model gpt2-tiny --layers 1 --heads 2 --width 32 --seq 16 "
                        "--no-codegen --batch 1 --dp 3 -o " +
                        dp3.string());
  ASSERT_EQ(compiled.code, 0) << compiled.err;
  const int port = Port();
  const Result r =
      Run("GPTC_DIST_TIMEOUT=6 MASTER_PORT=" + std::to_string(port) + " RANK=0 WORLD_SIZE=3 " +
          GPTRUN_BIN + " " + dp3.string() + " --device cpu --train '" +
          (*dir_ / "train_*.bin").string() + "' --steps 1");
  EXPECT_EQ(r.code, 1) << r.err;
  const std::regex waiting("gptrun: rank 0: waiting for ranks 1, 2 of 3 at 127\\.0\\.0\\.1:" +
                           std::to_string(port) + " \\(5\\.\\d s of 6\\.0 s\\)\n");
  EXPECT_TRUE(std::regex_search(r.err, waiting)) << r.err;
  EXPECT_EQ(CountLines(r.err), 2) << r.err;  // the waiting line, then the error
  EXPECT_NE(r.err.find("but ranks 1, 2 of 3 never joined"), std::string::npos) << r.err;
}

// Rank 0 or rank 1 of 2, launched alone on a machine without a GPU: it says
// so at once instead of waiting GPTC_DIST_TIMEOUT for a peer that never comes.
TEST_F(GptrunEarlyFailureTest, LoneGpuRankWithoutAGpuSaysNoGpuBeforeTheRendezvous) {
  if (std::system("nvidia-smi -L > /dev/null 2>&1") == 0) {
    GTEST_SKIP() << "a GPU is present: this checks a machine without one";
  }
  for (int rank : {0, 1}) {
    const Result r =
        Run("GPTC_DIST_TIMEOUT=20 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(Port()) +
            " RANK=" + std::to_string(rank) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(rank) +
            " " + GPTRUN_BIN + " " + (*dir_ / "dp2.gptx").string() + " --device gpu --train '" +
            (*dir_ / "train_*.bin").string() + "' --steps 1");
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_EQ(CountLines(r.err), 1) << r.err;
    EXPECT_LT(r.seconds, 10.0) << r.err;  // not the 20 s timeout
    EXPECT_TRUE(r.err.find("no GPU") != std::string::npos ||
                r.err.find("built without the CUDA toolkit") != std::string::npos)
        << r.err;
  }
}

// The bad id is in the second shard: a 2-step run would never reach it.
// Rank 0 already waiting at the rendezvous (here a --device cpu rank, the
// kind this machine can start) hears at once why rank 1 will not come.
TEST_F(GptrunEarlyFailureTest, RankWithoutAGpuEndsTheWaitingRankZero) {
  if (std::system("nvidia-smi -L > /dev/null 2>&1") == 0) {
    GTEST_SKIP() << "a GPU is present: this checks a machine without one";
  }
  const std::string env =
      "GPTC_DIST_TIMEOUT=20 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(Port()) +
      " WORLD_SIZE=2 ";
  const std::string gptrun = std::string(GPTRUN_BIN) + " " + (*dir_ / "dp2.gptx").string() +
                             " --train '" + (*dir_ / "train_*.bin").string() + "' --steps 1 ";
  const fs::path r0 = *dir_ / "r0.txt", rc0 = *dir_ / "rc0.txt";
  // Rank 1's output is r's; rank 0's goes to r0.
  const Result r = Run("((" + env + "RANK=0 LOCAL_RANK=0 " + gptrun + "--device cpu > " +
                       r0.string() + " 2>&1; echo $? > " + rc0.string() + ") & sleep 2; " + env +
                       "RANK=1 LOCAL_RANK=1 " + gptrun + "--device gpu; wait)");
  EXPECT_LT(r.seconds, 12.0);  // not the 20 s timeout
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
  EXPECT_TRUE(r.err.find("no GPU") != std::string::npos ||
              r.err.find("built without the CUDA toolkit") != std::string::npos)
      << r.err;
  const std::string rank0 = ReadAll(r0);
  EXPECT_EQ(ReadAll(rc0), "1\n") << rank0;
  EXPECT_EQ(CountLines(rank0), 1) << rank0;
  EXPECT_NE(rank0.find("gptrun: rank 1 aborted: rank 1 of 2"), std::string::npos) << rank0;
}

TEST_F(GptrunEarlyFailureTest, TokenBeyondTheVocabularyInALaterShardIsRefusedAtStart) {
  const fs::path sub = *dir_ / "bad_train";
  fs::create_directories(sub);
  WriteShard(sub / "train_000.bin", 3000);
  WriteShard(sub / "train_001.bin", 2000, 1234, 60000);
  ExpectRefusedAtStart(Gptrun("", "", "bad_train/train_*.bin"),
                       "gptrun: --train: " + (sub / "train_001.bin").string() +
                           ": offset 3492: token 1234 is id 60000, not below the vocabulary "
                           "size 50257");
}

TEST_F(GptrunEarlyFailureTest, TokenBeyondTheVocabularyInAValShardIsRefusedAtStart) {
  const fs::path sub = *dir_ / "bad_val";
  fs::create_directories(sub);
  WriteShard(sub / "val_000.bin", 1500);
  WriteShard(sub / "val_001.bin", 1500, 7, 50257);  // the first id past the vocabulary
  ExpectRefusedAtStart(Gptrun("", "", "train_*.bin", "bad_val/val_*.bin"),
                       "gptrun: --val: " + (sub / "val_001.bin").string() +
                           ": offset 1038: token 7 is id 50257, not below the vocabulary size "
                           "50257");
}

TEST_F(GptrunEarlyFailureTest, CkptDirUnderARegularFileIsRefusedAtStart) {
  const fs::path file = *dir_ / "a_file";
  std::ofstream(file) << "x";
  const std::string ckpt = (file / "ckpt").string();
  ExpectRefusedAtStart(
      Gptrun("--ckpt-dir " + ckpt),
      "gptrun: --ckpt-dir " + ckpt + ": cannot create it: " + file.string() + " is a regular file");
}

TEST_F(GptrunEarlyFailureTest, CkptDirThatIsARegularFileIsRefusedAtStart) {
  const fs::path file = *dir_ / "ckpt_file";
  std::ofstream(file) << "x";
  ExpectRefusedAtStart(
      Gptrun("--ckpt-dir " + file.string()),
      "gptrun: --ckpt-dir " + file.string() + ": is a regular file, not a " + "directory");
}

// Root writes into read-only directories: as root, gptrun runs as nobody.
TEST_F(GptrunEarlyFailureTest, ReadOnlyCkptDirIsRefusedAtStart) {
  std::string as_user;
  if (geteuid() == 0) {
    as_user = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
    if (std::system((as_user + "true > /dev/null 2>&1").c_str()) != 0) {
      GTEST_SKIP() << "running as root, and setpriv cannot drop to nobody here";
    }
    // nobody reads the artifact and the shards.
    ASSERT_EQ(std::system(("chmod -R a+rX " + dir_->string()).c_str()), 0);
  }
  const fs::path ro = *dir_ / "read_only";
  fs::create_directories(ro);
  ASSERT_EQ(chmod(ro.c_str(), 0555), 0);
  const Result inside = Gptrun("--ckpt-dir " + (ro / "ckpt").string(), as_user);
  const Result at = Gptrun("--ckpt-dir " + ro.string(), as_user);
  chmod(ro.c_str(), 0755);
  ExpectRefusedAtStart(inside, "gptrun: --ckpt-dir " + (ro / "ckpt").string() +
                                   ": cannot create it: Permission denied");
  ExpectRefusedAtStart(
      at, "gptrun: --ckpt-dir " + ro.string() + ": cannot write there: Permission denied");
}

TEST_F(GptrunEarlyFailureTest, CkptDirIsCreatedWithItsParents) {
  const fs::path ckpt = *dir_ / "made" / "by" / "gptrun";
  const Result r = Gptrun("--ckpt-dir " + ckpt.string());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(fs::exists(ckpt / "step_000002" / "model.safetensors"));
  // Beside the checkpoint only the lock file (Note [checkpoint ownership]).
  EXPECT_TRUE(fs::exists(ckpt / ".gptrun.lock"));
  EXPECT_EQ(std::distance(fs::directory_iterator(ckpt), fs::directory_iterator()), 2)
      << "the probe file is left behind";
}

}  // namespace
}  // namespace gptc
