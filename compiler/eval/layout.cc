// Data movement: constant, iota, broadcast, transpose, slice, pad, concatenate.
//
// All of them reduce to one strided box copy, so there is one tight loop to
// get right instead of one per opcode.
#include <algorithm>

#include "compiler/eval/value.h"

namespace gptc::eval::internal {

namespace {

// Copies the box `dims`: out[sum_d i_d * out_strides[d]] = in[sum_d i_d * in_strides[d]].
// An input stride of 0 repeats the input along that dim (broadcast).
template <typename T>
void StridedCopy(std::span<const int64_t> dims, const T* in, std::span<const int64_t> in_strides,
                 T* out, std::span<const int64_t> out_strides) {
  // Drop unit dims and merge neighbours that are contiguous on both sides, so
  // the inner loop runs as long as possible (a broadcast of a row over a
  // matrix becomes one loop per row; a reshape-like copy becomes one memcpy).
  std::vector<int64_t> d, is, os;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 0) return;
    if (dims[k] == 1) continue;
    if (!d.empty() && is.back() == in_strides[k] * dims[k] &&
        os.back() == out_strides[k] * dims[k]) {
      d.back() *= dims[k];
      is.back() = in_strides[k];
      os.back() = out_strides[k];
    } else {
      d.push_back(dims[k]);
      is.push_back(in_strides[k]);
      os.push_back(out_strides[k]);
    }
  }
  if (d.empty()) {
    *out = *in;
    return;
  }
  const int64_t rank = static_cast<int64_t>(d.size());
  const int64_t inner = rank - 1;
  // A transpose reads the inner loop with a large stride, missing the cache
  // on every element; then walk 32x32 tiles of the inner dim and the dim the
  // input is contiguous along instead.
  int64_t tiled = -1;
  if (is[inner] > 1 && os[inner] == 1) {
    for (int64_t k = 0; k < inner; ++k) {
      if (is[k] == 1 && d[k] >= 8) tiled = k;
    }
  }
  std::vector<int64_t> outer_dims;
  for (int64_t k = 0; k < inner; ++k) {
    if (k != tiled) outer_dims.push_back(k);
  }
  int64_t outer = 1;
  for (int64_t k : outer_dims) outer *= d[k];
  std::vector<int64_t> index(rank, 0);
  int64_t in_offset = 0, out_offset = 0;
  const int64_t n = d[inner], in_step = is[inner], out_step = os[inner];
  for (int64_t o = 0; o < outer; ++o) {
    const T* src = in + in_offset;
    T* dst = out + out_offset;
    if (tiled >= 0) {
      constexpr int64_t kTile = 32;
      const int64_t m = d[tiled], out_row = os[tiled];
      for (int64_t i0 = 0; i0 < m; i0 += kTile) {
        for (int64_t j0 = 0; j0 < n; j0 += kTile) {
          const int64_t i1 = std::min(m, i0 + kTile), j1 = std::min(n, j0 + kTile);
          for (int64_t i = i0; i < i1; ++i) {
            for (int64_t j = j0; j < j1; ++j) dst[i * out_row + j] = src[i + j * in_step];
          }
        }
      }
    } else if (in_step == 1 && out_step == 1) {
      std::copy_n(src, n, dst);
    } else if (in_step == 0 && out_step == 1) {
      std::fill_n(dst, n, *src);
    } else {
      for (int64_t j = 0; j < n; ++j) dst[j * out_step] = src[j * in_step];
    }
    // Odometer over the remaining dims.
    for (auto it = outer_dims.rbegin(); it != outer_dims.rend(); ++it) {
      const int64_t k = *it;
      in_offset += is[k];
      out_offset += os[k];
      if (++index[k] < d[k]) break;
      in_offset -= is[k] * d[k];
      out_offset -= os[k] * d[k];
      index[k] = 0;
    }
  }
}

// StridedCopy over the storage type of `out` (the same as the input's).
void CopyBox(std::span<const int64_t> dims, const Value& in, int64_t in_offset,
             std::span<const int64_t> in_strides, Value& out, int64_t out_offset,
             std::span<const int64_t> out_strides) {
  WithStorage(out.float_storage, [&](auto tag) {
    using T = decltype(tag);
    StridedCopy<T>(dims, in.get<T>() + in_offset, in_strides, out.mutable_get<T>() + out_offset,
                   out_strides);
  });
}

}  // namespace

std::shared_ptr<Value> EvalConstant(const Context& ctx, const ir::Instruction& inst) {
  std::shared_ptr<Value> out = NewArray(ctx, inst.shape());
  const std::vector<double>& literal = inst.attrs().literal;
  WithStorage(out->float_storage, [&](auto tag) {
    using T = decltype(tag);
    std::transform(literal.begin(), literal.end(), out->mutable_get<T>(),
                   [](double x) { return static_cast<T>(x); });
  });
  return out;
}

std::shared_ptr<Value> EvalIota(const Context& ctx, const ir::Instruction& inst) {
  const ir::Shape& shape = inst.shape();
  const int64_t axis = inst.attrs().index;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape.dim(d);
  for (int64_t d = axis + 1; d < shape.rank(); ++d) inner *= shape.dim(d);
  const int64_t n = shape.dim(axis);
  // u16 iota past 65535 wraps like any u16 arithmetic.
  const bool wrap_u16 = shape.dtype() == ir::DType::kU16;
  std::shared_ptr<Value> out = NewArray(ctx, shape);
  WithStorage(out->float_storage, [&](auto tag) {
    using T = decltype(tag);
    T* data = out->mutable_get<T>();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < n; ++i) {
        T v = static_cast<T>(wrap_u16 ? static_cast<uint16_t>(i) : i);
        std::fill_n(data + (o * n + i) * inner, inner, v);
      }
    }
  });
  RoundToDType(ctx, *out);
  return out;
}

std::shared_ptr<Value> EvalBroadcast(const Context& ctx, const ir::Instruction& inst,
                                     const Value& x) {
  const ir::Shape& shape = inst.shape();
  std::vector<int64_t> x_strides = x.shape.Strides();
  std::vector<int64_t> in_strides(shape.rank(), 0);
  const std::vector<int64_t>& dims = inst.attrs().dimensions;
  for (size_t i = 0; i < dims.size(); ++i) in_strides[dims[i]] = x_strides[i];
  std::shared_ptr<Value> out = NewArray(ctx, shape);
  CopyBox(shape.dims(), x, 0, in_strides, *out, 0, shape.Strides());
  return out;
}

std::shared_ptr<Value> Permute(const Context& ctx, const Value& x,
                               std::span<const int64_t> permutation) {
  std::vector<int64_t> x_strides = x.shape.Strides();
  std::vector<int64_t> dims, in_strides;
  for (int64_t p : permutation) {
    dims.push_back(x.shape.dim(p));
    in_strides.push_back(x_strides[p]);
  }
  ir::Shape shape(x.shape.dtype(), dims);
  std::shared_ptr<Value> out = NewArray(ctx, shape);
  CopyBox(dims, x, 0, in_strides, *out, 0, shape.Strides());
  return out;
}

std::shared_ptr<Value> EvalTranspose(const Context& ctx, const ir::Instruction& inst,
                                     const Value& x) {
  return Permute(ctx, x, inst.attrs().dimensions);
}

std::shared_ptr<Value> EvalSlice(const Context& ctx, const ir::Instruction& inst, const Value& x) {
  const ir::SliceSpec& spec = inst.attrs().slice;
  std::vector<int64_t> x_strides = x.shape.Strides();
  std::vector<int64_t> in_strides(x_strides.size());
  int64_t in_offset = 0;
  for (size_t d = 0; d < x_strides.size(); ++d) {
    in_offset += spec.starts[d] * x_strides[d];
    in_strides[d] = spec.strides[d] * x_strides[d];
  }
  std::shared_ptr<Value> out = NewArray(ctx, inst.shape());
  CopyBox(inst.shape().dims(), x, in_offset, in_strides, *out, 0, inst.shape().Strides());
  return out;
}

std::shared_ptr<Value> EvalPad(const Context& ctx, const ir::Instruction& inst, const Value& x,
                               const Value& padding) {
  std::shared_ptr<Value> out = NewArray(ctx, inst.shape());
  WithStorage(out->float_storage, [&](auto tag) {
    using T = decltype(tag);
    std::fill_n(out->mutable_get<T>(), out->size, padding.get<T>()[0]);
  });
  std::vector<int64_t> out_strides = inst.shape().Strides();
  int64_t out_offset = 0;
  for (size_t d = 0; d < out_strides.size(); ++d) {
    out_offset += inst.attrs().pad_low[d] * out_strides[d];
  }
  CopyBox(x.shape.dims(), x, 0, x.shape.Strides(), *out, out_offset, out_strides);
  return out;
}

std::shared_ptr<Value> EvalConcatenate(const Context& ctx, const ir::Instruction& inst,
                                       std::span<const Value* const> xs) {
  const int64_t axis = inst.attrs().dimensions[0];
  std::shared_ptr<Value> out = NewArray(ctx, inst.shape());
  std::vector<int64_t> out_strides = inst.shape().Strides();
  int64_t position = 0;  // along `axis`
  for (const Value* x : xs) {
    CopyBox(x->shape.dims(), *x, 0, x->shape.Strides(), *out, position * out_strides[axis],
            out_strides);
    position += x->shape.dim(axis);
  }
  return out;
}

}  // namespace gptc::eval::internal
