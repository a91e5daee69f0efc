#include "compiler/codegen/row_reduction_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <utility>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"  // Describe, StorageBytes

namespace gptc::codegen {
namespace {

constexpr int64_t kWarp = 32;
constexpr int64_t kWarpRowsPerBlock = 8;
// Note [row cache]: at most this much of a row in shared memory, so that two
// blocks of it fit on a multiprocessor (228 KiB).
constexpr int64_t kMaxRowCacheBytes = 112 * 1024;
// Note [unrolled warp rows]: at most this many row elements a lane (over the
// row-shaped parameters the passes read) are held in registers.
constexpr int64_t kMaxUnrolledElements = 48;
// Note [column cache]: at most this much of a block's shared memory holds
// column parameters, and at most this many blocks (eight for each of an
// H100's 132 multiprocessors) stride over the row groups.
constexpr int64_t kMaxColumnCacheBytes = 24 * 1024;
constexpr int64_t kColumnCacheGrid = 8 * 132;

using SameMemo = std::map<std::pair<const ir::Instruction*, const ir::Instruction*>, bool>;

// Whether `a` and `b` compute the same values (Note [duplicate reduces]):
// the same instruction once decomposition parameters are bound (and
// duplicates mapped to their first twin), or the same opcode, shape and
// attributes over operands that are. Composites and parameters only match
// themselves.
bool SameValue(const ir::Instruction* a, const ir::Instruction* b,
               const ir::CompositeBindings& bindings, SameMemo& memo) {
  for (auto it = bindings.find(a); it != bindings.end(); it = bindings.find(a)) a = it->second;
  for (auto it = bindings.find(b); it != bindings.end(); it = bindings.find(b)) b = it->second;
  if (a == b) return true;
  if (a->opcode() != b->opcode() || a->opcode() == ir::Opcode::kParameter ||
      a->called_computation() != nullptr || b->called_computation() != nullptr ||
      a->shape() != b->shape() || !(a->attrs() == b->attrs()) ||
      a->operand_count() != b->operand_count()) {
    return false;
  }
  if (auto it = memo.find({a, b}); it != memo.end()) return it->second;
  bool same = true;
  for (int64_t i = 0; same && i < a->operand_count(); ++i) {
    same = SameValue(a->operand(i), b->operand(i), bindings, memo);
  }
  memo[{a, b}] = same;
  return same;
}

// The row reduces of `fused` (with `mixed`, only those: Note [mixed row and
// column reductions]) into plan.reduces, and their common input dims.
Status CollectReduces(const ir::Instruction& fusion, const ir::Computation& fused, bool mixed,
                      RowReductionPlan& plan) {
  for (const ir::Instruction* inst : FusionReduces(fused)) {
    if (mixed && !ir::IsRowReduce(*inst)) continue;
    const ir::Shape& in = inst->operand(0)->shape();
    if (in.rank() == 0 || inst->attrs().dimensions != std::vector<int64_t>{in.rank() - 1}) {
      return Error(
          "%{}: {} reduces dims {} of {}: only row reductions (over the last dim) are "
          "supported yet",
          fusion.name(), Describe(*inst), ir::DimsToString(inst->attrs().dimensions),
          in.ToString());
    }
    if (!ir::IsFloat(in.dtype()) || !ir::IsFloat(inst->shape().dtype())) {
      return Error("%{}: {}: only floating-point reductions are supported", fusion.name(),
                   Describe(*inst));
    }
    if (!plan.input_dims.empty() && in.dims() != plan.input_dims) {
      return Error("%{}: {} reduces {} but an earlier reduce reduces dims {}", fusion.name(),
                   Describe(*inst), in.ToString(), ir::DimsToString(plan.input_dims));
    }
    plan.input_dims = in.dims();
    plan.reduces.push_back(inst);
  }
  if (plan.reduces.empty()) {
    return Error("%{}: reduction fusion without a reduce", fusion.name());
  }
  return Status::Ok();
}

// Note [duplicate reduces]: a reduce computing what an earlier one does (the
// cross-entropy gradient's max and sum of the rematerialized logits, the
// loss's own) reads the earlier one's result; binding it to its twin also
// makes DependsOnAny and later comparisons see through it.
void DropDuplicateReduces(RowReductionPlan& plan) {
  SameMemo memo;
  std::vector<const ir::Instruction*> unique;
  for (const ir::Instruction* r : plan.reduces) {
    const ir::Instruction* twin = nullptr;
    for (const ir::Instruction* u : unique) {
      if (u->shape() == r->shape() && u->attrs() == r->attrs() &&
          SameValue(u->operand(0), r->operand(0), plan.bindings, memo)) {
        twin = u;
        break;
      }
    }
    if (twin == nullptr) {
      unique.push_back(r);
      continue;
    }
    plan.bindings[r] = twin;
    memo.clear();  // earlier answers did not see r as its twin
  }
  plan.reduces = std::move(unique);
}

// Splits the outputs (but the column part's, `skip_output`) into those
// shaped like the input and those shaped like a row.
Status SortOutputs(const ir::Instruction& fusion, const ir::Computation& fused,
                   const std::vector<bool>& skip_output, RowReductionPlan& plan) {
  const std::vector<const ir::Instruction*> outputs = FusionOutputs(fused);
  const size_t num_params = fused.parameters().size();
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (skip_output[o]) continue;
    const ir::Shape& s = outputs[o]->shape();
    int64_t slot = static_cast<int64_t>(num_params + o);
    if (!s.is_tuple() && s.dims() == plan.input_dims) {
      plan.elem_outputs.push_back(outputs[o]);
      plan.elem_slots.push_back(slot);
    } else if (!s.is_tuple() && s.dims() == plan.row_dims) {
      plan.row_outputs.push_back(outputs[o]);
      plan.row_slots.push_back(slot);
    } else {
      return Error("%{}: output {} has shape {}; a row reduction writes {} or {}", fusion.name(),
                   Describe(*outputs[o]), s.ToString(), ir::DimsToString(plan.input_dims),
                   ir::DimsToString(plan.row_dims));
    }
  }
  return Status::Ok();
}

// Batches of mutually independent reduces, in order.
void BatchReduces(RowReductionPlan& plan) {
  std::set<const ir::Instruction*> current;
  for (const ir::Instruction* r : plan.reduces) {
    std::map<const ir::Instruction*, bool> memo;
    if (!plan.batches.empty() && !ir::DependsOnAny(r->operand(0), current, memo, &plan.bindings)) {
      plan.batches.back().push_back(r);
    } else {
      plan.batches.push_back({r});
    }
    current.insert(r);
    if (plan.batches.back().size() == 1) current = {r};
  }
}

// Note [one-hot reduces]: `r`'s picked value and column when it sums
// select(compare(iota along the row, broadcast of a row value) EQ, v, 0).
std::optional<RowReductionPlan::OneHot> MatchOneHot(const ir::Instruction& r) {
  const ir::Instruction* select = r.operand(0);
  if (r.attrs().reduce_kind != ir::ReduceKind::kSum || select->opcode() != ir::Opcode::kSelect ||
      !ir::IsSplat(select->operand(2), 0.0)) {
    return std::nullopt;
  }
  const ir::Instruction* eq = select->operand(0);
  if (eq->opcode() != ir::Opcode::kCompare || eq->attrs().direction != ir::CompareDirection::kEq) {
    return std::nullopt;
  }
  const int64_t last = select->shape().rank() - 1;
  std::vector<int64_t> rows(last);
  std::iota(rows.begin(), rows.end(), 0);
  for (int64_t side = 0; side < 2; ++side) {
    const ir::Instruction* iota = eq->operand(side);
    const ir::Instruction* column = eq->operand(1 - side);
    if (iota->opcode() == ir::Opcode::kIota && iota->attrs().index == last &&
        column->opcode() == ir::Opcode::kBroadcast && column->attrs().dimensions == rows &&
        ir::IsInteger(column->shape().dtype())) {
      return RowReductionPlan::OneHot{select->operand(1), column->operand(0)};
    }
  }
  return std::nullopt;
}

// The reduces of `batch` a pass over the row accumulates (Note [one-hot
// reduces] only combine the threads' partials).
size_t Accumulated(const RowReductionPlan& plan, const std::vector<const ir::Instruction*>& batch) {
  return std::count_if(batch.begin(), batch.end(),
                       [&](const ir::Instruction* r) { return !plan.one_hot.contains(r); });
}

// Threads, blocks and shared memory (Note [row reduction]).
void PlanGeometry(RowReductionPlan& plan) {
  size_t max_batch = 0;
  for (const auto& batch : plan.batches) max_batch = std::max(max_batch, batch.size());
  const int64_t n = plan.n, rows = plan.rows;
  plan.threads_per_row = n <= 1024 ? kWarp : (n <= 4096 ? 256 : 512);
  plan.rows_per_block = plan.threads_per_row == kWarp ? std::min(kWarpRowsPerBlock, rows) : 1;
  plan.block = plan.threads_per_row * plan.rows_per_block;
  plan.row_groups = (rows + plan.rows_per_block - 1) / plan.rows_per_block;
  plan.grid = plan.row_groups;
  plan.warps_per_row = plan.threads_per_row / kWarp;
  plan.shared_floats =
      plan.warps_per_row > 1 ? static_cast<int64_t>(max_batch) * plan.warps_per_row : 0;
  plan.wide = rows * n + plan.threads_per_row >= std::numeric_limits<int32_t>::max();
}

// Note [row cache]: which row-shaped parameters a block keeps in shared
// memory, where, and how each is copied there.
void PlanRowCache(const ir::Computation& fused, bool mixed, RowReductionPlan& plan) {
  for (const ir::Instruction* p : fused.parameters()) {
    if (!p->shape().is_tuple() && p->shape().num_elements() == plan.rows * plan.n) {
      plan.row_params.push_back(p);
    }
  }
  size_t passes = plan.elem_outputs.empty() ? 0 : 1;
  for (const auto& batch : plan.batches) passes += Accumulated(plan, batch) > 0 ? 1 : 0;
  if (plan.threads_per_row > kWarp && !mixed && passes > 1) {
    for (const ir::Instruction* p : plan.row_params) {
      const int64_t bytes = (plan.n * StorageBytes(p->shape().dtype()) + 15) / 16 * 16;
      if (plan.cache_bytes + bytes > kMaxRowCacheBytes) continue;
      plan.cached[p] = plan.cache_bytes;
      plan.cache_bytes += bytes;
    }
  }
  // Rows of whole 16-byte vectors are copied a vector a thread (rows start
  // 16-byte aligned when they are: buffers are); other rows an element at a
  // time.
  for (const auto& [p, offset] : plan.cached) {
    const bool whole_vectors = (plan.n * StorageBytes(p->shape().dtype())) % 16 == 0;
    (whole_vectors ? plan.cached_by_vector : plan.cached_by_element).push_back(p);
  }
}

// Note [column cache]: the parameters of one row's elements that a block
// of several warp rows keeps in shared memory, and the capped grid.
void PlanColumnCache(const ir::Computation& fused, RowReductionPlan& plan) {
  if (plan.threads_per_row != kWarp || plan.rows_per_block < 2) return;
  int64_t bytes = plan.cache_bytes;
  for (const ir::Instruction* p : fused.parameters()) {
    const ir::Shape& s = p->shape();
    if (s.is_tuple() || s.rank() == 0 || s.dims().back() != plan.n || s.num_elements() != plan.n) {
      continue;
    }
    const int64_t size = (plan.n * StorageBytes(s.dtype()) + 15) / 16 * 16;
    if (bytes + size - plan.cache_bytes > kMaxColumnCacheBytes) continue;
    plan.column_cached[p] = bytes;
    bytes += size;
  }
  if (plan.column_cached.empty()) return;
  plan.cache_bytes = bytes;
  plan.grid = std::min(plan.row_groups, kColumnCacheGrid);
}

// Note [unrolled warp rows]: the row parameters a pass over the row reads,
// which the unrolled row holds in registers from that pass to the stores;
// those only the outputs read are loaded where the outputs are stored.
int64_t ReducedRowParameters(const RowReductionPlan& plan) {
  int64_t count = 0;
  for (const ir::Instruction* p : plan.row_params) {
    std::map<const ir::Instruction*, bool> memo;
    for (const ir::Instruction* r : plan.reduces) {
      if (!plan.one_hot.contains(r) && ir::DependsOnAny(r->operand(0), {p}, memo, &plan.bindings)) {
        ++count;
        break;
      }
    }
  }
  return count;
}

// Note [row vectors]: 16 bytes of the widest element read or written a
// row at a time, halved until it divides the row (and a lane's unrolled
// columns).
int64_t RowVectorWidth(const RowReductionPlan& plan) {
  int64_t widest = 0;
  for (const ir::Instruction* p : plan.row_params) {
    widest = std::max(widest, StorageBytes(p->shape().dtype()));
  }
  for (const ir::Instruction* o : plan.elem_outputs) {
    widest = std::max(widest, StorageBytes(o->shape().dtype()));
  }
  if (widest == 0) return 1;
  int64_t width = std::min<int64_t>(8, 16 / widest);
  const int64_t per_lane = plan.unrolled_columns > 0 ? plan.unrolled_columns : plan.n;
  while (width > 1 && (plan.n % width != 0 || per_lane % width != 0)) width /= 2;
  return width;
}

// Note [bounded columns]: the first column at which compare `c` (over the
// row's input dims) may be false, when it compares an iota along the row with
// a constant and holds below that column.
std::optional<int64_t> ColumnBound(const ir::Instruction& c, const RowReductionPlan& plan) {
  if (c.opcode() != ir::Opcode::kCompare || c.shape().dims() != plan.input_dims) {
    return std::nullopt;
  }
  const int64_t last = static_cast<int64_t>(plan.input_dims.size()) - 1;
  for (int64_t side = 0; side < 2; ++side) {
    const ir::Instruction* iota = c.operand(side);
    const std::optional<double> k = ir::SplatValue(c.operand(1 - side));
    if (iota->opcode() != ir::Opcode::kIota || iota->attrs().index != last || !k ||
        *k != std::floor(*k)) {
      continue;
    }
    // iota < k (or k > iota): below k; iota <= k (k >= iota): below k + 1.
    const ir::CompareDirection lt =
        side == 0 ? ir::CompareDirection::kLt : ir::CompareDirection::kGt;
    const ir::CompareDirection le =
        side == 0 ? ir::CompareDirection::kLe : ir::CompareDirection::kGe;
    const double bound = c.attrs().direction == lt ? *k : c.attrs().direction == le ? *k + 1 : -1;
    if (bound < 0) return std::nullopt;
    return static_cast<int64_t>(std::min<double>(bound, static_cast<double>(plan.n)));
  }
  return std::nullopt;
}

// Note [bounded columns]: the row's bounded compares (in `fused` and the
// composites' decompositions) and the least of their limits.
void PlanBoundedColumns(const ir::Computation& fused, RowReductionPlan& plan) {
  for (const auto& inst : fused.instructions()) {
    if (inst->opcode() == ir::Opcode::kSoftmaxCrossEntropy && inst->called_computation()) {
      PlanBoundedColumns(*inst->called_computation(), plan);
    }
    if (std::optional<int64_t> bound = ColumnBound(*inst, plan)) {
      plan.bounded.push_back(inst.get());
      plan.column_limit = std::min(plan.column_limit, *bound);
    }
  }
}

}  // namespace

StatusOr<RowReductionPlan> PlanRowReduction(const ir::Instruction& fusion, bool mixed) {
  ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
  std::vector<bool> skip_output(FusionOutputs(*fused).size(), false);  // the column part
  if (mixed) {
    StatusOr<std::vector<bool>> column = MixedReductionColumnPart(*fused);
    if (!column.ok()) return column.status().WithPrefix("%" + fusion.name());
    skip_output = *column;
  }
  RowReductionPlan plan;
  ir::BindComposites(*fused, plan.bindings);
  RETURN_IF_ERROR(CollectReduces(fusion, *fused, mixed, plan));
  DropDuplicateReduces(plan);
  plan.row_dims.assign(plan.input_dims.begin(), plan.input_dims.end() - 1);
  plan.n = plan.input_dims.back();
  plan.rows = ir::Shape(ir::DType::kF32, plan.row_dims).num_elements();
  RETURN_IF_ERROR(SortOutputs(fusion, *fused, skip_output, plan));
  BatchReduces(plan);
  for (const ir::Instruction* r : plan.reduces) {
    if (std::optional<RowReductionPlan::OneHot> pick = MatchOneHot(*r)) plan.one_hot[r] = *pick;
  }
  PlanGeometry(plan);
  PlanRowCache(*fused, mixed, plan);
  PlanColumnCache(*fused, plan);
  if (plan.threads_per_row == kWarp && plan.n % kWarp == 0 &&
      ReducedRowParameters(plan) * (plan.n / kWarp) <= kMaxUnrolledElements) {
    plan.unrolled_columns = plan.n / kWarp;
  }
  plan.width = RowVectorWidth(plan);
  plan.column_limit = plan.n;
  if (plan.unrolled_columns == 0) PlanBoundedColumns(*fused, plan);
  return plan;
}

}  // namespace gptc::codegen
