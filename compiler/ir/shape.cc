#include "compiler/ir/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace gptc::ir {

namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int64_t bytes;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kPred, "pred", 1}, {DType::kS32, "s32", 4},   {DType::kU16, "u16", 2},
    {DType::kF32, "f32", 4},   {DType::kBF16, "bf16", 2}, {DType::kF16, "f16", 2},
};
}  // namespace

std::string_view DTypeName(DType dtype) { return kDTypes[static_cast<int>(dtype)].name; }

std::optional<DType> ParseDType(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

int64_t DTypeBytes(DType dtype) { return kDTypes[static_cast<int>(dtype)].bytes; }

bool IsFloat(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
}
bool IsInteger(DType dtype) { return dtype == DType::kS32 || dtype == DType::kU16; }

Shape Shape::Tuple(std::vector<Shape> elements) {
  Shape shape;
  shape.is_tuple_ = true;
  shape.elements_ = std::move(elements);
  return shape;
}

int64_t Shape::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

int64_t Shape::byte_size() const {
  if (!is_tuple_) return num_elements() * DTypeBytes(dtype_);
  int64_t total = 0;
  for (const Shape& e : elements_) total += e.byte_size();
  return total;
}

std::vector<int64_t> Shape::Strides() const {
  std::vector<int64_t> strides(dims_.size(), 1);
  for (int64_t i = rank() - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims_[i + 1];
  return strides;
}

std::string Shape::ToString() const {
  if (!is_tuple_) return fmt::format("{}[{}]", DTypeName(dtype_), fmt::join(dims_, ","));
  std::vector<std::string> parts;
  for (const Shape& e : elements_) parts.push_back(e.ToString());
  return fmt::format("({})", fmt::join(parts, ", "));
}

std::string DimsToString(std::span<const int64_t> dims) {
  return fmt::format("{{{}}}", fmt::join(dims, ","));
}

}  // namespace gptc::ir
