// Internal to the evaluator: how values are held while a computation runs, and
// the kernels that compute each opcode. Not part of the public API.
//
// Note [storage]: in kF32 mode every float-typed array (f32, bf16, f16) lives
// in a float buffer, so GEMMs go straight to sgemm and elementwise loops run
// at f32 width with half the memory traffic of double. Everything else (s32,
// u16, pred, and every array in kF64 mode) lives in a double buffer, where all
// our integer values are exact. So the storage of a value is a function of
// its dtype and the precision mode, and every kernel below is a template over
// the storage type T in {float, double}.
//
// Note [value sharing]: values are immutable once built and held by
// shared_ptr; reshape, copy, get-tuple-element and tuple share their
// operand's buffer instead of copying it.
#ifndef GPTC_COMPILER_EVAL_VALUE_H_
#define GPTC_COMPILER_EVAL_VALUE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compiler/eval/evaluator.h"
#include "compiler/eval/literal.h"
#include "compiler/ir/instruction.h"
#include "compiler/support/status.h"

namespace gptc::eval::internal {

struct Value;
using ValuePtr = std::shared_ptr<const Value>;

// An array (a float or double buffer, see Note [storage]) or a tuple.
struct Value {
  ir::Shape shape;
  int64_t size = 0;            // arrays: element count
  bool float_storage = false;  // arrays: `data` holds float, else double
  std::shared_ptr<void> data;
  std::vector<ValuePtr> elements;  // tuples

  template <typename T>
  const T* get() const {
    return static_cast<const T*>(data.get());
  }
  template <typename T>
  T* mutable_get() {
    return static_cast<T*>(data.get());
  }
};

// Note [buffer pool]: big buffers come from mmap, and first-touching fresh
// pages costs more than the elementwise op that fills them (about 4x on our
// VMs). Buffers of dropped values are therefore kept here, keyed by byte
// size, and handed to the next value of the same size; a transformer step
// reuses the same few sizes over and over. The pool lives for one top-level
// evaluation (or a caller's Workspace, Note [evaluation workspace]) and
// holds at most kMaxPooledBytes (1 GiB). Nor does it let the buffers it
// holds and those handed out together exceed twice the most ever handed out
// at once: a new buffer first evicts kept ones (the largest first), so the
// resident memory stays near that of the largest live set while the sizes
// that recur still find their buffers.
class BufferPool {
 public:
  BufferPool() = default;
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  ~BufferPool();

  // An uninitialized buffer of `bytes`, returned to `pool` (if still alive)
  // when the last reference drops.
  static std::shared_ptr<void> Allocate(const std::shared_ptr<BufferPool>& pool, size_t bytes);

  size_t pooled_bytes() const { return pooled_bytes_; }
  size_t live_bytes() const { return live_bytes_; }
  size_t high_water() const { return high_water_; }

 private:
  static constexpr size_t kMinPooledBytes = size_t{1} << 16;
  static constexpr size_t kMaxPooledBytes = size_t{1} << 30;
  void Release(void* buffer, size_t bytes);
  // Unmaps kept buffers, the largest first, until a new buffer of `bytes`
  // fits under the high-water mark.
  void EvictFor(size_t bytes);

  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t pooled_bytes_ = 0;
  size_t live_bytes_ = 0;  // pooled sizes handed out and not yet back
  size_t high_water_ = 0;  // the most live_bytes_ has been
};

// Options plus what follows from them.
struct Context {
  EvalOptions options;
  std::shared_ptr<BufferPool> pool =
      options.workspace != nullptr ? options.workspace->pool() : std::make_shared<BufferPool>();

  // See Note [storage].
  bool FloatStorage(ir::DType dtype) const {
    return options.precision == Precision::kF32 && ir::IsFloat(dtype);
  }
};

// Calls f(T{}) with T the storage type (float or double).
template <typename F>
decltype(auto) WithStorage(bool float_storage, F&& f) {
  if (float_storage) return f(float{});
  return f(double{});
}

// A fresh uninitialized array of `shape`, stored as `ctx` says.
std::shared_ptr<Value> NewArray(const Context& ctx, const ir::Shape& shape);
// An array of `shape` sharing `source`'s buffer (same storage, same size).
std::shared_ptr<Value> ShareArray(const ir::Shape& shape, const Value& source);

// Rounds a freshly computed bf16/f16 array to its format (with round_16bit).
void RoundToDType(const Context& ctx, Value& value);

StatusOr<ValuePtr> FromLiteral(const Context& ctx, const Literal& literal);
// With a workspace, arrays are built in its recycled storage.
Literal ToLiteral(const Value& value, Workspace* workspace = nullptr);

// Kernels: `inst` supplies the attributes and result shape. Those that can
// fail return an error without the instruction name; the caller adds it.

// layout.cc
std::shared_ptr<Value> EvalConstant(const Context& ctx, const ir::Instruction& inst);
std::shared_ptr<Value> EvalIota(const Context& ctx, const ir::Instruction& inst);
std::shared_ptr<Value> EvalBroadcast(const Context& ctx, const ir::Instruction& inst,
                                     const Value& x);
std::shared_ptr<Value> EvalTranspose(const Context& ctx, const ir::Instruction& inst,
                                     const Value& x);
std::shared_ptr<Value> EvalSlice(const Context& ctx, const ir::Instruction& inst, const Value& x);
std::shared_ptr<Value> EvalPad(const Context& ctx, const ir::Instruction& inst, const Value& x,
                               const Value& padding);
std::shared_ptr<Value> EvalConcatenate(const Context& ctx, const ir::Instruction& inst,
                                       std::span<const Value* const> xs);
// Permutes `x` so that result dim i is x's dim permutation[i] (a transpose
// with an explicit result shape); the dot uses it to lay operands out.
std::shared_ptr<Value> Permute(const Context& ctx, const Value& x,
                               std::span<const int64_t> permutation);

// elementwise.cc
std::shared_ptr<Value> EvalUnary(const Context& ctx, const ir::Instruction& inst, const Value& x);
std::shared_ptr<Value> EvalBinary(const Context& ctx, const ir::Instruction& inst, const Value& a,
                                  const Value& b);
std::shared_ptr<Value> EvalCompare(const Context& ctx, const ir::Instruction& inst, const Value& a,
                                   const Value& b);
std::shared_ptr<Value> EvalSelect(const Context& ctx, const ir::Instruction& inst,
                                  const Value& pred, const Value& on_true, const Value& on_false);
std::shared_ptr<Value> EvalConvert(const Context& ctx, const ir::Instruction& inst, const Value& x);
StatusOr<std::shared_ptr<Value>> EvalAllReduce(const Context& ctx, const ir::Instruction& inst,
                                               const Value& x);

// collectives.cc (Note [collectives] in evaluator.h)
StatusOr<std::shared_ptr<Value>> EvalReduceScatter(const Context& ctx, const ir::Instruction& inst,
                                                   const Value& x);
StatusOr<std::shared_ptr<Value>> EvalAllGather(const Context& ctx, const ir::Instruction& inst,
                                               const Value& x);

// reduce.cc
std::shared_ptr<Value> EvalReduce(const Context& ctx, const ir::Instruction& inst, const Value& x);
StatusOr<std::shared_ptr<Value>> EvalGather(const Context& ctx, const ir::Instruction& inst,
                                            const Value& table, const Value& indices);
StatusOr<std::shared_ptr<Value>> EvalScatterAdd(const Context& ctx, const ir::Instruction& inst,
                                                const Value& operand, const Value& indices,
                                                const Value& updates);

// dot.cc
StatusOr<std::shared_ptr<Value>> EvalDot(const Context& ctx, const ir::Instruction& inst,
                                         const Value& lhs, const Value& rhs);

}  // namespace gptc::eval::internal

#endif  // GPTC_COMPILER_EVAL_VALUE_H_
