// safetensors: round trip, atomic writes, truncated and malformed files.
#include "runtime/safetensors.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "compiler/support/file.h"

namespace gptc::rt {
namespace {

class SafeTensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gptc_st_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

SafeTensors Sample(int64_t rows) {
  SafeTensors file;
  std::vector<float> w(rows * 3);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * i - 1.0f;
  file.tensors.push_back(F32Tensor("h.0.attn.c_attn.weight", {rows, 3}, w));
  SafeTensor step{"step", "I64", {}, std::string(8, '\0')};
  const int64_t s = 42;
  std::memcpy(step.data.data(), &s, 8);
  file.tensors.push_back(step);
  file.tensors.push_back(SafeTensor{"half", "BF16", {2}, std::string("\x80\x3f\x00\x40", 4)});
  file.metadata = {{"format", "pt"}, {"gptc.step", "42"}};
  return file;
}

TEST_F(SafeTensorsTest, RoundTrip) {
  const std::string path = dir_ + "/a.safetensors";
  SafeTensors file = Sample(4);
  ASSERT_TRUE(WriteSafeTensors(path, file).ok());
  StatusOr<SafeTensors> back = ReadSafeTensors(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->metadata, file.metadata);
  ASSERT_EQ(back->tensors.size(), 3u);
  for (const SafeTensor& t : file.tensors) {
    const SafeTensor* u = back->Find(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->dtype, t.dtype);
    EXPECT_EQ(u->shape, t.shape);
    EXPECT_EQ(u->data, t.data);
  }
  // The layout of the format: 8-byte length, JSON padded to 8, then the data.
  StatusOr<std::string> bytes = ReadFile(path);
  ASSERT_TRUE(bytes.ok());
  uint64_t n;
  std::memcpy(&n, bytes->data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ((*bytes)[8], '{');
  EXPECT_EQ(bytes->size(), 8 + n + 4 * 12 + 8 + 4);
}

TEST_F(SafeTensorsTest, TruncatedFileFailsClearly) {
  const std::string path = dir_ + "/a.safetensors";
  ASSERT_TRUE(WriteSafeTensors(path, Sample(4)).ok());
  StatusOr<std::string> bytes = ReadFile(path);
  ASSERT_TRUE(bytes.ok());
  const std::string cut = dir_ + "/cut.safetensors";
  ASSERT_TRUE(WriteFileAtomically(cut, bytes->substr(0, bytes->size() - 5)).ok());
  StatusOr<SafeTensors> r = ReadSafeTensors(cut);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().message().starts_with(cut + ": truncated: tensor '"))
      << r.status().message();
  ASSERT_TRUE(WriteFileAtomically(cut, bytes->substr(0, 20)).ok());
  r = ReadSafeTensors(cut);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().message().starts_with(cut + ": truncated: header of "))
      << r.status().message();
  ASSERT_TRUE(WriteFileAtomically(cut, bytes->substr(0, 3)).ok());
  r = ReadSafeTensors(cut);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), cut + ": truncated: 3 bytes, the header length needs 8");
}

TEST_F(SafeTensorsTest, MalformedHeaderNamesTheTensor) {
  std::string header = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})";
  while (header.size() % 8) header += ' ';
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += header + std::string(16, '\0');
  StatusOr<SafeTensors> r = ParseSafeTensors(bytes, "x.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "x.safetensors: tensor 'w': data_offsets [0, 12] do not hold 4 elements of F32");
  SafeTensors bad;
  bad.tensors.push_back(SafeTensor{"w", "F32", {3}, std::string(8, '\0')});
  EXPECT_EQ(SerializeSafeTensors(bad).status().message(),
            "tensor 'w': 8 bytes for 3 elements of F32");
}

// A write that fails midway (the file size limit stops it) leaves the old
// file in place and no temporary file behind.
TEST_F(SafeTensorsTest, FailedWriteLeavesTheOldFile) {
  const std::string path = dir_ + "/ckpt.safetensors";
  ASSERT_TRUE(WriteSafeTensors(path, Sample(4)).ok());
  StatusOr<std::string> before = ReadFile(path);
  ASSERT_TRUE(before.ok());

  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct sigaction ignore {
  }, old_action{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ignore, &old_action);
  struct rlimit small = old_limit;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  Status s = WriteSafeTensors(path, Sample(100000));  // 1.2 MB
  setrlimit(RLIMIT_FSIZE, &old_limit);
  sigaction(SIGXFSZ, &old_action, nullptr);

  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.message().starts_with(path + ": ")) << s.message();
  StatusOr<std::string> after = ReadFile(path);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, *before);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);

  // Same for a checkpoint that never existed: no file at the final path.
  const std::string fresh = dir_ + "/fresh.safetensors";
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  sigaction(SIGXFSZ, &ignore, &old_action);
  s = WriteSafeTensors(fresh, Sample(100000));
  setrlimit(RLIMIT_FSIZE, &old_limit);
  sigaction(SIGXFSZ, &old_action, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_FALSE(std::filesystem::exists(fresh));
}

}  // namespace
}  // namespace gptc::rt
