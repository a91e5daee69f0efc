// gptrun --tensorboard DIR: the run's scalars (loss, val_loss, lr,
// grad_norm, tok_s, mfu) as a TensorBoard event file,
// DIR/events.out.tfevents.SECONDS.HOST.gptrun, for those who watch runs
// there (`tensorboard --logdir DIR`).
//
// Note [event files]: an event file is a sequence of TFRecords (u64 length,
// its masked CRC-32C, the bytes, their masked CRC-32C; little-endian), each
// an `Event` protocol buffer: the first holds file_version "brain.Event:2",
// each other wall_time (field 1, double), step (2, varint) and a Summary (5)
// of Values (1), each a tag (1, string) and a simple_value (2, float).
// Written by hand, a few dozen bytes a step: gptc depends on no protobuf.
#ifndef GPTC_TOOLS_GPTRUN_TENSORBOARD_H_
#define GPTC_TOOLS_GPTRUN_TENSORBOARD_H_

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/support/status.h"

namespace gptc::tools {

// CRC-32C (Castagnoli) of `bytes`, and TFRecord's mask of a CRC.
uint32_t Crc32c(std::string_view bytes);
uint32_t MaskCrc(uint32_t crc);

// One TFRecord holding `data`.
std::string TfRecord(std::string_view data);

// The Event of `scalars` (tag, value) at `step`, serialized.
std::string ScalarEvent(double wall_time, int64_t step,
                        const std::vector<std::pair<std::string, float>>& scalars);
// The first Event of a file: its version.
std::string VersionEvent(double wall_time);

class TensorBoardWriter {
 public:
  // Creates DIR (and its parents) and a new event file in it; errors name
  // --tensorboard.
  static StatusOr<TensorBoardWriter> Open(const std::string& dir);
  TensorBoardWriter(TensorBoardWriter&& o) noexcept;
  TensorBoardWriter& operator=(TensorBoardWriter&&) = delete;
  ~TensorBoardWriter();

  // The scalars of one gptrun --log event (step: loss, lr, grad_norm,
  // tok_s, mfu; val: val_loss; hellaswag: hellaswag/acc and
  // hellaswag/acc_norm; others none), flushed, so that TensorBoard
  // sees each step as it ends. Non-finite values are left out.
  void Write(const nlohmann::json& event);
  // The first write that failed, if any.
  const Status& status() const { return status_; }
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter() = default;
  void Append(const std::string& record);

  std::FILE* file_ = nullptr;
  std::string path_;
  Status status_;
};

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_TENSORBOARD_H_
