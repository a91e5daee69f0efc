// Token shards and the data loader: batches, determinism, resume, header errors.
#include "runtime/data_loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <set>

#include "compiler/support/file.h"

namespace gptc::rt {
namespace {

class DataLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gptc_data_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes shard `name` holding base, base+1, ..., base+n-1.
  std::string Shard(const std::string& name, int32_t base, int64_t n) {
    std::vector<int32_t> tokens(n);
    for (int64_t i = 0; i < n; ++i) tokens[i] = base + static_cast<int32_t>(i);
    const std::string path = dir_ + "/" + name;
    EXPECT_TRUE(WriteFileAtomically(path, EncodeShard(tokens)).ok());
    return path;
  }

  DataLoader Open(DataLoader::Options o) {
    o.pattern = dir_ + "/train_*.bin";
    StatusOr<DataLoader> loader = DataLoader::Open(o);
    EXPECT_TRUE(loader.ok()) << loader.status().message();
    return std::move(*loader);
  }

  std::string dir_;
};

TEST_F(DataLoaderTest, TargetsAreTheNextTokens) {
  Shard("train_000.bin", 0, 101);
  DataLoader loader = Open({.batch = 2, .seq = 8, .shuffle = false});
  EXPECT_EQ(loader.sequences_in_shard(0), 12);  // (101 - 1) / 8
  StatusOr<MicroBatch> mb = loader.Next();
  ASSERT_TRUE(mb.ok()) << mb.status().message();
  ASSERT_EQ(mb->tokens.size(), 16u);
  for (int t = 0; t < 16; ++t) {
    EXPECT_EQ(mb->tokens[t], t);  // unshuffled: sequences 0 and 1 back to back
    EXPECT_EQ(mb->targets[t], t + 1);
  }
}

TEST_F(DataLoaderTest, EpochCoversEverySequenceOnce) {
  Shard("train_000.bin", 0, 65);     // 8 sequences of 8+1
  Shard("train_001.bin", 1000, 41);  // 5 sequences: 4 used with B=2, one skipped
  DataLoader loader = Open({.batch = 2, .seq = 8, .seed = 7});
  std::multiset<int32_t> starts;
  for (int i = 0; i < 6; ++i) {
    StatusOr<MicroBatch> mb = loader.Next();
    ASSERT_TRUE(mb.ok());
    for (int b = 0; b < 2; ++b) starts.insert(mb->tokens[b * 8]);
  }
  EXPECT_EQ(starts.size(), 12u);
  EXPECT_EQ(std::set<int32_t>(starts.begin(), starts.end()).size(), 12u);
  EXPECT_EQ(loader.state().epoch, 0);
  ASSERT_TRUE(loader.Next().ok());
  EXPECT_EQ(loader.state().epoch, 1);
}

TEST_F(DataLoaderTest, SeedDeterminesTheOrder) {
  Shard("train_000.bin", 0, 801);
  Shard("train_001.bin", 2000, 801);
  auto first_batches = [&](uint64_t seed) {
    DataLoader loader = Open({.batch = 4, .seq = 8, .seed = seed});
    std::vector<int32_t> all;
    for (int i = 0; i < 10; ++i) {
      StatusOr<MicroBatch> mb = loader.Next();
      EXPECT_TRUE(mb.ok());
      all.insert(all.end(), mb->tokens.begin(), mb->tokens.end());
    }
    return all;
  };
  EXPECT_EQ(first_batches(1), first_batches(1));
  EXPECT_NE(first_batches(1), first_batches(2));
}

TEST_F(DataLoaderTest, ResumeGivesTheSameNextBatches) {
  Shard("train_000.bin", 0, 161);
  Shard("train_001.bin", 5000, 97);
  DataLoader a = Open({.batch = 3, .seq = 8, .seed = 3});
  std::vector<DataLoader::State> states;
  std::vector<std::vector<int32_t>> batches;
  for (int i = 0; i < 25; ++i) {  // several epochs
    states.push_back(a.state());
    StatusOr<MicroBatch> mb = a.Next();
    ASSERT_TRUE(mb.ok());
    batches.push_back(mb->tokens);
  }
  for (int i : {0, 4, 7, 13, 24}) {
    DataLoader b = Open({.batch = 3, .seq = 8, .seed = 3});
    ASSERT_TRUE(b.Restore(states[i]).ok());
    for (int j = i; j < 25; ++j) {
      StatusOr<MicroBatch> mb = b.Next();
      ASSERT_TRUE(mb.ok());
      EXPECT_EQ(mb->tokens, batches[j]) << "resumed at " << i << ", batch " << j;
    }
  }
}

TEST_F(DataLoaderTest, RanksTakeDisjointSequences) {
  Shard("train_000.bin", 0, 257);
  DataLoader r0 = Open({.batch = 2, .seq = 8, .seed = 5, .rank = 0, .world = 2});
  DataLoader r1 = Open({.batch = 2, .seq = 8, .seed = 5, .rank = 1, .world = 2});
  std::set<int32_t> seen;
  for (int i = 0; i < 8; ++i) {
    for (DataLoader* l : {&r0, &r1}) {
      StatusOr<MicroBatch> mb = l->Next();
      ASSERT_TRUE(mb.ok());
      for (int b = 0; b < 2; ++b) EXPECT_TRUE(seen.insert(mb->tokens[b * 8]).second);
    }
  }
  EXPECT_EQ(seen.size(), 32u);
}

TEST_F(DataLoaderTest, HeaderErrorsNameFileAndOffset) {
  const std::string good = Shard("train_000.bin", 0, 100);
  StatusOr<std::string> bytes = ReadFile(good);
  ASSERT_TRUE(bytes.ok());
  auto open_with = [&](const std::string& contents) {
    EXPECT_TRUE(WriteFileAtomically(good, contents).ok());
    StatusOr<DataLoader> loader =
        DataLoader::Open({.pattern = dir_ + "/train_*.bin", .batch = 1, .seq = 8});
    if (loader.ok()) {
      StatusOr<MicroBatch> mb = loader->Next();
      return mb.ok() ? std::string("ok") : mb.status().message();
    }
    return loader.status().message();
  };
  std::string bad_magic = *bytes;
  bad_magic[0] = 1;
  EXPECT_EQ(open_with(bad_magic),
            good + ": offset 0: bad magic 20240385, expected 20240520 (not a token shard)");
  std::string bad_version = *bytes;
  bad_version[4] = 7;
  EXPECT_EQ(open_with(bad_version), good + ": offset 4: unsupported version 7, expected 1");
  EXPECT_EQ(open_with(bytes->substr(0, 100)),
            good + ": short file: 100 bytes, the shard header needs 1024");
  EXPECT_EQ(
      open_with(bytes->substr(0, bytes->size() - 2)),
      good + ": offset 8: header says 100 tokens (200 bytes) but 198 bytes follow the header");
  std::string bad_token = *bytes;
  const uint16_t big = 60000;
  std::memcpy(bad_token.data() + 1024 + 2 * 5, &big, 2);
  EXPECT_EQ(open_with(bad_token),
            good + ": offset 1034: token 5 is id 60000, not below the vocabulary size 50257");
  EXPECT_EQ(open_with(*bytes), "ok");

  StatusOr<DataLoader> none = DataLoader::Open({.pattern = dir_ + "/nothing_*.bin"});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), dir_ + "/nothing_*.bin: no shard matches");
  StatusOr<DataLoader> small =
      DataLoader::Open({.pattern = dir_ + "/train_*.bin", .batch = 64, .seq = 8});
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().message(),
            dir_ + "/train_*.bin: no shard holds one step of 64 sequences of 8+1 tokens");
}

// Open scans every shard's ids: a bad id in a shard
// training would reach only much later is refused before the first batch,
// naming the shard, the token's index and its id, also past the first chunk
// of the scan.
TEST_F(DataLoaderTest, TokenBeyondTheVocabularyInAnyShardFailsAtOpen) {
  Shard("train_000.bin", 0, 200);              // ids 0..199
  const int64_t n = (int64_t{1} << 21) + 100;  // a little more than one 4 MiB chunk
  std::vector<int32_t> tokens(n, 7);
  const int64_t at = (int64_t{1} << 21) + 5;
  tokens[at] = 300;
  const std::string bad = dir_ + "/train_001.bin";
  ASSERT_TRUE(WriteFileAtomically(bad, EncodeShard(tokens)).ok());
  StatusOr<DataLoader> loader = DataLoader::Open(
      {.pattern = dir_ + "/train_*.bin", .batch = 1, .seq = 8, .shuffle = false, .vocab = 300});
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().message(),
            fmt::format("{}: offset {}: token {} is id 300, not below the vocabulary size 300", bad,
                        1024 + 2 * at, at));
  // One id less is fine.
  tokens[at] = 299;
  ASSERT_TRUE(WriteFileAtomically(bad, EncodeShard(tokens)).ok());
  EXPECT_TRUE(
      DataLoader::Open(
          {.pattern = dir_ + "/train_*.bin", .batch = 1, .seq = 8, .shuffle = false, .vocab = 300})
          .ok());
}

}  // namespace
}  // namespace gptc::rt
