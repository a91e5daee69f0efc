// Elementwise opcodes: unary and binary math, compare, select, convert, all-reduce.
//
// Float math runs in the storage type (see Note [storage] in value.h): in kF32
// mode add/sub/mul/div/sqrt in float are the correctly rounded f32 results,
// and transcendentals are libm's f32 versions (within an ulp or two). Integer
// math goes through int64 and wraps to the dtype, as two's-complement
// hardware does.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "compiler/eval/value.h"

namespace gptc::eval::internal {

namespace {

using ir::DType;
using ir::Opcode;

// Wraps an integer result to s32 or u16 (modular, as the GPU computes it).
inline double WrapInt(int64_t v, DType dtype) {
  if (dtype == DType::kU16) return static_cast<uint16_t>(v);
  return static_cast<int32_t>(static_cast<uint32_t>(v));
}

template <typename T, typename F>
void Map1(const Value& x, Value& out, F f) {
  const T* in = x.get<T>();
  T* o = out.mutable_get<T>();
  for (int64_t i = 0; i < out.size; ++i) o[i] = f(in[i]);
}

template <typename T, typename U, typename F>
void Map2(const Value& a, const Value& b, Value& out, F f) {
  const T* x = a.get<T>();
  const T* y = b.get<T>();
  U* o = out.mutable_get<U>();
  for (int64_t i = 0; i < out.size; ++i) o[i] = f(x[i], y[i]);
}

// NaN-propagating max and min (XLA semantics; std::max would drop a NaN lhs).
template <typename T>
inline T Max(T a, T b) {
  return (a > b || a != a) ? a : b;
}
template <typename T>
inline T Min(T a, T b) {
  return (a < b || a != a) ? a : b;
}

template <typename T>
void FloatUnary(Opcode opcode, const Value& x, Value& out) {
  switch (opcode) {
    case Opcode::kNeg:
      return Map1<T>(x, out, [](T v) { return -v; });
    case Opcode::kExp:
      return Map1<T>(x, out, [](T v) { return std::exp(v); });
    case Opcode::kLog:
      return Map1<T>(x, out, [](T v) { return std::log(v); });
    case Opcode::kTanh:
      return Map1<T>(x, out, [](T v) { return std::tanh(v); });
    case Opcode::kSqrt:
      return Map1<T>(x, out, [](T v) { return std::sqrt(v); });
    case Opcode::kRsqrt:
      return Map1<T>(x, out, [](T v) { return T(1) / std::sqrt(v); });
    case Opcode::kErf:
      return Map1<T>(x, out, [](T v) { return std::erf(v); });
    case Opcode::kAbs:
      return Map1<T>(x, out, [](T v) { return std::abs(v); });
    default:
      return Map1<T>(x, out, [](T v) { return v; });  // copy
  }
}

void IntUnary(Opcode opcode, const Value& x, Value& out) {
  DType dtype = out.shape.dtype();
  switch (opcode) {
    case Opcode::kNeg:
      return Map1<double>(x, out,
                          [dtype](double v) { return WrapInt(-static_cast<int64_t>(v), dtype); });
    case Opcode::kAbs:
      return Map1<double>(
          x, out, [dtype](double v) { return WrapInt(std::abs(static_cast<int64_t>(v)), dtype); });
    default:  // the typing rules allow nothing else on integers
      return Map1<double>(x, out, [](double v) { return v; });
  }
}

template <typename T>
void FloatBinary(Opcode opcode, const Value& a, const Value& b, Value& out) {
  switch (opcode) {
    case Opcode::kAdd:
      return Map2<T, T>(a, b, out, [](T x, T y) { return x + y; });
    case Opcode::kSub:
      return Map2<T, T>(a, b, out, [](T x, T y) { return x - y; });
    case Opcode::kMul:
      return Map2<T, T>(a, b, out, [](T x, T y) { return x * y; });
    case Opcode::kDiv:
      return Map2<T, T>(a, b, out, [](T x, T y) { return x / y; });
    case Opcode::kMax:
      return Map2<T, T>(a, b, out, [](T x, T y) { return Max(x, y); });
    case Opcode::kMin:
      return Map2<T, T>(a, b, out, [](T x, T y) { return Min(x, y); });
    case Opcode::kPow:
      return Map2<T, T>(a, b, out, [](T x, T y) { return std::pow(x, y); });
    default:
      return;
  }
}

// Integer operands are exact in double; the int64 result of any s32/u16 op
// except pow fits, and is then wrapped to the dtype.
void IntBinary(Opcode opcode, const Value& a, const Value& b, Value& out) {
  DType dtype = out.shape.dtype();
  auto map = [&](auto f) {
    Map2<double, double>(a, b, out, [f, dtype](double x, double y) {
      return WrapInt(f(static_cast<int64_t>(x), static_cast<int64_t>(y)), dtype);
    });
  };
  switch (opcode) {
    case Opcode::kAdd:
      return map([](int64_t x, int64_t y) { return x + y; });
    case Opcode::kSub:
      return map([](int64_t x, int64_t y) { return x - y; });
    case Opcode::kMul:
      return map([](int64_t x, int64_t y) { return x * y; });
    case Opcode::kDiv:
      // Truncates toward zero; x / 0 is defined as 0 rather than a trap.
      return map([](int64_t x, int64_t y) { return y == 0 ? int64_t{0} : x / y; });
    case Opcode::kMax:
      return map([](int64_t x, int64_t y) { return std::max(x, y); });
    case Opcode::kMin:
      return map([](int64_t x, int64_t y) { return std::min(x, y); });
    default:  // pow needs floats (shape inference rejects it)
      return map([](int64_t x, int64_t y) { return int64_t{0}; });
  }
}

template <typename T>
void CompareLoop(ir::CompareDirection direction, const Value& a, const Value& b, Value& out) {
  using ir::CompareDirection;
  auto map = [&](auto f) {
    Map2<T, double>(a, b, out, [f](T x, T y) { return f(x, y) ? 1.0 : 0.0; });
  };
  switch (direction) {
    case CompareDirection::kEq:
      return map([](T x, T y) { return x == y; });
    case CompareDirection::kNe:
      return map([](T x, T y) { return x != y; });
    case CompareDirection::kLt:
      return map([](T x, T y) { return x < y; });
    case CompareDirection::kLe:
      return map([](T x, T y) { return x <= y; });
    case CompareDirection::kGt:
      return map([](T x, T y) { return x > y; });
    case CompareDirection::kGe:
      return map([](T x, T y) { return x >= y; });
  }
}

// Float to integer: truncates toward zero like a C cast, but saturates at the
// dtype's range and maps NaN to 0 where C would be undefined.
inline double FloatToInt(double v, DType to) {
  if (std::isnan(v)) return 0;
  double lo = to == DType::kU16 ? 0.0 : -2147483648.0;
  double hi = to == DType::kU16 ? 65535.0 : 2147483647.0;
  return std::clamp(std::trunc(v), lo, hi);
}

template <typename In, typename Out>
void ConvertLoop(const Value& x, Value& out) {
  const DType from = x.shape.dtype(), to = out.shape.dtype();
  const In* in = x.get<In>();
  Out* o = out.mutable_get<Out>();
  const int64_t n = out.size;
  if (to == DType::kPred) {
    for (int64_t i = 0; i < n; ++i) o[i] = in[i] != 0 ? 1 : 0;
  } else if (ir::IsFloat(to)) {
    // Exact into double, then one rounding to the storage type; 16-bit
    // formats are rounded afterwards by RoundToDType.
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Out>(in[i]);
  } else if (ir::IsFloat(from)) {
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Out>(FloatToInt(in[i], to));
  } else {  // integer or pred to integer: s32 -> u16 wraps, the rest fit
    for (int64_t i = 0; i < n; ++i)
      o[i] = static_cast<Out>(WrapInt(static_cast<int64_t>(in[i]), to));
  }
}

}  // namespace

std::shared_ptr<Value> EvalUnary(const Context& ctx, const ir::Instruction& inst, const Value& x) {
  std::shared_ptr<Value> out = NewArray(ctx, inst.shape());
  if (ir::IsFloat(inst.shape().dtype())) {
    WithStorage(out->float_storage,
                [&](auto tag) { FloatUnary<decltype(tag)>(inst.opcode(), x, *out); });
  } else {
    IntUnary(inst.opcode(), x, *out);
  }
  RoundToDType(ctx, *out);
  return out;
}

std::shared_ptr<Value> EvalBinary(const Context& ctx, const ir::Instruction& inst, const Value& a,
                                  const Value& b) {
  std::shared_ptr<Value> out = NewArray(ctx, inst.shape());
  if (ir::IsFloat(inst.shape().dtype())) {
    WithStorage(out->float_storage,
                [&](auto tag) { FloatBinary<decltype(tag)>(inst.opcode(), a, b, *out); });
  } else {
    IntBinary(inst.opcode(), a, b, *out);
  }
  RoundToDType(ctx, *out);
  return out;
}

std::shared_ptr<Value> EvalCompare(const Context& ctx, const ir::Instruction& inst, const Value& a,
                                   const Value& b) {
  std::shared_ptr<Value> out = NewArray(ctx, inst.shape());
  WithStorage(a.float_storage,
              [&](auto tag) { CompareLoop<decltype(tag)>(inst.attrs().direction, a, b, *out); });
  return out;
}

std::shared_ptr<Value> EvalSelect(const Context& ctx, const ir::Instruction& inst,
                                  const Value& pred, const Value& on_true, const Value& on_false) {
  std::shared_ptr<Value> out = NewArray(ctx, inst.shape());
  WithStorage(out->float_storage, [&](auto tag) {
    using T = decltype(tag);
    const double* p = pred.get<double>();
    const T* t = on_true.get<T>();
    const T* f = on_false.get<T>();
    T* o = out->mutable_get<T>();
    for (int64_t i = 0; i < out->size; ++i) o[i] = p[i] != 0 ? t[i] : f[i];
  });
  return out;
}

std::shared_ptr<Value> EvalConvert(const Context& ctx, const ir::Instruction& inst,
                                   const Value& x) {
  std::shared_ptr<Value> out = NewArray(ctx, inst.shape());
  WithStorage(x.float_storage, [&](auto in_tag) {
    WithStorage(out->float_storage,
                [&](auto out_tag) { ConvertLoop<decltype(in_tag), decltype(out_tag)>(x, *out); });
  });
  RoundToDType(ctx, *out);
  return out;
}

StatusOr<std::shared_ptr<Value>> EvalAllReduce(const Context& ctx, const ir::Instruction& inst,
                                               const Value& x) {
  const ir::ReduceKind kind = inst.attrs().reduce_kind;
  if (Collective* collective = ctx.options.collective) {
    // One rank of a real group: combine a copy of x with the other ranks'.
    std::shared_ptr<Value> out = NewArray(ctx, inst.shape());
    Status status = WithStorage(out->float_storage, [&](auto tag) {
      using T = decltype(tag);
      std::copy(x.get<T>(), x.get<T>() + x.size, out->mutable_get<T>());
      return collective->AllReduce(kind, std::span<T>(out->mutable_get<T>(), out->size));
    });
    RETURN_IF_ERROR(status);
    RoundToDType(ctx, *out);
    return out;
  }
  // One simulated replica holds `x`; summing world_size identical replicas
  // multiplies by world_size, and max over them is `x` itself.
  if (kind == ir::ReduceKind::kMax || ctx.options.world_size == 1) {
    return ShareArray(inst.shape(), x);
  }
  std::shared_ptr<Value> out = NewArray(ctx, inst.shape());
  WithStorage(out->float_storage, [&](auto tag) {
    using T = decltype(tag);
    const T scale = static_cast<T>(ctx.options.world_size);
    Map1<T>(x, *out, [scale](T v) { return v * scale; });
  });
  RoundToDType(ctx, *out);
  return out;
}

}  // namespace gptc::eval::internal
