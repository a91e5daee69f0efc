// The gemm autotuning cache (Note [autotune cache] in
// runtime/gpu/autotune_cache.h): it can make a load faster, never fail one.
// A truncated file, a file of another format, another GPU's entries, two
// processes saving at once and a folder that cannot be written. No GPU.
#include "runtime/gpu/autotune_cache.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "compiler/support/file.h"
#include "runtime/gpu/autotune_options.h"

namespace gptc::rt::gpu {
namespace {

namespace fs = std::filesystem;

class AutotuneCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("autotune_cache_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "gptc" / "autotune.json").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  static CachedGemm Gemm(int algorithm) {
    return CachedGemm{.path = "epilogue",
                      .algorithm = std::string(128, static_cast<char>('0' + algorithm)),
                      .us = 10.0 + algorithm,
                      .candidates = 4};
  }
  nlohmann::json ReadJson() const {
    StatusOr<std::string> text = ReadFile(path_);
    EXPECT_TRUE(text.ok());
    return nlohmann::json::parse(text.ok() ? *text : "", nullptr, false);
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(AutotuneCacheTest, SavedChoicesAreFoundByTheNextLoad) {
  AutotuneCache a(path_, "gpu A");
  EXPECT_TRUE(a.Load().empty());  // no file: an empty cache, no warning
  EXPECT_EQ(a.Find("k1"), nullptr);
  a.Put("k1", Gemm(1));
  a.Put("k2", Gemm(2));
  ASSERT_TRUE(a.Save().ok());
  AutotuneCache b(path_, "gpu A");
  EXPECT_TRUE(b.Load().empty());
  ASSERT_NE(b.Find("k1"), nullptr);
  EXPECT_EQ(*b.Find("k1"), Gemm(1));
  EXPECT_EQ(*b.Find("k2"), Gemm(2));
  EXPECT_EQ(b.size(), 2u);
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));
}

TEST_F(AutotuneCacheTest, ATruncatedFileIsAWarningAndIsReplaced) {
  AutotuneCache a(path_, "gpu A");
  a.Load();
  a.Put("k1", Gemm(1));
  ASSERT_TRUE(a.Save().ok());
  StatusOr<std::string> text = ReadFile(path_);
  ASSERT_TRUE(text.ok());
  ASSERT_TRUE(WriteFileAtomically(path_, text->substr(0, text->size() / 2)).ok());

  AutotuneCache b(path_, "gpu A");
  const std::vector<std::string> warnings = b.Load();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(path_), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("not JSON"), std::string::npos) << warnings[0];
  EXPECT_EQ(b.Find("k1"), nullptr);  // tuned again
  b.Put("k1", Gemm(3));
  ASSERT_TRUE(b.Save().ok());
  AutotuneCache c(path_, "gpu A");
  EXPECT_TRUE(c.Load().empty());
  ASSERT_NE(c.Find("k1"), nullptr);
  EXPECT_EQ(*c.Find("k1"), Gemm(3));
}

TEST_F(AutotuneCacheTest, AFileOfAnotherFormatOrShapeIsAWarning) {
  for (const std::string& text :
       {std::string("[1, 2]"), std::string(R"({"format": "gptc-autotune-0", "devices": {}})"),
        std::string(R"({"format": "gptc-autotune-1", "devices": {"gpu A": {"k": {"us": 1}}}})"),
        std::string(R"({"format": "gptc-autotune-1", "devices": []})")}) {
    fs::create_directories(fs::path(path_).parent_path());
    ASSERT_TRUE(WriteFileAtomically(path_, text).ok());
    AutotuneCache a(path_, "gpu A");
    const std::vector<std::string> warnings = a.Load();
    EXPECT_EQ(warnings.size(), 1u) << text;
    EXPECT_EQ(a.size(), 0u) << text;
  }
}

TEST_F(AutotuneCacheTest, AnotherGpusEntriesAreNotUsedAndAreKept) {
  AutotuneCache h100(path_, "NVIDIA H100 80GB HBM3 | driver 13000 | cuBLASLt 130100");
  h100.Load();
  h100.Put("k1", Gemm(1));
  ASSERT_TRUE(h100.Save().ok());

  AutotuneCache h200(path_, "NVIDIA H200 | driver 13000 | cuBLASLt 130100");
  EXPECT_TRUE(h200.Load().empty());  // another GPU's file is no fault
  EXPECT_EQ(h200.Find("k1"), nullptr);
  EXPECT_EQ(h200.other_devices(), 1u);
  h200.Put("k1", Gemm(2));
  ASSERT_TRUE(h200.Save().ok());

  const nlohmann::json j = ReadJson();
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["devices"].size(), 2u);
  AutotuneCache again(path_, "NVIDIA H100 80GB HBM3 | driver 13000 | cuBLASLt 130100");
  again.Load();
  ASSERT_NE(again.Find("k1"), nullptr);
  EXPECT_EQ(*again.Find("k1"), Gemm(1));
}

TEST_F(AutotuneCacheTest, TwoProcessesSavingAtOnceKeepBothEntries) {
  for (int round = 0; round < 20; ++round) {
    fs::remove_all(fs::path(path_).parent_path());
    pid_t children[2];
    for (int c = 0; c < 2; ++c) {
      children[c] = fork();
      ASSERT_GE(children[c], 0);
      if (children[c] == 0) {
        AutotuneCache cache(path_, "gpu A");
        cache.Load();
        for (int k = 0; k < 20; ++k) cache.Put(fmt::format("p{} k{}", c, k), Gemm(c));
        _exit(cache.Save().ok() ? 0 : 1);
      }
    }
    for (pid_t child : children) {
      int status = 0;
      ASSERT_EQ(waitpid(child, &status, 0), child);
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round;
    }
    AutotuneCache cache(path_, "gpu A");
    ASSERT_TRUE(cache.Load().empty()) << "round " << round;
    EXPECT_EQ(cache.size(), 40u) << "round " << round;
  }
}

TEST_F(AutotuneCacheTest, AFolderThatCannotBeWrittenIsAnErrorForAWarning) {
  // A path under a regular file: no user, root included, can create it.
  std::ofstream(dir_ / "file") << "x";
  AutotuneCache a((dir_ / "file" / "gptc" / "autotune.json").string(), "gpu A");
  EXPECT_TRUE(a.Load().empty());
  a.Put("k1", Gemm(1));
  Status s = a.Save();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("file"), std::string::npos) << s.message();
  EXPECT_NE(a.Find("k1"), nullptr);  // the choice holds for the process
}

TEST_F(AutotuneCacheTest, NoPathIsNoFile) {
  AutotuneCache a("", "gpu A");
  EXPECT_TRUE(a.Load().empty());
  a.Put("k1", Gemm(1));
  EXPECT_TRUE(a.Save().ok());
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST(AutotuneOptionsTest, ModesAndTheDefaultPath) {
  EXPECT_EQ(ParseAutotuneMode("off"), AutotuneMode::kOff);
  EXPECT_EQ(ParseAutotuneMode("cached"), AutotuneMode::kCached);
  EXPECT_EQ(ParseAutotuneMode("on"), AutotuneMode::kOn);
  EXPECT_EQ(ParseAutotuneMode("yes"), std::nullopt);
  for (AutotuneMode m : {AutotuneMode::kOff, AutotuneMode::kCached, AutotuneMode::kOn}) {
    EXPECT_EQ(ParseAutotuneMode(AutotuneModeName(m)), m);
  }
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved = xdg != nullptr ? xdg : "";
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  EXPECT_EQ(DefaultAutotuneCachePath(), "/x/cache/gptc/autotune.json");
  unsetenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0') {
    EXPECT_EQ(DefaultAutotuneCachePath(), std::string(home) + "/.cache/gptc/autotune.json");
  }
  if (xdg != nullptr) setenv("XDG_CACHE_HOME", saved.c_str(), 1);
}

}  // namespace
}  // namespace gptc::rt::gpu
