// Reductions and indexed access: reduce, gather, scatter-add.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/eval/value.h"

namespace gptc::eval::internal {

namespace {

using ir::DType;

// A run of adjacent input dims that are all reduced or all kept; merging them
// makes the inner loop one contiguous run whatever the reduced dims are.
struct DimGroup {
  int64_t size;
  bool reduced;
  int64_t out_stride = 0;  // kept groups only
};

// Folds x into acc (one double per output element, pre-filled with the
// identity). Accumulating in double keeps kF32 sums accurate; the result is
// rounded to the output type once at the end.
template <typename T, typename Op>
void ReduceInto(const Value& x, const std::vector<bool>& reduced, double identity, double* acc,
                Op op) {
  std::vector<DimGroup> groups;
  for (int64_t d = 0; d < x.shape.rank(); ++d) {
    int64_t size = x.shape.dim(d);
    if (size == 0) return;
    if (size == 1) continue;
    if (!groups.empty() && groups.back().reduced == reduced[d]) {
      groups.back().size *= size;
    } else {
      groups.push_back({size, reduced[d]});
    }
  }
  const T* in = x.get<T>();
  if (groups.empty()) {
    acc[0] = op(acc[0], static_cast<double>(in[0]));
    return;
  }
  int64_t stride = 1;
  for (auto it = groups.rbegin(); it != groups.rend(); ++it) {
    if (it->reduced) continue;
    it->out_stride = stride;
    stride *= it->size;
  }
  const DimGroup inner = groups.back();
  const int64_t outer_rank = static_cast<int64_t>(groups.size()) - 1;
  int64_t outer = 1;
  for (int64_t k = 0; k < outer_rank; ++k) outer *= groups[k].size;
  std::vector<int64_t> index(outer_rank, 0);
  int64_t out_offset = 0;
  for (int64_t o = 0; o < outer; ++o) {
    const T* row = in + o * inner.size;
    if (inner.reduced) {
      // Four interleaved partial results hide the add latency of one chain.
      double a[4] = {acc[out_offset], identity, identity, identity};
      int64_t j = 0;
      for (; j + 4 <= inner.size; j += 4) {
        for (int lane = 0; lane < 4; ++lane)
          a[lane] = op(a[lane], static_cast<double>(row[j + lane]));
      }
      for (; j < inner.size; ++j) a[0] = op(a[0], static_cast<double>(row[j]));
      acc[out_offset] = op(op(a[0], a[1]), op(a[2], a[3]));
    } else {
      double* dst = acc + out_offset;
      for (int64_t j = 0; j < inner.size; ++j) dst[j] = op(dst[j], static_cast<double>(row[j]));
    }
    for (int64_t k = outer_rank - 1; k >= 0; --k) {
      out_offset += groups[k].out_stride;
      if (++index[k] < groups[k].size) break;
      out_offset -= groups[k].out_stride * groups[k].size;
      index[k] = 0;
    }
  }
}

// "[1,2]": the multi-index of flat position `flat` in `dims`, for messages.
std::string IndexString(int64_t flat, const std::vector<int64_t>& dims) {
  std::vector<int64_t> index(dims.size());
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    index[d] = flat % dims[d];
    flat /= dims[d];
  }
  return fmt::format("[{}]", fmt::join(index, ","));
}

// The [pre, axis, post] view of a table indexed along `axis`.
struct AxisView {
  int64_t pre = 1, axis_size = 0, post = 1;
};
AxisView ViewAround(const ir::Shape& shape, int64_t axis) {
  AxisView v;
  for (int64_t d = 0; d < axis; ++d) v.pre *= shape.dim(d);
  v.axis_size = shape.dim(axis);
  for (int64_t d = axis + 1; d < shape.rank(); ++d) v.post *= shape.dim(d);
  return v;
}

// Reads the indices as int64, checking each is in [0, axis_size).
StatusOr<std::vector<int64_t>> CheckedIndices(std::string_view op, const Value& indices,
                                              int64_t axis, int64_t axis_size) {
  std::vector<int64_t> result(indices.size);
  const double* in = indices.get<double>();
  for (int64_t i = 0; i < indices.size; ++i) {
    int64_t index = static_cast<int64_t>(in[i]);
    if (index < 0 || index >= axis_size) {
      return Error("{} index {} at indices{} is out of range for axis {} of size {}", op, index,
                   IndexString(i, indices.shape.dims()), axis, axis_size);
    }
    result[i] = index;
  }
  return result;
}

}  // namespace

std::shared_ptr<Value> EvalReduce(const Context& ctx, const ir::Instruction& inst, const Value& x) {
  const ir::Shape& shape = inst.shape();
  const DType in_dtype = x.shape.dtype(), out_dtype = shape.dtype();
  std::vector<bool> reduced(x.shape.rank(), false);
  for (int64_t d : inst.attrs().dimensions) reduced[d] = true;
  const bool is_sum = inst.attrs().reduce_kind == ir::ReduceKind::kSum;
  double identity = 0;
  if (!is_sum) {
    identity = ir::IsFloat(in_dtype)     ? -std::numeric_limits<double>::infinity()
               : in_dtype == DType::kU16 ? 0.0
                                         : -2147483648.0;
  }
  const int64_t out_size = shape.num_elements();
  std::vector<double> acc(out_size, identity);
  WithStorage(x.float_storage, [&](auto tag) {
    using T = decltype(tag);
    if (is_sum) {
      ReduceInto<T>(x, reduced, identity, acc.data(), [](double a, double b) { return a + b; });
    } else {
      ReduceInto<T>(x, reduced, identity, acc.data(),
                    [](double a, double b) { return (a > b || a != a) ? a : b; });
    }
  });
  std::shared_ptr<Value> out = NewArray(ctx, shape);
  WithStorage(out->float_storage, [&](auto tag) {
    using T = decltype(tag);
    T* o = out->mutable_get<T>();
    if (ir::IsFloat(out_dtype)) {
      for (int64_t i = 0; i < out_size; ++i) o[i] = static_cast<T>(acc[i]);
    } else {  // integer sums wrap like integer adds
      for (int64_t i = 0; i < out_size; ++i) {
        int64_t v = static_cast<int64_t>(acc[i]);
        o[i] = out_dtype == DType::kU16 ? static_cast<uint16_t>(v)
                                        : static_cast<int32_t>(static_cast<uint32_t>(v));
      }
    }
  });
  RoundToDType(ctx, *out);
  return out;
}

StatusOr<std::shared_ptr<Value>> EvalGather(const Context& ctx, const ir::Instruction& inst,
                                            const Value& table, const Value& indices) {
  const int64_t axis = inst.attrs().index;
  const AxisView view = ViewAround(table.shape, axis);
  ASSIGN_OR_RETURN(std::vector<int64_t> rows,
                   CheckedIndices("gather", indices, axis, view.axis_size));
  std::shared_ptr<Value> out = NewArray(ctx, inst.shape());
  WithStorage(out->float_storage, [&](auto tag) {
    using T = decltype(tag);
    const T* in = table.get<T>();
    T* o = out->mutable_get<T>();
    const int64_t n = static_cast<int64_t>(rows.size());
    for (int64_t p = 0; p < view.pre; ++p) {
      for (int64_t i = 0; i < n; ++i) {
        std::copy_n(in + (p * view.axis_size + rows[i]) * view.post, view.post,
                    o + (p * n + i) * view.post);
      }
    }
  });
  return out;
}

StatusOr<std::shared_ptr<Value>> EvalScatterAdd(const Context& ctx, const ir::Instruction& inst,
                                                const Value& operand, const Value& indices,
                                                const Value& updates) {
  const int64_t axis = inst.attrs().index;
  const AxisView view = ViewAround(operand.shape, axis);
  ASSIGN_OR_RETURN(std::vector<int64_t> rows,
                   CheckedIndices("scatter-add", indices, axis, view.axis_size));
  std::shared_ptr<Value> out = NewArray(ctx, inst.shape());
  WithStorage(out->float_storage, [&](auto tag) {
    using T = decltype(tag);
    T* o = out->mutable_get<T>();
    std::copy_n(operand.get<T>(), out->size, o);
    const T* u = updates.get<T>();
    const int64_t n = static_cast<int64_t>(rows.size());
    for (int64_t p = 0; p < view.pre; ++p) {
      for (int64_t i = 0; i < n; ++i) {
        T* dst = o + (p * view.axis_size + rows[i]) * view.post;
        const T* src = u + (p * n + i) * view.post;
        for (int64_t j = 0; j < view.post; ++j) dst[j] += src[j];
      }
    }
  });
  RoundToDType(ctx, *out);
  return out;
}

}  // namespace gptc::eval::internal
