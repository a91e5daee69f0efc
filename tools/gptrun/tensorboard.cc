#include "tools/gptrun/tensorboard.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

namespace gptc::tools {

namespace {

// The table of the reflected Castagnoli polynomial.
std::array<uint32_t, 256> Crc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

void PutLittleEndian(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

// A protocol buffer field's key: field number and wire type (0 varint,
// 1 fixed64, 2 length-delimited, 5 fixed32).
void PutKey(std::string& out, int field, int wire_type) {
  PutVarint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}

void PutBytes(std::string& out, int field, std::string_view bytes) {
  PutKey(out, field, 2);
  PutVarint(out, bytes.size());
  out += bytes;
}

void PutDouble(std::string& out, int field, double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  PutKey(out, field, 1);
  PutLittleEndian(out, bits, 8);
}

double WallTime() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t Crc32c(std::string_view bytes) {
  static const std::array<uint32_t, 256> table = Crc32cTable();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

std::string TfRecord(std::string_view data) {
  std::string length;
  PutLittleEndian(length, data.size(), 8);
  std::string out = length;
  PutLittleEndian(out, MaskCrc(Crc32c(length)), 4);
  out += data;
  PutLittleEndian(out, MaskCrc(Crc32c(data)), 4);
  return out;
}

std::string ScalarEvent(double wall_time, int64_t step,
                        const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    PutBytes(v, 1, tag);
    uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    PutKey(v, 2, 5);
    PutLittleEndian(v, bits, 4);
    PutBytes(summary, 1, v);
  }
  std::string event;
  PutDouble(event, 1, wall_time);
  PutKey(event, 2, 0);
  PutVarint(event, static_cast<uint64_t>(step));
  PutBytes(event, 5, summary);
  return event;
}

std::string VersionEvent(double wall_time) {
  std::string event;
  PutDouble(event, 1, wall_time);
  PutBytes(event, 3, "brain.Event:2");
  return event;
}

StatusOr<TensorBoardWriter> TensorBoardWriter::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error("--tensorboard {}: {}", dir, ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const double now = WallTime();
  TensorBoardWriter w;
  w.path_ = (std::filesystem::path(dir) / fmt::format("events.out.tfevents.{}.{}.{}.gptrun",
                                                      static_cast<int64_t>(now), host, getpid()))
                .string();
  w.file_ = std::fopen(w.path_.c_str(), "wb");
  if (w.file_ == nullptr) {
    return Error("--tensorboard {}: cannot create {}: {}", dir, w.path_, std::strerror(errno));
  }
  w.Append(TfRecord(VersionEvent(now)));
  RETURN_IF_ERROR(w.status_);
  return w;
}

TensorBoardWriter::TensorBoardWriter(TensorBoardWriter&& o) noexcept
    : file_(o.file_), path_(std::move(o.path_)), status_(std::move(o.status_)) {
  o.file_ = nullptr;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardWriter::Append(const std::string& record) {
  if (file_ == nullptr || !status_.ok()) return;
  errno = 0;
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    status_ =
        Error("--tensorboard {}: {}", path_, errno != 0 ? std::strerror(errno) : "write error");
  }
}

void TensorBoardWriter::Write(const nlohmann::json& event) {
  const std::string kind = event.value("event", "");
  if (!event.contains("step") || !event["step"].is_number_integer()) return;
  static constexpr std::pair<const char*, const char*> kStep[] = {
      {"loss", "loss"}, {"lr", "lr"}, {"norm", "grad_norm"}, {"tok_s", "tok_s"}, {"mfu", "mfu"}};
  static constexpr std::pair<const char*, const char*> kVal[] = {{"val_loss", "val_loss"}};
  static constexpr std::pair<const char*, const char*> kHellaSwag[] = {
      {"acc", "hellaswag/acc"}, {"acc_norm", "hellaswag/acc_norm"}};
  std::vector<std::pair<std::string, float>> scalars;
  auto add = [&](const auto& keys) {
    for (const auto& [key, tag] : keys) {
      auto it = event.find(key);
      if (it == event.end() || !it->is_number()) continue;
      const double v = it->template get<double>();
      if (std::isfinite(v)) scalars.emplace_back(tag, static_cast<float>(v));
    }
  };
  if (kind == "step") add(kStep);
  if (kind == "val") add(kVal);
  if (kind == "hellaswag") add(kHellaSwag);
  if (scalars.empty()) return;
  Append(TfRecord(ScalarEvent(WallTime(), event["step"].get<int64_t>(), scalars)));
}

}  // namespace gptc::tools
