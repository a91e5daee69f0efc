// Element types and static shapes of IR values.
//
// Every IR value has a Shape: an array `f32[16,1024,768]` (a dtype and static
// dimensions; `f32[]` is a scalar) or a tuple `(f32[], bf16[4,4])`.
#ifndef GPTC_COMPILER_IR_SHAPE_H_
#define GPTC_COMPILER_IR_SHAPE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gptc::ir {

enum class DType : uint8_t { kPred, kS32, kU16, kF32, kBF16, kF16 };

std::string_view DTypeName(DType dtype);  // "f32", "bf16", ...
std::optional<DType> ParseDType(std::string_view name);
int64_t DTypeBytes(DType dtype);
bool IsFloat(DType dtype);    // f32, bf16, f16
bool IsInteger(DType dtype);  // s32, u16

class Shape {
 public:
  Shape() = default;  // f32[] scalar
  Shape(DType dtype, std::vector<int64_t> dims) : dims_(std::move(dims)), dtype_(dtype) {}
  static Shape Scalar(DType dtype) { return Shape(dtype, {}); }
  static Shape Tuple(std::vector<Shape> elements);

  bool is_tuple() const { return is_tuple_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t dim(int64_t i) const { return dims_[i]; }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  bool is_scalar() const { return !is_tuple_ && dims_.empty(); }
  const std::vector<Shape>& tuple_elements() const { return elements_; }

  // Number of elements of an array shape (1 for scalars).
  int64_t num_elements() const;
  int64_t byte_size() const;  // tuples: sum of elements

  // Row-major strides in elements.
  std::vector<int64_t> Strides() const;

  Shape WithDType(DType dtype) const { return Shape(dtype, dims_); }
  std::string ToString() const;  // "f32[2,3]", "(f32[], s32[4])"

  bool operator==(const Shape& other) const = default;

 private:
  // The small fields last: 56 bytes, not 64 with padding after each.
  std::vector<int64_t> dims_;
  std::vector<Shape> elements_;
  DType dtype_ = DType::kF32;
  bool is_tuple_ = false;
};

std::string DimsToString(std::span<const int64_t> dims);  // "{0,2}"

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_SHAPE_H_
