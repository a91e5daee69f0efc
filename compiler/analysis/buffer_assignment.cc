#include "compiler/analysis/buffer_assignment.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "compiler/ir/patterns.h"
#include "compiler/support/text.h"

namespace gptc::analysis {

namespace {

using ir::Instruction;
using ir::Opcode;
using ir::Shape;

int64_t LeafCount(const Shape& shape) {
  if (!shape.is_tuple()) return 1;
  int64_t n = 0;
  for (const Shape& e : shape.tuple_elements()) n += LeafCount(e);
  return n;
}

void CollectLeaves(const Shape& shape, std::vector<Shape>& out) {
  if (!shape.is_tuple()) {
    out.push_back(shape);
    return;
  }
  for (const Shape& e : shape.tuple_elements()) CollectLeaves(e, out);
}

int64_t AlignUp(int64_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

// The last time each logical buffer is read in `order` (its definition time if never).
std::vector<int64_t> LastReads(const LogicalBuffers& lb,
                               const std::unordered_map<const Instruction*, int64_t>& time,
                               const std::vector<const Instruction*>& order) {
  std::vector<int64_t> last(lb.buffers.size(), -1);
  for (size_t b = 0; b < lb.buffers.size(); ++b) last[b] = time.at(lb.buffers[b].defining);
  for (size_t t = 0; t < order.size(); ++t) {
    for (const Instruction* op : order[t]->operands()) {
      for (int64_t b : lb.leaf_buffers.at(op)) {
        last[b] = std::max(last[b], static_cast<int64_t>(t));
      }
    }
  }
  return last;
}

// Whether fused parameter `param` only feeds elementwise ops of its own shape
// (transitively) and the fusion's output tuple, so a kernel reads each of its
// elements at the index it writes; with `rows`, also reductions over the last
// dim and the softmax cross-entropy composite (whose reads are such
// reductions too), which a row kernel finishes before it writes (Note
// [in-place temporaries]).
bool ReadAtItsIndex(const Instruction* param, bool rows) {
  std::vector<const Instruction*> stack = {param};
  std::unordered_set<const Instruction*> seen;
  const std::vector<int64_t>& dims = param->shape().dims();
  while (!stack.empty()) {
    const Instruction* inst = stack.back();
    stack.pop_back();
    if (!seen.insert(inst).second) continue;
    for (const Instruction* user : inst->users()) {
      if (user->opcode() == Opcode::kTuple && user == user->parent()->root()) continue;
      if (rows && (ir::IsRowReduce(*user) || user->opcode() == Opcode::kSoftmaxCrossEntropy)) {
        continue;
      }
      if (!ir::IsElementwise(user->opcode()) || user->shape().is_tuple() ||
          user->shape().dims() != dims) {
        return false;
      }
      stack.push_back(user);
    }
  }
  return true;
}

// Whether `producer` may write `output` (one of its leaves) over buffer `param`
// that it also reads: see Note [donated buffers].
bool ReadsElementwiseInPlace(const Instruction& producer, int64_t param, const LogicalBuffers& lb,
                             const Shape& output, const Shape& param_shape) {
  if (output.num_elements() != param_shape.num_elements() ||
      ir::DTypeBytes(output.dtype()) != ir::DTypeBytes(param_shape.dtype())) {
    return false;
  }
  const bool fusion = producer.opcode() == Opcode::kFusion &&
                      (producer.attrs().fusion_kind == ir::FusionKind::kLoop ||
                       producer.attrs().fusion_kind == ir::FusionKind::kOptimizer);
  if (!fusion && !ir::IsElementwise(producer.opcode())) return false;
  for (int64_t i = 0; i < producer.operand_count(); ++i) {
    const std::vector<int64_t>& leaves = lb.leaf_buffers.at(producer.operand(i));
    if (std::find(leaves.begin(), leaves.end(), param) == leaves.end()) continue;
    if (leaves.size() != 1) return false;  // the parameter inside a tuple operand
    if (!fusion) continue;                 // elementwise: every operand has the result's elements
    std::vector<Instruction*> fused_params = producer.called_computation()->parameters();
    if (i >= static_cast<int64_t>(fused_params.size()) || fused_params[i] == nullptr ||
        !ReadAtItsIndex(fused_params[i], /*rows=*/false)) {
      return false;
    }
  }
  return true;
}

// Whether every reduce of fused computation `c` is over the last dim, so the
// row-reduction emitter runs it: each row belongs to one warp or block, which
// reads it whole in its reduction passes before its final column loop writes
// the input-shaped outputs (Note [row reduction] in
// compiler/codegen/row_reduction_plan.h).
bool AllRowReductions(const ir::Computation& c) {
  return std::all_of(c.instructions().begin(), c.instructions().end(), [](const auto& inst) {
    return inst->opcode() != Opcode::kReduce || ir::IsRowReduce(*inst);
  });
}

// Note [in-place temporaries]: whether fusion `producer` may write its output
// leaf `output` over the buffer of its operand `operand`, which it reads for
// the last time.
bool MayOverwriteOperand(const Instruction& producer, int64_t operand, const Shape& output) {
  if (producer.opcode() == Opcode::kScatterAdd)
    return operand == 0;  // its result is operand 0's shape
  if (producer.opcode() != Opcode::kFusion || producer.called_computation() == nullptr) {
    return false;
  }
  const Shape& in = producer.operand(operand)->shape();
  if (in.is_tuple() || output.dims() != in.dims() ||
      ir::DTypeBytes(output.dtype()) != ir::DTypeBytes(in.dtype())) {
    return false;
  }
  std::vector<Instruction*> fused_params = producer.called_computation()->parameters();
  if (operand >= static_cast<int64_t>(fused_params.size()) || fused_params[operand] == nullptr) {
    return false;
  }
  const Instruction* param = fused_params[operand];
  // One output of the operand's shape: a kernel stores each output as soon as
  // it has computed it, and a second output would read the element again
  // after the first overwrote it.
  std::vector<Shape> outputs;
  CollectLeaves(producer.shape(), outputs);
  if (std::count_if(outputs.begin(), outputs.end(),
                    [&](const Shape& o) { return o.dims() == in.dims(); }) != 1) {
    return false;
  }
  switch (producer.attrs().fusion_kind) {
    case ir::FusionKind::kLoop:
      return outputs.size() == 1 && ReadAtItsIndex(param, /*rows=*/false);
    case ir::FusionKind::kReduction:
    case ir::FusionKind::kCrossEntropy:
      return AllRowReductions(*producer.called_computation()) &&
             ReadAtItsIndex(param, /*rows=*/true);
    default:
      return false;
  }
}

std::string BufferName(const BufferAssignment::Buffer& b) {
  if (b.defining->shape().is_tuple()) return fmt::format("%{}{{{}}}", b.defining->name(), b.leaf);
  return "%" + b.defining->name();
}

std::string BufferKind(const BufferAssignment::Buffer& b) {
  std::string kind;
  if (b.parameter >= 0) kind = fmt::format("parameter {}", b.parameter);
  for (int64_t o : b.outputs) kind += fmt::format("{}output {}", kind.empty() ? "" : ", ", o);
  if (kind.empty()) kind = "temp";
  if (b.donated_from != nullptr) kind += fmt::format(" (in place: %{})", b.donated_from->name());
  return kind;
}

}  // namespace

namespace {

// Note [aliases], with the all-reduces of `in_place` aliasing their operand.
LogicalBuffers BuildLogicalBuffers(const ir::Computation& computation,
                                   const std::unordered_set<const Instruction*>& in_place) {
  LogicalBuffers lb;
  for (const auto& owned : computation.instructions()) {
    const Instruction* inst = owned.get();
    std::vector<int64_t>& leaves = lb.leaf_buffers[inst];
    switch (inst->opcode()) {
      case Opcode::kTuple:
        for (const Instruction* op : inst->operands()) {
          const std::vector<int64_t>& op_leaves = lb.leaf_buffers.at(op);
          leaves.insert(leaves.end(), op_leaves.begin(), op_leaves.end());
        }
        continue;
      case Opcode::kGetTupleElement: {
        const Shape& tuple = inst->operand(0)->shape();
        int64_t first = 0;
        for (int64_t i = 0; i < inst->attrs().index; ++i) {
          first += LeafCount(tuple.tuple_elements()[i]);
        }
        const std::vector<int64_t>& op_leaves = lb.leaf_buffers.at(inst->operand(0));
        leaves.assign(op_leaves.begin() + first,
                      op_leaves.begin() + first + LeafCount(inst->shape()));
        continue;
      }
      case Opcode::kReshape:
        leaves = lb.leaf_buffers.at(inst->operand(0));
        continue;
      case Opcode::kAllReduce:
        if (in_place.contains(inst)) {
          leaves = lb.leaf_buffers.at(inst->operand(0));
          continue;
        }
        break;
      default:
        break;
    }
    std::vector<Shape> shapes;
    CollectLeaves(inst->shape(), shapes);
    for (size_t leaf = 0; leaf < shapes.size(); ++leaf) {
      leaves.push_back(static_cast<int64_t>(lb.buffers.size()));
      lb.buffers.push_back(
          {inst, static_cast<int64_t>(leaf), shapes[leaf], shapes[leaf].byte_size()});
    }
  }
  return lb;
}

// The all-reduces that may work in place (Note [in-place all-reduce]): the
// operand's buffer is read by nothing else, is no parameter and no output.
std::unordered_set<const Instruction*> InPlaceAllReduces(const ir::Computation& computation,
                                                         const LogicalBuffers& lb) {
  std::unordered_set<const Instruction*> candidates;
  for (const auto& inst : computation.instructions()) {
    if (inst->opcode() == Opcode::kAllReduce) candidates.insert(inst.get());
  }
  if (candidates.empty()) return candidates;
  // readers[b]: the instructions that read buffer b (through any alias); the
  // root tuple counts as a reader (the caller reads the outputs).
  std::unordered_map<int64_t, std::unordered_set<const Instruction*>> readers;
  for (const auto& inst : computation.instructions()) {
    const Opcode op = inst->opcode();
    const bool alias =
        op == Opcode::kTuple || op == Opcode::kGetTupleElement || op == Opcode::kReshape;
    if (alias && inst.get() != computation.root()) continue;
    for (const Instruction* operand : inst->operands()) {
      for (int64_t b : lb.leaf_buffers.at(operand)) readers[b].insert(inst.get());
    }
  }
  std::unordered_set<const Instruction*> in_place;
  for (const Instruction* ar : candidates) {
    const std::vector<int64_t>& leaves = lb.leaf_buffers.at(ar->operand(0));
    if (leaves.size() != 1) continue;
    const Instruction* def = lb.buffers[leaves[0]].defining;
    if (def->opcode() == Opcode::kParameter || def->opcode() == Opcode::kConstant) continue;
    const auto& r = readers[leaves[0]];
    if (r.size() == 1 && r.contains(ar)) in_place.insert(ar);
  }
  return in_place;
}

}  // namespace

LogicalBuffers ComputeLogicalBuffers(const ir::Computation& computation) {
  LogicalBuffers lb = BuildLogicalBuffers(computation, {});
  std::unordered_set<const Instruction*> in_place = InPlaceAllReduces(computation, lb);
  if (in_place.empty()) return lb;
  return BuildLogicalBuffers(computation, in_place);
}

std::vector<LiveRange> ComputeLiveRanges(const ir::Computation& computation,
                                         const LogicalBuffers& buffers,
                                         const std::vector<const Instruction*>& order) {
  std::unordered_map<const Instruction*, int64_t> time;
  for (size_t t = 0; t < order.size(); ++t) time[order[t]] = static_cast<int64_t>(t);
  const int64_t end = static_cast<int64_t>(order.size());
  std::vector<int64_t> last = LastReads(buffers, time, order);
  std::vector<LiveRange> ranges(buffers.buffers.size());
  for (size_t b = 0; b < ranges.size(); ++b) {
    const Instruction* def = buffers.buffers[b].defining;
    ranges[b] =
        def->opcode() == Opcode::kParameter ? LiveRange{0, end} : LiveRange{time.at(def), last[b]};
  }
  for (int64_t b : buffers.leaf_buffers.at(computation.root())) ranges[b].end = end;
  // Note [in-place all-reduce]: an all-reduce that is not in place keeps its
  // operand until its own result's last reader; so do reduce-scatter and
  // all-gather, which never work in place.
  for (const auto& inst : computation.instructions()) {
    if (!ir::IsCollective(inst->opcode())) continue;
    const std::vector<int64_t>& in = buffers.leaf_buffers.at(inst->operand(0));
    const std::vector<int64_t>& out = buffers.leaf_buffers.at(inst.get());
    if (in == out) continue;
    for (int64_t b : in) {
      for (int64_t o : out) ranges[b].end = std::max(ranges[b].end, ranges[o].end);
    }
  }
  return ranges;
}

namespace {
// The peak of aligned live bytes and the first time it is reached.
std::pair<int64_t, int64_t> Peak(const std::vector<int64_t>& bytes,
                                 const std::vector<LiveRange>& ranges) {
  int64_t horizon = 0;
  for (const LiveRange& r : ranges) horizon = std::max(horizon, r.end + 2);
  std::vector<int64_t> delta(horizon + 1, 0);
  for (size_t b = 0; b < ranges.size(); ++b) {
    delta[ranges[b].start] += AlignUp(bytes[b]);
    delta[ranges[b].end + 1] -= AlignUp(bytes[b]);
  }
  int64_t live = 0, peak = 0, peak_time = 0;
  for (int64_t t = 0; t < horizon; ++t) {
    live += delta[t];
    if (live > peak) {
      peak = live;
      peak_time = t;
    }
  }
  return {peak, peak_time};
}
}  // namespace

int64_t PeakLiveBytes(const LogicalBuffers& buffers, const std::vector<LiveRange>& ranges) {
  std::vector<int64_t> bytes;
  for (const LogicalBuffers::Buffer& b : buffers.buffers) bytes.push_back(b.bytes);
  return Peak(bytes, ranges).first;
}

namespace {

// Note [in-place temporaries]: each fusion output that may overwrite an
// operand buffer dying at the fusion (a temporary of the same bytes, neither
// parameter nor output) takes that buffer, in instruction order, so a chain
// of fusions can pass one buffer along; it then lives until the output's last
// reader.
void ShareDyingOperands(const ir::Computation& entry, const LogicalBuffers& lb,
                        const std::unordered_map<const Instruction*, int64_t>& time,
                        std::vector<BufferAssignment::Buffer>& all,
                        std::vector<int64_t>& merged_into) {
  auto temporary = [&](int64_t b) { return all[b].parameter < 0 && all[b].outputs.empty(); };
  for (const auto& owned : entry.instructions()) {
    const Instruction* producer = owned.get();
    if (producer->opcode() != Opcode::kFusion && producer->opcode() != Opcode::kScatterAdd) {
      continue;
    }
    const int64_t t = time.at(producer);
    // The buffer (after earlier sharing) each operand reads, and how many read it.
    std::vector<int64_t> reads;
    std::map<int64_t, int> readers;
    for (const Instruction* op : producer->operands()) {
      const std::vector<int64_t>& leaves = lb.leaf_buffers.at(op);
      reads.push_back(leaves.size() == 1 ? merged_into[leaves[0]] : -1);
      for (int64_t b : leaves) ++readers[merged_into[b]];
    }
    for (int64_t out : lb.leaf_buffers.at(producer)) {
      if (lb.buffers[out].defining != producer || merged_into[out] != out || !temporary(out)) {
        continue;
      }
      for (int64_t i = 0; i < producer->operand_count(); ++i) {
        const int64_t r = reads[i];
        // Read by this operand alone: another one would read it after the overwrite.
        if (r < 0 || readers[r] != 1 || !temporary(r) || all[r].live.end != t ||
            all[r].bytes != all[out].bytes || !MayOverwriteOperand(*producer, i, all[out].shape)) {
          continue;
        }
        merged_into[out] = r;
        all[r].live.end = all[out].live.end;
        all[r].donated_from = producer;
        ++readers[r];  // taken: a second output cannot share it too
        break;
      }
    }
  }
}

// Best fit, largest first: each buffer takes the smallest gap between the
// buffers already placed whose live ranges overlap its own and the reserved
// ranges (lowest offset on ties), else goes above them. Parameters with a
// fixed offset are placed first. Sorting by (size, start, id) keeps it
// deterministic. Sets every buffer's slice; returns the arena's size, which
// covers the reserved ranges.
int64_t PlaceBestFit(std::vector<BufferAssignment::Buffer>& buffers,
                     const BufferAssignmentOptions& options) {
  std::vector<int64_t> placed, by_size;
  int64_t arena = 0;
  // Merged once: a host's parameters and moments are mostly adjacent.
  std::vector<std::pair<int64_t, int64_t>> reserved;
  std::vector<std::pair<int64_t, int64_t>> sorted = options.reserved;
  std::sort(sorted.begin(), sorted.end());
  for (auto [begin, end] : sorted) {
    if (!reserved.empty() && begin <= reserved.back().second) {
      reserved.back().second = std::max(reserved.back().second, end);
    } else if (end > begin) {
      reserved.emplace_back(begin, end);
    }
    arena = std::max(arena, end);
  }
  for (size_t b = 0; b < buffers.size(); ++b) {
    BufferAssignment::Buffer& buf = buffers[b];
    auto fixed = options.parameter_offsets.find(buf.parameter);
    if (buf.parameter < 0 || fixed == options.parameter_offsets.end()) {
      by_size.push_back(static_cast<int64_t>(b));
      continue;
    }
    buf.slice = {0, fixed->second, buf.bytes};
    arena = std::max(arena, fixed->second + AlignUp(buf.bytes));
    placed.push_back(static_cast<int64_t>(b));
  }
  std::sort(by_size.begin(), by_size.end(), [&](int64_t a, int64_t b) {
    const auto& x = buffers[a];
    const auto& y = buffers[b];
    if (AlignUp(x.bytes) != AlignUp(y.bytes)) return AlignUp(x.bytes) > AlignUp(y.bytes);
    if (x.live.start != y.live.start) return x.live.start < y.live.start;
    return a < b;
  });
  std::vector<std::pair<int64_t, int64_t>> taken;  // [begin, end) of overlapping buffers
  for (int64_t b : by_size) {
    BufferAssignment::Buffer& buf = buffers[b];
    const int64_t size = AlignUp(buf.bytes);
    buf.slice = {0, 0, buf.bytes};
    if (size == 0) continue;
    taken = reserved;
    for (int64_t other : placed) {
      if (buffers[other].live.Overlaps(buf.live)) {
        taken.emplace_back(buffers[other].slice.offset,
                           buffers[other].slice.offset + AlignUp(buffers[other].bytes));
      }
    }
    std::sort(taken.begin(), taken.end());
    int64_t best = -1, best_gap = 0, cursor = 0;
    for (const auto& [begin, end] : taken) {
      const int64_t gap = begin - cursor;
      if (gap >= size && (best < 0 || gap < best_gap)) {
        best = cursor;
        best_gap = gap;
      }
      cursor = std::max(cursor, end);
    }
    buf.slice.offset = best >= 0 ? best : cursor;
    arena = std::max(arena, buf.slice.offset + size);
    placed.push_back(b);
  }
  return arena;
}

// Note [donated buffers]: why output buffer `out_buffer` cannot take the
// donated parameter's buffer `param_buffer` in place ("" when it can).
std::string WhyNotInPlace(const std::vector<BufferAssignment::Buffer>& all, int64_t out_buffer,
                          int64_t param_buffer, const std::vector<int64_t>& merged_into,
                          const std::vector<int64_t>& last_read,
                          const std::unordered_map<const Instruction*, int64_t>& time,
                          const std::vector<const Instruction*>& order, const LogicalBuffers& lb) {
  const BufferAssignment::Buffer& out = all[out_buffer];
  const BufferAssignment::Buffer& param = all[param_buffer];
  const Instruction& producer = *out.defining;
  std::string reason;
  if (out.parameter >= 0) {
    reason = fmt::format("the output is parameter {}", out.parameter);
  } else if (merged_into[out_buffer] != out_buffer) {
    reason = "the output already updates another parameter in place";
  } else if (out.bytes != param.bytes) {
    reason = fmt::format("the output has {} bytes, the parameter {}", out.bytes, param.bytes);
  } else if (!param.outputs.empty()) {
    reason = fmt::format("the parameter is also output {}", param.outputs[0]);
  } else if (last_read[param_buffer] > time.at(&producer)) {
    reason = fmt::format("%{} reads the parameter after %{} writes it",
                         order[last_read[param_buffer]]->name(), producer.name());
  } else if (last_read[param_buffer] == time.at(&producer) &&
             !ReadsElementwiseInPlace(producer, param_buffer, lb, out.shape, param.shape)) {
    reason = fmt::format("%{} reads the parameter other than elementwise", producer.name());
  }
  return reason;
}

}  // namespace

namespace {

// The entry's logical buffers as unmerged buffers: their live ranges, and the
// entry outputs each holds.
std::vector<BufferAssignment::Buffer> InitialBuffers(const LogicalBuffers& lb,
                                                     const std::vector<LiveRange>& ranges,
                                                     const std::vector<int64_t>& root_leaves) {
  std::vector<BufferAssignment::Buffer> all(lb.buffers.size());
  for (size_t b = 0; b < all.size(); ++b) {
    const LogicalBuffers::Buffer& logical = lb.buffers[b];
    all[b].defining = logical.defining;
    all[b].leaf = logical.leaf;
    all[b].shape = logical.shape;
    all[b].bytes = logical.bytes;
    all[b].live = ranges[b];
    if (logical.defining->opcode() == Opcode::kParameter) {
      all[b].parameter = logical.defining->attrs().index;
    }
  }
  for (size_t k = 0; k < root_leaves.size(); ++k) {
    all[root_leaves[k]].outputs.push_back(static_cast<int64_t>(k));
  }
  return all;
}

// Note [donated buffers]: the options name existing, array parameters, each
// updated by at most one of the `outputs` entry outputs, and only donated
// ones.
Status CheckDonations(const BufferAssignmentOptions& options, const ir::Computation& entry,
                      size_t outputs) {
  const std::vector<Instruction*> params = entry.parameters();
  for (int64_t p : options.donated_parameters) {
    if (p < 0 || p >= static_cast<int64_t>(params.size()) || params[p] == nullptr) {
      return Error("buffer assignment: donated parameter {} does not exist in %{}", p,
                   entry.name());
    }
  }
  std::set<int64_t> updated_params;
  for (auto [output, p] : options.output_to_parameter) {
    if (output < 0 || output >= static_cast<int64_t>(outputs)) {
      return Error("buffer assignment: output {} out of range ({} outputs)", output, outputs);
    }
    if (!options.donated_parameters.contains(p)) {
      return Error("buffer assignment: output {} updates parameter {}, which is not donated",
                   output, p);
    }
    if (params[p]->shape().is_tuple()) {
      return Error("buffer assignment: donated parameter {} (%{}) is a tuple", p,
                   params[p]->name());
    }
    if (!updated_params.insert(p).second) {
      return Error("buffer assignment: parameter {} is updated by two outputs", p);
    }
  }
  for (auto [p, offset] : options.parameter_offsets) {
    if (p < 0 || p >= static_cast<int64_t>(params.size()) || params[p] == nullptr ||
        params[p]->shape().is_tuple() || options.donated_parameters.contains(p)) {
      return Error(
          "buffer assignment: parameter {} of %{} cannot take a fixed offset (it must exist, be "
          "an array and not be donated)",
          p, entry.name());
    }
    if (offset < 0 || offset % kBufferAlignment != 0) {
      return Error("buffer assignment: parameter {}'s fixed offset {} is not {}-byte aligned", p,
                   offset, kBufferAlignment);
    }
  }
  for (auto [begin, end] : options.reserved) {
    if (begin < 0 || end < begin) {
      return Error("buffer assignment: reserved range [{}, {}) is empty or negative", begin, end);
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<BufferAssignment> AssignBuffers(const ir::Module& module,
                                         const BufferAssignmentOptions& options) {
  const ir::Computation* entry = module.entry();
  if (entry == nullptr) return Error("buffer assignment: module {} has no entry", module.name());
  BufferAssignment result;
  result.computation_name_ = entry->name();
  for (const auto& inst : entry->instructions()) result.order_.push_back(inst.get());
  const std::vector<const Instruction*>& order = result.order_;
  std::unordered_map<const Instruction*, int64_t> time;
  for (size_t t = 0; t < order.size(); ++t) time[order[t]] = static_cast<int64_t>(t);

  const LogicalBuffers lb = ComputeLogicalBuffers(*entry);
  std::vector<LiveRange> ranges = ComputeLiveRanges(*entry, lb, order);
  const std::vector<int64_t> last_read = LastReads(lb, time, order);
  const std::vector<int64_t>& root_leaves = lb.leaf_buffers.at(entry->root());
  const std::vector<Instruction*> params = entry->parameters();

  std::vector<BufferAssignment::Buffer> all = InitialBuffers(lb, ranges, root_leaves);

  // Note [donated buffers]: check the options, then share slices where safe.
  RETURN_IF_ERROR(CheckDonations(options, *entry, root_leaves.size()));
  std::vector<int64_t> merged_into(all.size());
  std::iota(merged_into.begin(), merged_into.end(), 0);
  std::set<int64_t> copied_params;
  for (auto [output, p] : options.output_to_parameter) {
    const int64_t param_buffer = lb.leaf_buffers.at(params[p])[0];
    const int64_t out_buffer = root_leaves[output];
    if (out_buffer == param_buffer) continue;  // returned unchanged: already in place
    const Instruction& producer = *all[out_buffer].defining;
    std::string reason =
        WhyNotInPlace(all, out_buffer, param_buffer, merged_into, last_read, time, order, lb);
    if (!reason.empty()) {
      result.copies_.push_back({output, p, std::move(reason)});
      copied_params.insert(p);
      continue;
    }
    merged_into[out_buffer] = param_buffer;
    all[param_buffer].donated_from = &producer;
    const std::vector<int64_t>& outs = all[out_buffer].outputs;
    all[param_buffer].outputs.insert(all[param_buffer].outputs.end(), outs.begin(), outs.end());
  }
  ShareDyingOperands(*entry, lb, time, all, merged_into);
  // A donated parameter nothing writes back into is dead after its last reader
  // (unless it is an output, or a reported copy goes back into it after the step).
  for (int64_t p : options.donated_parameters) {
    if (params[p]->shape().is_tuple()) continue;
    const int64_t b = lb.leaf_buffers.at(params[p])[0];
    if (all[b].donated_from == nullptr && all[b].outputs.empty() && !copied_params.contains(p)) {
      all[b].live.end = last_read[b];
    }
  }

  // Keep the buffers that were not merged, renumbered in definition order.
  std::vector<int64_t> new_id(all.size(), -1);
  for (size_t b = 0; b < all.size(); ++b) {
    if (merged_into[b] != static_cast<int64_t>(b)) continue;
    new_id[b] = static_cast<int64_t>(result.buffers_.size());
    all[b].id = new_id[b];
    result.buffers_.push_back(std::move(all[b]));
  }
  for (const auto& [inst, leaves] : lb.leaf_buffers) {
    std::vector<int64_t>& mapped = result.leaf_buffers_[inst];
    for (int64_t b : leaves) mapped.push_back(new_id[merged_into[b]]);
  }

  const int64_t arena = PlaceBestFit(result.buffers_, options);
  result.allocations_ = {Allocation{0, arena}};

  std::vector<int64_t> bytes;
  std::vector<LiveRange> final_ranges;
  for (const auto& buf : result.buffers_) {
    bytes.push_back(buf.bytes);
    final_ranges.push_back(buf.live);
  }
  std::tie(result.peak_bytes_, result.peak_time_) = Peak(bytes, final_ranges);
  return result;
}

const BufferAssignment::Buffer* BufferAssignment::GetBuffer(const ir::Instruction* inst,
                                                            int64_t leaf) const {
  auto it = leaf_buffers_.find(inst);
  if (it == leaf_buffers_.end() || leaf < 0 || leaf >= static_cast<int64_t>(it->second.size())) {
    return nullptr;
  }
  return &buffers_[it->second[leaf]];
}

StatusOr<Slice> BufferAssignment::GetSlice(const ir::Instruction* inst, int64_t leaf) const {
  const Buffer* buffer = GetBuffer(inst, leaf);
  if (buffer == nullptr) {
    return Error("buffer assignment: %{} leaf {} has no buffer in %{}",
                 inst == nullptr ? "<null>" : inst->name(), leaf, computation_name_);
  }
  return buffer->slice;
}

StatusOr<std::vector<Slice>> BufferAssignment::GetSlices(const ir::Instruction* inst) const {
  auto it = leaf_buffers_.find(inst);
  if (it == leaf_buffers_.end()) {
    return Error("buffer assignment: %{} is not an instruction of %{}",
                 inst == nullptr ? "<null>" : inst->name(), computation_name_);
  }
  std::vector<Slice> slices;
  for (int64_t b : it->second) slices.push_back(buffers_[b].slice);
  return slices;
}

std::string BufferAssignment::ToString() const {
  std::string out =
      fmt::format("buffer assignment of %{}: {} buffers, arena {} B, peak {} B at time {}",
                  computation_name_, buffers_.size(), arena_size(), peak_bytes_, peak_time_);
  if (peak_time_ < static_cast<int64_t>(order_.size())) {
    out += fmt::format(" (%{})", order_[peak_time_]->name());
  }
  out += "\n";
  for (const Allocation& a : allocations_) {
    out += fmt::format("allocation {}: size={}\n", a.index, a.size);
  }
  for (const Buffer& b : buffers_) {
    out += fmt::format("{} {} offset={} size={} live=[{},{}] {}", BufferName(b), b.shape.ToString(),
                       b.slice.offset, b.slice.size, b.live.start, b.live.end, BufferKind(b));
    if (!b.defining->metadata().empty()) out += fmt::format(" meta=\"{}\"", b.defining->metadata());
    out += "\n";
  }
  for (const DonationCopy& c : copies_) {
    out += fmt::format("copy: output {} -> parameter {}: {}\n", c.output, c.parameter, c.reason);
  }
  return out;
}

std::string BufferAssignment::MemoryReport(int top_n, const std::string& title) const {
  std::string out = title.empty() ? fmt::format("memory report for %{}\n", computation_name_)
                                  : fmt::format("memory report for {} (computation %{})\n", title,
                                                computation_name_);
  out += fmt::format("arena size: {} ({} B)\n", FormatBytes(arena_size(), 1), arena_size());
  std::string at;
  if (peak_time_ < static_cast<int64_t>(order_.size())) {
    at = fmt::format(", running %{}", order_[peak_time_]->name());
  }
  out += fmt::format("peak live:  {} ({} B) at time {}{}\n", FormatBytes(peak_bytes_, 1),
                     peak_bytes_, peak_time_, at);
  int64_t param_bytes = 0, temp_bytes = 0;
  for (const Buffer& b : buffers_) (b.parameter >= 0 ? param_bytes : temp_bytes) += b.bytes;
  out += fmt::format("buffers: {} (parameters {}, others {} before reuse), copies after step: {}\n",
                     buffers_.size(), FormatBytes(param_bytes, 1), FormatBytes(temp_bytes, 1),
                     copies_.size());
  std::vector<const Buffer*> live;
  for (const Buffer& b : buffers_) {
    if (b.live.start <= peak_time_ && peak_time_ <= b.live.end && b.bytes > 0) live.push_back(&b);
  }
  std::sort(live.begin(), live.end(), [](const Buffer* a, const Buffer* b) {
    return a->bytes != b->bytes ? a->bytes > b->bytes : a->id < b->id;
  });
  if (static_cast<int64_t>(live.size()) > top_n) live.resize(std::max(top_n, 0));
  out += fmt::format("largest {} buffers live at the peak:\n", live.size());
  out += fmt::format("  {:>3}  {:>10}  {:<20} {:<24} {:<14} {:<24} {}\n", "#", "bytes", "shape",
                     "buffer", "live", "kind", "meta");
  for (size_t i = 0; i < live.size(); ++i) {
    const Buffer& b = *live[i];
    out += fmt::format("  {:>3}  {:>10}  {:<20} {:<24} {:<14} {:<24} {}\n", i + 1,
                       FormatBytes(b.bytes, 1), b.shape.ToString(), BufferName(b),
                       fmt::format("[{},{}]", b.live.start, b.live.end), BufferKind(b),
                       b.defining->metadata().empty() ? "-" : b.defining->metadata());
  }
  return out;
}

BufferAssignmentOptions DonationOptions(const program::EntrySignature& signature) {
  BufferAssignmentOptions options;
  for (auto [output, input] : signature.donations) {
    options.donated_parameters.insert(input);
    options.output_to_parameter[output] = input;
  }
  return options;
}

}  // namespace gptc::analysis
