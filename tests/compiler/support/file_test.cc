#include "compiler/support/file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace gptc {
namespace {

namespace fs = std::filesystem;

// A file that is not there is an error of kind not found; one that cannot
// be read for another reason is not.
TEST(FileTest, AMissingFileIsNotFound) {
  const fs::path dir = fs::path(::testing::TempDir()) / "file_test_missing";
  fs::create_directories(dir);
  StatusOr<std::string> missing = ReadFile((dir / "absent.gptx").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  StatusOr<std::string> directory = ReadFile(dir.string());
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.status().code(), StatusCode::kNotFound);
}

// The temporary file beside a name near NAME_MAX must itself be a valid name,
// and nothing but the file is left.
TEST(FileTest, WriteFileAtomicallyTakesANameNearTheLimit) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("file_test_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string name = std::string(250, 'a') + ".gptx";  // 255 characters
  ASSERT_TRUE(WriteFileAtomically((dir / name).string(), "contents").ok());
  StatusOr<std::string> back = ReadFile((dir / name).string());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, "contents");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  const Status too_long = WriteFileAtomically((dir / (name + "x")).string(), "x");
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.message().find("File name too long"), std::string::npos)
      << too_long.message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gptc
