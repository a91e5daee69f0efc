#include "compiler/eval/chunked_fusion.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

namespace gptc::eval::internal {
namespace {

using ir::Opcode;

// Whether an instruction's value has the fusion's rows as its leading
// dimensions (kRows) or does not depend on them (kWhole). The rows are the
// result's leading `prefix` dims, flattened: [8,64,V] has 8 rows of [64,V]
// with prefix 1, 512 rows of [V] with prefix 2.
enum class Kind { kWhole, kRows };

// `shape` with its `prefix` leading dims (the fusion's rows) replaced by
// 1, ..., 1, count: one slice of consecutive rows.
ir::Shape WithRows(const ir::Shape& shape, int64_t prefix, int64_t count) {
  if (shape.is_tuple()) {
    std::vector<ir::Shape> elements;
    for (const ir::Shape& e : shape.tuple_elements()) {
      elements.push_back(WithRows(e, prefix, count));
    }
    return ir::Shape::Tuple(std::move(elements));
  }
  std::vector<int64_t> dims = shape.dims();
  for (int64_t d = 0; d + 1 < prefix; ++d) dims[d] = 1;
  dims[prefix - 1] = count;
  return ir::Shape(shape.dtype(), std::move(dims));
}

// The kinds of a body's values, and its copies with fewer rows. Composites
// in the body (a softmax-cross-entropy inside a loss fusion) are classified
// and sliced through their own computations.
class RowSlicer {
 public:
  explicit RowSlicer(std::vector<int64_t> lead) : lead_(std::move(lead)) {}

  // Classifies `body` given its parameters' kinds; false when some value
  // mixes rows in a way slices cannot compute (Note [chunked fusions]).
  bool Classify(const ir::Computation& body, const std::vector<Kind>& params) {
    if (auto it = classified_.find(&body); it != classified_.end()) return it->second == params;
    if (top_ == nullptr) top_ = &body;
    classified_[&body] = params;
    for (const auto& owned : body.instructions()) {
      const ir::Instruction& inst = *owned;
      std::optional<Kind> k = KindOf(inst, body, params);
      if (!k) return false;
      kind_[&inst] = *k;
    }
    return body.root() != nullptr && kind_[body.root()] == Kind::kRows;
  }

  Kind kind(const ir::Instruction* inst) const { return kind_.at(inst); }
  // How many leading dims the rows are.
  int64_t prefix() const { return static_cast<int64_t>(lead_.size()); }
  // Whether `shape` starts with the rows' dims.
  bool HasRows(const ir::Shape& shape) const {
    return !shape.is_tuple() && shape.rank() >= prefix() &&
           std::equal(lead_.begin(), lead_.end(), shape.dims().begin());
  }
  // The top body's constants with rows (a per-row scale), which its slices
  // take as extra parameters after its own, in this order.
  const std::vector<const ir::Instruction*>& row_constants() const { return row_constants_; }

  // `body` with one slice of `count` rows (1, ..., 1, count in place of the
  // leading dims) in every row value.
  const ir::Computation* Slice(const ir::Computation& body, int64_t count) {
    std::unique_ptr<ir::Computation>& out = sliced_[{&body, count}];
    if (out) return out.get();
    out = std::make_unique<ir::Computation>(body.name() + ".rows");
    std::unordered_map<const ir::Instruction*, ir::Instruction*> copy;
    for (const auto& owned : body.instructions()) {
      const ir::Instruction& inst = *owned;
      std::vector<ir::Instruction*> operands;
      for (const ir::Instruction* op : inst.operands()) operands.push_back(copy.at(op));
      const bool rows = kind(&inst) == Kind::kRows;
      if (rows && inst.opcode() == Opcode::kConstant) {
        const auto at = std::find(row_constants_.begin(), row_constants_.end(), &inst);
        ir::Attrs attrs;
        attrs.index =
            static_cast<int64_t>(body.parameters().size() + (at - row_constants_.begin()));
        copy[&inst] = out->AddInstruction(std::make_unique<ir::Instruction>(
            inst.name(), Opcode::kParameter, WithRows(inst.shape(), prefix(), count),
            std::vector<ir::Instruction*>{}, std::move(attrs)));
        continue;
      }
      auto made = std::make_unique<ir::Instruction>(
          inst.name(), inst.opcode(), rows ? WithRows(inst.shape(), prefix(), count) : inst.shape(),
          std::move(operands), inst.attrs());
      const ir::Computation* called = inst.called_computation();
      if (called != nullptr && rows) called = Slice(*called, count);
      made->set_called_computation(const_cast<ir::Computation*>(called));
      copy[&inst] = out->AddInstruction(std::move(made));
    }
    out->set_root(copy.at(body.root()));
    return out.get();
  }

 private:
  // dims[k] == k for the leading dims: they stay where they are, in order.
  bool KeepsLead(const std::vector<int64_t>& dims) const {
    if (static_cast<int64_t>(dims.size()) < prefix()) return false;
    for (int64_t k = 0; k < prefix(); ++k) {
      if (dims[k] != k) return false;
    }
    return true;
  }

  std::optional<Kind> KindOf(const ir::Instruction& inst, const ir::Computation& body,
                             const std::vector<Kind>& params) {
    const ir::Shape& shape = inst.shape();
    bool all_whole = true, all_rows = true;
    std::vector<Kind> operand_kinds;
    for (const ir::Instruction* op : inst.operands()) {
      auto it = kind_.find(op);
      if (it == kind_.end()) return std::nullopt;
      operand_kinds.push_back(it->second);
      all_whole &= it->second == Kind::kWhole;
      all_rows &= it->second == Kind::kRows;
    }
    const std::vector<int64_t>& dims = inst.attrs().dimensions;
    const bool maps_row_dim =
        std::any_of(dims.begin(), dims.end(), [&](int64_t d) { return d < prefix(); });
    switch (inst.opcode()) {
      case Opcode::kParameter: {
        const int64_t i = inst.attrs().index;
        if (i < 0 || i >= static_cast<int64_t>(params.size())) return std::nullopt;
        if (params[i] == Kind::kRows && !HasRows(shape)) return std::nullopt;
        return params[i];
      }
      case Opcode::kConstant:
        if (!HasRows(shape) || &body != top_) return Kind::kWhole;
        row_constants_.push_back(&inst);
        return Kind::kRows;
      case Opcode::kIota:
        // An iota along the rows would need each slice's offset.
        if (!HasRows(shape)) return Kind::kWhole;
        if (inst.attrs().index >= prefix()) return Kind::kRows;
        return std::nullopt;
      case Opcode::kBroadcast:
        if (!HasRows(shape)) return all_whole ? std::optional(Kind::kWhole) : std::nullopt;
        if (all_whole && !maps_row_dim) return Kind::kRows;  // the same operand in every row
        if (all_rows && KeepsLead(dims)) return Kind::kRows;
        return std::nullopt;
      case Opcode::kReshape:  // row-major: row r stays row r
        if (all_whole) return Kind::kWhole;
        if (HasRows(shape) && HasRows(inst.operand(0)->shape())) return Kind::kRows;
        return std::nullopt;
      case Opcode::kTranspose:
        if (all_whole) return Kind::kWhole;
        if (KeepsLead(dims)) return Kind::kRows;
        return std::nullopt;
      case Opcode::kReduce:
        if (all_whole) return Kind::kWhole;
        if (!maps_row_dim) return Kind::kRows;
        return std::nullopt;
      case Opcode::kTuple:
        if (all_rows && &inst == body.root()) return Kind::kRows;
        return std::nullopt;
      default:
        break;
    }
    if (all_whole) return Kind::kWhole;
    if (ir::IsElementwise(inst.opcode()) && all_rows) return Kind::kRows;
    const ir::Computation* called = inst.called_computation();
    if (ir::CallsComputation(inst.opcode()) && called != nullptr && HasRows(shape) &&
        Classify(*called, operand_kinds)) {
      return Kind::kRows;
    }
    return std::nullopt;
  }

  std::vector<int64_t> lead_;
  const ir::Computation* top_ = nullptr;
  std::vector<const ir::Instruction*> row_constants_;
  std::unordered_map<const ir::Instruction*, Kind> kind_;
  std::unordered_map<const ir::Computation*, std::vector<Kind>> classified_;
  std::map<std::pair<const ir::Computation*, int64_t>, std::unique_ptr<ir::Computation>> sliced_;
};

size_t ElementBytes(const Value& v) { return v.float_storage ? sizeof(float) : sizeof(double); }

// Rows [first, first + count) of `v` (of `rows` rows; the slice's leading
// `prefix` dims 1, ..., 1, count), sharing its buffer.
ValuePtr RowSlice(const Value& v, int64_t rows, int64_t prefix, int64_t first, int64_t count) {
  const int64_t row = v.size / rows;
  auto out = std::make_shared<Value>();
  out->shape = WithRows(v.shape, prefix, count);
  out->size = row * count;
  out->float_storage = v.float_storage;
  out->data = std::shared_ptr<void>(
      v.data, static_cast<char*>(v.data.get()) + first * row * ElementBytes(v));
  return out;
}

// Copies `part` into `whole` (of `rows` rows) at row `first`.
void CopyRows(const Value& part, int64_t rows, int64_t first, Value& whole) {
  const int64_t row = whole.size / rows;
  std::memcpy(static_cast<char*>(whole.data.get()) + first * row * ElementBytes(whole),
              part.data.get(), part.size * ElementBytes(part));
}

// A result array of `shape` in the buffer of an operand with rows that no
// one else holds (this is its last use) and of the same size and storage, or
// null. Slice k reads only rows of slice k and is copied back after it ran,
// over rows no later slice reads, so the operand may be overwritten as the
// result is assembled: the logits' buffer becomes their gradient's.
std::shared_ptr<Value> InPlace(const Context& ctx, const ir::Shape& shape,
                               std::span<const ValuePtr> args, const std::vector<Kind>& kinds,
                               std::vector<bool>& taken) {
  const bool float_storage = ctx.FloatStorage(shape.dtype());
  for (size_t i = 0; i < args.size(); ++i) {
    const Value& a = *args[i];
    if (taken[i] || kinds[i] != Kind::kRows || args[i].use_count() != 1 ||
        a.data.use_count() != 1 || a.size != shape.num_elements() ||
        a.float_storage != float_storage) {
      continue;
    }
    taken[i] = true;
    auto out = std::make_shared<Value>();
    out->shape = shape;
    out->size = a.size;
    out->float_storage = float_storage;
    out->data = a.data;
    return out;
  }
  return nullptr;
}

// How EvalFusionByRows slices a fusion's rows: the slicer of its leading
// dims, each parameter's kind, and the rows.
struct RowSplit {
  RowSlicer slicer;
  std::vector<Kind> kinds;
  int64_t rows = 1;
};

// The fewest leading dims of `first` whose rows are at most `limit`
// elements of the largest value (`largest` elements), or as many as the body
// allows; none when that leaves fewer than two rows.
std::optional<RowSplit> SplitRows(const ir::Computation& body,
                                  const std::vector<ir::Instruction*>& params,
                                  const ir::Shape& first, int64_t largest, int64_t limit) {
  std::optional<RowSplit> split;
  int64_t rows = 1;
  for (int64_t prefix = 1; prefix <= first.rank(); ++prefix) {
    RowSlicer candidate({first.dims().begin(), first.dims().begin() + prefix});
    std::vector<Kind> kinds;
    for (const ir::Instruction* p : params) {
      kinds.push_back(p != nullptr && candidate.HasRows(p->shape()) ? Kind::kRows : Kind::kWhole);
    }
    if (!candidate.Classify(body, kinds)) break;
    rows *= first.dims()[prefix - 1];
    split.emplace(RowSplit{std::move(candidate), std::move(kinds), rows});
    if (largest / rows <= limit) break;
  }
  if (!split || split->rows < 2) return std::nullopt;
  return split;
}

}  // namespace

std::optional<StatusOr<ValuePtr>> EvalFusionByRows(const Context& ctx,
                                                   const ir::Instruction& fusion,
                                                   std::span<const ValuePtr> args,
                                                   const RunComputationFn& run) {
  const int64_t limit = ctx.options.chunk_elements;
  const ir::Computation* body = fusion.called_computation();
  if (limit <= 0 || body == nullptr) return std::nullopt;
  const ir::Shape& shape = fusion.shape();
  const ir::Shape& first =
      shape.is_tuple() && !shape.tuple_elements().empty() ? shape.tuple_elements()[0] : shape;
  if (first.is_tuple() || first.rank() == 0) return std::nullopt;
  int64_t largest = 0;
  for (const auto& inst : body->instructions()) {
    if (!inst->shape().is_tuple()) largest = std::max(largest, inst->shape().num_elements());
  }
  if (largest <= limit) return std::nullopt;
  std::vector<ir::Instruction*> params = body->parameters();
  if (params.size() != args.size()) return std::nullopt;
  std::optional<RowSplit> split = SplitRows(*body, params, first, largest, limit);
  if (!split) return std::nullopt;
  RowSlicer* slicer = &split->slicer;
  const std::vector<Kind>& param_kinds = split->kinds;
  const int64_t rows = split->rows;
  const int64_t prefix = slicer->prefix();
  const int64_t last = first.dims()[prefix - 1];  // a slice stays within one of its runs
  const int64_t per_slice =
      std::clamp<int64_t>(limit / std::max<int64_t>(largest / rows, 1), 1, last);
  std::vector<ValuePtr> row_constants;
  for (const ir::Instruction* c : slicer->row_constants()) {
    row_constants.push_back(EvalConstant(ctx, *c));
  }
  // The result's arrays, made before any slice holds a view of an operand.
  std::vector<std::shared_ptr<Value>> outputs;
  std::vector<bool> taken(args.size(), false);
  for (size_t e = 0; e < (shape.is_tuple() ? shape.tuple_elements().size() : 1); ++e) {
    const ir::Shape& out = shape.is_tuple() ? shape.tuple_elements()[e] : shape;
    outputs.push_back(InPlace(ctx, out, args, param_kinds, taken));
    if (outputs.back() == nullptr) outputs.back() = NewArray(ctx, out);
  }
  std::vector<ValuePtr> slice_args(args.size() + row_constants.size());
  for (int64_t run_start = 0; run_start < rows; run_start += last) {
    for (int64_t j = 0; j < last; j += per_slice) {
      const int64_t begin = run_start + j, count = std::min(per_slice, last - j);
      const ir::Computation* sliced = slicer->Slice(*body, count);
      for (size_t i = 0; i < args.size(); ++i) {
        slice_args[i] = param_kinds[i] == Kind::kRows
                            ? RowSlice(*args[i], rows, prefix, begin, count)
                            : args[i];
      }
      for (size_t i = 0; i < row_constants.size(); ++i) {
        slice_args[args.size() + i] = RowSlice(*row_constants[i], rows, prefix, begin, count);
      }
      StatusOr<ValuePtr> part = run(*sliced, slice_args);
      if (!part.ok()) return StatusOr<ValuePtr>(part.status());
      std::vector<const Value*> pieces;
      if (shape.is_tuple()) {
        for (const ValuePtr& e : (*part)->elements) pieces.push_back(e.get());
      } else {
        pieces.push_back(part->get());
      }
      for (size_t e = 0; e < pieces.size(); ++e) {
        if (outputs[e]->float_storage != pieces[e]->float_storage) {
          return StatusOr<ValuePtr>(
              Error("%{}: a slice's storage differs from the result's", fusion.name()));
        }
        CopyRows(*pieces[e], rows, begin, *outputs[e]);
      }
    }
  }
  if (!shape.is_tuple()) return StatusOr<ValuePtr>(ValuePtr(outputs[0]));
  auto tuple = std::make_shared<Value>();
  tuple->shape = shape;
  tuple->elements.assign(outputs.begin(), outputs.end());
  return StatusOr<ValuePtr>(ValuePtr(std::move(tuple)));
}

}  // namespace gptc::eval::internal
