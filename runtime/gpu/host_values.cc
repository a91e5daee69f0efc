#include "runtime/gpu/host_values.h"

#include <cstdint>
#include <cstring>

#include "compiler/support/float_bits.h"

namespace gptc::rt::gpu {

namespace {

template <typename T>
void Put(std::string& out, size_t i, T v) {
  std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
}

template <typename T>
T Take(std::string_view bytes, size_t i) {
  T v;
  std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}

}  // namespace

std::string EncodeValues(ir::DType dtype, std::span<const double> values) {
  std::string out(values.size() * static_cast<size_t>(ir::DTypeBytes(dtype)), '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    switch (dtype) {
      case ir::DType::kPred:
        Put<uint8_t>(out, i, v != 0 ? 1 : 0);
        break;
      case ir::DType::kS32:
        Put<int32_t>(out, i, static_cast<int32_t>(v));
        break;
      case ir::DType::kU16:
        Put<uint16_t>(out, i, static_cast<uint16_t>(v));
        break;
      case ir::DType::kF32:
        Put<float>(out, i, static_cast<float>(v));
        break;
      case ir::DType::kBF16:
        Put<uint16_t>(out, i, F32ToBF16Bits(static_cast<float>(v)));
        break;
      case ir::DType::kF16:
        Put<uint16_t>(out, i, F32ToF16Bits(static_cast<float>(v)));
        break;
    }
  }
  return out;
}

std::vector<double> DecodeValues(ir::DType dtype, std::string_view bytes) {
  const size_t n = bytes.size() / static_cast<size_t>(ir::DTypeBytes(dtype));
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case ir::DType::kPred:
        out[i] = Take<uint8_t>(bytes, i) != 0 ? 1 : 0;
        break;
      case ir::DType::kS32:
        out[i] = Take<int32_t>(bytes, i);
        break;
      case ir::DType::kU16:
        out[i] = Take<uint16_t>(bytes, i);
        break;
      case ir::DType::kF32:
        out[i] = Take<float>(bytes, i);
        break;
      case ir::DType::kBF16:
        out[i] = BF16BitsToF32(Take<uint16_t>(bytes, i));
        break;
      case ir::DType::kF16:
        out[i] = F16BitsToF32(Take<uint16_t>(bytes, i));
        break;
    }
  }
  return out;
}

}  // namespace gptc::rt::gpu
