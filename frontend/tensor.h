// Tensor: a handle to one traced IR value, with NumPy-like operations.
//
// Operations append instructions to the tracer's current computation. Binary
// operations broadcast as NumPy does (trailing dimensions aligned, size-1
// dimensions stretched); the IR has no implicit broadcasting, so the frontend
// emits the reshape/broadcast instructions. Axes may be negative (from the end).
//
// A Tensor whose instruction is null is invalid: the op that produced it
// failed and the tracer holds the error (see tracer.h). Ops on invalid
// tensors return invalid tensors without building anything.
#ifndef GPTC_FRONTEND_TENSOR_H_
#define GPTC_FRONTEND_TENSOR_H_

#include <cstdint>
#include <vector>

#include "compiler/ir/instruction.h"

namespace gptc::frontend {

class Tracer;

class Tensor {
 public:
  Tensor() = default;
  Tensor(Tracer* tracer, ir::Instruction* instruction)
      : tracer_(tracer), instruction_(instruction) {}

  bool valid() const { return instruction_ != nullptr; }
  Tracer* tracer() const { return tracer_; }
  ir::Instruction* instruction() const { return instruction_; }
  // The shape of the value (f32[] for an invalid tensor).
  const ir::Shape& shape() const;
  ir::DType dtype() const { return shape().dtype(); }
  int64_t rank() const { return shape().rank(); }
  const std::vector<int64_t>& dims() const { return shape().dims(); }
  // Negative axes count from the end; 0 for an invalid tensor.
  int64_t dim(int64_t axis) const;

  // `dims` may hold one -1, inferred from the element count.
  Tensor Reshape(std::vector<int64_t> dims) const;
  // Inserts a size-1 axis at `axis` (-1: at the end), as numpy.expand_dims.
  Tensor ExpandDims(int64_t axis) const;
  // Result dim i is operand dim permutation[i].
  Tensor Transpose(std::vector<int64_t> permutation) const;
  // Elements [start, limit) of `axis`, all of the other axes.
  Tensor Slice(int64_t axis, int64_t start, int64_t limit) const;
  // NumPy broadcast to `dims`.
  Tensor BroadcastTo(const std::vector<int64_t>& dims) const;
  Tensor Convert(ir::DType dtype) const;

  // Reductions over `axes`; with keep_dims the reduced axes stay with size 1.
  Tensor Sum(std::vector<int64_t> axes, bool keep_dims = false) const;
  Tensor Max(std::vector<int64_t> axes, bool keep_dims = false) const;
  Tensor Mean(std::vector<int64_t> axes, bool keep_dims = false) const;

 private:
  Tracer* tracer_ = nullptr;
  ir::Instruction* instruction_ = nullptr;
};

// Elementwise arithmetic with NumPy broadcasting; scalars take the tensor's dtype.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor Maximum(const Tensor& a, const Tensor& b);
Tensor Minimum(const Tensor& a, const Tensor& b);

Tensor Exp(const Tensor& x);
Tensor Log(const Tensor& x);
Tensor Tanh(const Tensor& x);
Tensor Sqrt(const Tensor& x);
Tensor Rsqrt(const Tensor& x);

// A pred tensor of `a <direction> b`, broadcast.
Tensor Compare(const Tensor& a, const Tensor& b, ir::CompareDirection direction);
// Elementwise `pred ? on_true : on_false`, all three broadcast.
Tensor Where(const Tensor& pred, const Tensor& on_true, const Tensor& on_false);
Tensor Where(const Tensor& pred, const Tensor& on_true, double on_false);

// a @ b over the last two dimensions (a [..., M, K], b [..., K, N]); leading
// dimensions broadcast. A rank-2 b is contracted without batching:
// [B, T, K] @ [K, N] is one dot producing [B, T, N].
Tensor Matmul(const Tensor& a, const Tensor& b);
// a @ swap_last_two(b) without a transpose: b is [..., N, K].
Tensor MatmulTransposeB(const Tensor& a, const Tensor& b);

// numpy.take(table, indices, axis): rows of an embedding table, for instance.
Tensor Take(const Tensor& table, const Tensor& indices, int64_t axis);

// Values built from nothing, in the tracer's current computation.
Tensor Scalar(Tracer& tracer, double value, ir::DType dtype = ir::DType::kF32);
Tensor Iota(Tracer& tracer, ir::DType dtype, std::vector<int64_t> dims, int64_t axis);

}  // namespace gptc::frontend

#endif  // GPTC_FRONTEND_TENSOR_H_
