// gptrun --tensorboard's event files (tools/gptrun/tensorboard.h): CRC-32C
// against its published check value, the TFRecord framing, and the Event
// protocol buffers decoded field by field by a reader written here from the
// wire format, on bytes and on the file a gptrun run writes.
#include "tools/gptrun/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/testing/command.h"

namespace gptc::tools {
namespace {

namespace fs = std::filesystem;

uint64_t Fixed(std::string_view b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(b[at + i])) << (8 * i);
  return v;
}

uint64_t Varint(std::string_view b, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const uint8_t c = static_cast<uint8_t>(b.at(at++));
    v |= static_cast<uint64_t>(c & 0x7F) << shift;
    if ((c & 0x80) == 0) return v;
  }
}

// One field of a protocol buffer: its number, wire type and value (the
// bytes of a length-delimited one, the bits of the others).
struct Field {
  int number = 0, wire = 0;
  uint64_t bits = 0;
  std::string bytes;
};

std::vector<Field> Fields(std::string_view b) {
  std::vector<Field> fields;
  size_t at = 0;
  while (at < b.size()) {
    const uint64_t key = Varint(b, at);
    Field f{.number = static_cast<int>(key >> 3), .wire = static_cast<int>(key & 7)};
    if (f.wire == 0) {
      f.bits = Varint(b, at);
    } else if (f.wire == 1 || f.wire == 5) {
      const int n = f.wire == 1 ? 8 : 4;
      f.bits = Fixed(b, at, n);
      at += n;
    } else if (f.wire == 2) {
      const uint64_t n = Varint(b, at);
      f.bytes = std::string(b.substr(at, n));
      at += n;
    } else {
      ADD_FAILURE() << "wire type " << f.wire;
      return fields;
    }
    fields.push_back(f);
  }
  return fields;
}

// The records of an event file, their CRCs checked.
std::vector<std::string> Records(std::string_view file) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at + 12 <= file.size()) {
    const uint64_t n = Fixed(file, at, 8);
    EXPECT_EQ(Fixed(file, at + 8, 4), MaskCrc(Crc32c(file.substr(at, 8))));
    const std::string_view data = file.substr(at + 12, n);
    EXPECT_EQ(Fixed(file, at + 12 + n, 4), MaskCrc(Crc32c(data)));
    records.emplace_back(data);
    at += 16 + n;
  }
  EXPECT_EQ(at, file.size());
  return records;
}

// The scalars of a scalar Event, by tag.
std::map<std::string, float> Scalars(const std::string& event, int64_t* step) {
  std::map<std::string, float> out;
  for (const Field& f : Fields(event)) {
    if (f.number == 2) *step = static_cast<int64_t>(f.bits);
    if (f.number != 5) continue;
    for (const Field& value : Fields(f.bytes)) {
      std::string tag;
      float v = 0;
      for (const Field& g : Fields(value.bytes)) {
        if (g.number == 1) tag = g.bytes;
        if (g.number == 2 && g.wire == 5) {
          const uint32_t bits = static_cast<uint32_t>(g.bits);
          std::memcpy(&v, &bits, sizeof v);
        }
      }
      out[tag] = v;
    }
  }
  return out;
}

TEST(TensorBoardTest, Crc32cCheckValue) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);  // the Castagnoli check value
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(MaskCrc(0), 0xA282EAD8u);
}

TEST(TensorBoardTest, ScalarEventDecodes) {
  const std::string event = ScalarEvent(1700000000.5, 42, {{"loss", 3.25f}, {"lr", 6e-4f}});
  const std::vector<Field> fields = Fields(event);
  ASSERT_EQ(fields.size(), 3u);
  EXPECT_EQ(fields[0].number, 1);
  EXPECT_EQ(fields[0].wire, 1);
  double wall = 0;
  std::memcpy(&wall, &fields[0].bits, sizeof wall);
  EXPECT_EQ(wall, 1700000000.5);
  int64_t step = 0;
  const std::map<std::string, float> scalars = Scalars(event, &step);
  EXPECT_EQ(step, 42);
  EXPECT_EQ(scalars, (std::map<std::string, float>{{"loss", 3.25f}, {"lr", 6e-4f}}));
  const std::vector<Field> version = Fields(VersionEvent(1.0));
  ASSERT_EQ(version.size(), 2u);
  EXPECT_EQ(version[1].number, 3);
  EXPECT_EQ(version[1].bytes, "brain.Event:2");
}

// A hellaswag event's accuracies under their own tags; its counts and
// intervals, and events of no scalar, are not written.
TEST(TensorBoardTest, HellaSwagEventsWriteBothAccuracies) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("tensorboard_hs_test_" + std::to_string(getpid()));
  fs::remove_all(dir);
  StatusOr<TensorBoardWriter> tb = TensorBoardWriter::Open(dir.string());
  ASSERT_TRUE(tb.ok()) << tb.status().message();
  tb->Write({{"event", "hellaswag"}, {"step", 250}, {"acc", 0.25}, {"acc_norm", 0.5},
             {"examples", 48}, {"acc_interval", {0.1, 0.4}}});
  tb->Write({{"event", "sample"}, {"step", 250}, {"text", "hello"}});
  ASSERT_TRUE(tb->status().ok()) << tb->status().message();
  const std::vector<std::string> records = Records(testing::ReadAll(tb->path()));
  ASSERT_EQ(records.size(), 2u);  // the version, then the accuracies
  int64_t step = 0;
  EXPECT_EQ(Scalars(records[1], &step),
            (std::map<std::string, float>{{"hellaswag/acc", 0.25f}, {"hellaswag/acc_norm", 0.5f}}));
  EXPECT_EQ(step, 250);
  fs::remove_all(dir);
}

TEST(TensorBoardTest, GptrunWritesOneEventPerStep) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("tensorboard_test_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  testing::CommandResult r = testing::RunCommand(
      std::string(GPTRUN_BIN) +
          " --model gpt2-tiny --batch 2 --seq 32 --device cpu --bench --steps 3 --tensorboard " +
          (dir / "tb").string(),
      dir);
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir / "tb")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_TRUE(files[0].filename().string().starts_with("events.out.tfevents."));
  const std::vector<std::string> records = Records(testing::ReadAll(files[0]));
  ASSERT_EQ(records.size(), 4u);  // the version, then a step each
  for (int i = 1; i <= 3; ++i) {
    int64_t step = 0;
    const std::map<std::string, float> s = Scalars(records[i], &step);
    EXPECT_EQ(step, i);
    EXPECT_TRUE(s.contains("loss") && s.contains("lr") && s.contains("grad_norm") &&
                s.contains("tok_s"))
        << records[i];
    EXPECT_GT(s.at("loss"), 5.0f);  // ln(50257) = 10.8 at the start
  }
  r = testing::RunCommand(std::string(GPTRUN_BIN) +
                              " --model gpt2-tiny --batch 2 --seq 32 --device cpu --bench "
                              "--steps 1 --tensorboard /proc/gptc-no-such-dir",
                          dir);
  EXPECT_EQ(r.code, 2);  // refused before the run
  EXPECT_NE(r.err.find("--tensorboard: /proc/gptc-no-such-dir"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gptc::tools
