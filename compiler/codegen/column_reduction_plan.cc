#include "compiler/codegen/column_reduction_plan.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <string>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"  // Describe, StorageBytes
#include "compiler/codegen/loop_plan.h"      // MemberCone
#include "compiler/ir/patterns.h"

namespace gptc::codegen {
namespace {

constexpr int64_t kTileColumns = 32;
constexpr int64_t kMaxBlock = 1024;
constexpr int64_t kMaxStaticSharedFloats = 48 * 1024 / 4;

// Note [when a column reduction splits]
// Measured on an H100 SXM with the emitted kernels, on R x K inputs read by
// two sum reduces (x and x * y, as the layer-norm gain and bias gradients
// do); the table of whole and split times is in docs/PERFORMANCE.md (the
// Notes' measurements). What it shows:
// A block of 1024 threads streams about 72 GB/s of f32 (37 of bf16: the
// loads are narrower), so the whole kernel is bound by its block count until
// about 72 blocks reach the HBM's 2.8 TB/s; the partials kernel reaches
// 2.7 TB/s (f32) whatever the tiles. The split costs a second launch. Hence
// a split needs both:
//  - at most kMaxSplitTiles = 66 column tiles (the whole kernel leaves half
//    the SMs idle; at 72 and 96 tiles it already streams at full speed and
//    the split only adds its launch), and
//  - at least kMinRowsPerWholeThread = 128 rows for each thread of the whole
//    kernel (R >= 128 x 1024 / lanes: 4096 rows of 32 columns, 131072 of a
//    full reduction): less work takes about two launches' time whole, and the
//    second launch eats the gain (2048 x 768 and 65536 x 1 in the table).
// G then gives every partials thread at least 32 rows and the grid about one
// full wave: 1056 blocks of 256 threads (8 a SM). 512 or 1024 threads a
// block (528 or 264 blocks), four waves, or 16 rows a thread measured within
// 5% of that at 16384 rows.
constexpr int64_t kPartialsBlock = 256;
constexpr int64_t kMaxChunks = 1024;
constexpr int64_t kRowsPerPartialThread = 32;
constexpr int64_t kFillBlocks = 132 * 2048 / kPartialsBlock;
constexpr int64_t kMaxSplitTiles = 132 / 2;
constexpr int64_t kMinRowsPerWholeThread = 128;

// Note [member partials]: each class fills the GPU (as a loop kernel's class
// does, Note [member classes] in loop_plan.h) with at least a few vectors a
// thread; the final kernel has a warp for each member, up to a block of 1024.
constexpr int64_t kMaxClassBlocks = 132 * 16;
constexpr int64_t kVectorsPerThread = 4;
constexpr int64_t kWarp = 32;
constexpr int64_t kMaxFinalWarps = kMaxBlock / kWarp;

int64_t NextPowerOfTwo(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool HasRowReduce(const ir::Computation& fused) {
  for (const auto& inst : fused.instructions()) {
    if (inst->opcode() == ir::Opcode::kReduce && ir::IsRowReduce(*inst)) return true;
  }
  return false;
}

struct ColumnReduces {
  std::vector<const ir::Instruction*> reduces;
  std::vector<int64_t> kept_dims;
};

// The column reduces of `fused` (without the row reduces when `mixed`), all
// over leading dims of floats and keeping the same dims.
StatusOr<ColumnReduces> FindColumnReduces(const ir::Instruction& fusion,
                                          const ir::Computation& fused, bool mixed) {
  ColumnReduces out;
  std::optional<std::vector<int64_t>> kept_dims;
  for (const auto& inst : fused.instructions()) {
    if (inst->opcode() != ir::Opcode::kReduce) continue;
    if (mixed && ir::IsRowReduce(*inst)) continue;  // the row kernel's
    const ir::Shape& in = inst->operand(0)->shape();
    const std::vector<int64_t>& dims = inst->attrs().dimensions;
    bool prefix = !dims.empty();
    for (size_t i = 0; i < dims.size(); ++i) prefix = prefix && dims[i] == static_cast<int64_t>(i);
    if (!prefix) {
      return Error("%{}: {} reduces dims {} of {}: a column reduction reduces leading dims",
                   fusion.name(), Describe(*inst), ir::DimsToString(dims), in.ToString());
    }
    if (!ir::IsFloat(in.dtype()) || !ir::IsFloat(inst->shape().dtype())) {
      return Error("%{}: {}: only floating-point reductions are supported", fusion.name(),
                   Describe(*inst));
    }
    std::vector<int64_t> kept(in.dims().begin() + dims.size(), in.dims().end());
    if (kept_dims && *kept_dims != kept) {
      return Error("%{}: {} keeps dims {} but an earlier reduce keeps {}", fusion.name(),
                   Describe(*inst), ir::DimsToString(kept), ir::DimsToString(*kept_dims));
    }
    kept_dims = kept;
    out.reduces.push_back(inst.get());
  }
  if (out.reduces.empty()) return Error("%{}: reduction fusion without a reduce", fusion.name());
  out.kept_dims = *kept_dims;
  return out;
}

int64_t Elements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Note [member partials]: whether a split column reduction of `columns`
// columns splits by members.
bool SplitsByMembers(int64_t columns, bool mixed) { return columns == 1 && !mixed; }

// The member classes of the full reductions `reduces` (in order of their
// first reduce), each with its blocks of the partials kernel.
std::vector<ReduceClass> PlanMembers(const std::vector<const ir::Instruction*>& reduces) {
  std::vector<ReduceClass> classes;
  std::map<std::string, size_t> class_of_key;
  for (const ir::Instruction* r : reduces) {
    std::string key;
    ReduceMember member{r, MemberCone({r}, &key)};
    auto [it, inserted] = class_of_key.emplace(std::move(key), classes.size());
    if (inserted) {
      classes.emplace_back();
      classes.back().elements = r->operand(0)->shape().num_elements();
    }
    classes[it->second].members.push_back(std::move(member));
  }
  int64_t block = 0, member = 0;
  for (ReduceClass& c : classes) {
    // Note [loop vectorisation]: 16 bytes of the widest parameter read at
    // the member's own elements; none (only broadcasts): scalar loads.
    int64_t widest = 0;
    for (const ir::Instruction* p : c.members[0].params) {
      if (p->shape().num_elements() == c.elements)
        widest = std::max(widest, StorageBytes(p->shape().dtype()));
    }
    c.width = widest == 0 ? 1 : std::min<int64_t>(8, 16 / widest);
    while (c.width > 1 && c.elements % c.width != 0) c.width /= 2;
    const int64_t members = static_cast<int64_t>(c.members.size());
    c.blocks_per_member = std::max<int64_t>(
        1, std::min(kMaxClassBlocks / members,
                    CeilDiv(c.iterations(), kPartialsBlock * kVectorsPerThread)));
    c.first_block = block;
    c.first_member = member;
    block += c.blocks();
    member += members;
  }
  return classes;
}

int64_t Partials(const std::vector<ReduceClass>& classes) {
  return classes.back().first_block + classes.back().blocks();
}

}  // namespace

int64_t ColumnReductionPlan::Rows(const ir::Instruction* r) const {
  return r->operand(0)->shape().num_elements() / std::max<int64_t>(columns, 1);
}

std::vector<int64_t> ColumnReductionPlan::LoopDims(const ir::Instruction* r) const {
  if (part == ColumnPart::kFinal) return {chunks};
  return r->operand(0)->shape().dims();
}

int64_t ColumnReductionChunks(const ir::Instruction& fusion) {
  const ir::Computation* fused = fusion.called_computation();
  if (fusion.opcode() != ir::Opcode::kFusion || fused == nullptr ||
      fusion.attrs().fusion_kind != ir::FusionKind::kReduction) {
    return 1;
  }
  const bool mixed = HasRowReduce(*fused);
  if (mixed && !MixedReductionColumnPart(*fused).ok()) return 1;
  StatusOr<ColumnReduces> found = FindColumnReduces(fusion, *fused, mixed);
  if (!found.ok()) return 1;
  const std::set<const ir::Instruction*> reduces(found->reduces.begin(), found->reduces.end());
  std::map<const ir::Instruction*, bool> memo;
  int64_t max_rows = 0;
  const int64_t k = Elements(found->kept_dims);
  for (const ir::Instruction* r : reduces) {
    if (ir::DependsOnAny(r->operand(0), reduces, memo)) return 1;  // needs another's totals first
    max_rows = std::max(max_rows, r->operand(0)->shape().num_elements() / std::max<int64_t>(k, 1));
  }
  if (SplitsByMembers(k, mixed)) {  // Note [member partials]
    int64_t elements = 0;
    for (const ir::Instruction* r : found->reduces) elements += r->operand(0)->shape().num_elements();
    if (elements < kMinRowsPerWholeThread * kMaxBlock) return 1;
    const int64_t partials = Partials(PlanMembers(found->reduces));
    return partials >= 2 ? partials : 1;
  }
  // Note [when a column reduction splits].
  const int64_t tx = std::min(kTileColumns, k);
  const int64_t tiles = CeilDiv(k, tx);
  const int64_t lanes = NextPowerOfTwo(tx);
  const int64_t whole_ty = std::min(kMaxBlock / lanes, NextPowerOfTwo(max_rows));
  if (tiles > kMaxSplitTiles || max_rows < kMinRowsPerWholeThread * whole_ty) return 1;
  const int64_t ty = kPartialsBlock / lanes;
  const int64_t chunks = std::min(
      {kMaxChunks, CeilDiv(max_rows, ty * kRowsPerPartialThread), CeilDiv(kFillBlocks, tiles)});
  return chunks >= 2 ? chunks : 1;
}

namespace {

// The batches of the plan's reduces (Note [column reduction batches]) and
// the layout of shared memory: the trees of a batch, then the totals.
void PlanBatches(ColumnReductionPlan& plan) {
  // Each reduce of a batch needs `block` floats of static shared memory (48
  // KiB at most), after the totals (Note [column totals in shared memory]).
  const int64_t block = plan.block();
  const int64_t total_floats = static_cast<int64_t>(plan.reduces.size()) * plan.tx;
  const size_t max_batch_size =
      static_cast<size_t>(std::max<int64_t>(1, (kMaxStaticSharedFloats - total_floats) / block));
  std::set<const ir::Instruction*> current;
  for (const ir::Instruction* r : plan.reduces) {
    std::map<const ir::Instruction*, bool> memo;
    if (!plan.batches.empty() && plan.batches.back().size() < max_batch_size &&
        !ir::DependsOnAny(r->operand(0), current, memo)) {
      plan.batches.back().push_back(r);
      current.insert(r);
    } else {
      plan.batches.push_back({r});
      current = {r};
    }
  }
  // Reduces over the same loop dims next to each other: they share a loop.
  for (auto& batch : plan.batches) {
    std::stable_sort(batch.begin(), batch.end(), [&](const auto* x, const auto* y) {
      return plan.LoopDims(x) < plan.LoopDims(y);
    });
  }
  size_t max_batch = 0;
  for (const auto& batch : plan.batches) max_batch = std::max(max_batch, batch.size());
  plan.tree_floats = static_cast<int64_t>(max_batch) * block;
  plan.shared_floats = plan.tree_floats + total_floats;
  // Totals and partials in batch order, so that a batch's are consecutive
  // (Note [warp totals] in column_reduction_emitter.cc); the partials in the
  // partials kernel's batch order, which the final kernel reads them in.
  for (const auto& batch : plan.batches) {
    for (const ir::Instruction* r : batch) {
      plan.partial_index[r] = static_cast<int64_t>(plan.partial_index.size());
      plan.total_slot[r] =
          plan.tree_floats + static_cast<int64_t>(plan.total_slot.size()) * plan.tx;
    }
  }
}

// The tiles, block, grid, batches and shared memory of a whole kernel or of
// a split in G chunks (Note [column reduction], Note [split column
// reductions]).
void PlanTiles(ColumnReductionPlan& plan, int64_t max_input) {
  const int64_t k = plan.columns;
  plan.tx = std::min(kTileColumns, k);
  plan.tiles = CeilDiv(k, plan.tx);
  const int64_t lanes = NextPowerOfTwo(plan.tx);
  switch (plan.part) {
    case ColumnPart::kWhole:
      plan.ty = std::min(kMaxBlock / lanes, NextPowerOfTwo(plan.max_rows));
      plan.grid = plan.tiles;
      break;
    case ColumnPart::kPartials:
      plan.ty = std::min(kPartialsBlock / lanes, NextPowerOfTwo(plan.max_rows));
      plan.grid = plan.tiles * plan.chunks;
      break;
    case ColumnPart::kFinal:
      plan.ty = std::min(kMaxBlock / lanes, NextPowerOfTwo(plan.chunks));
      plan.grid = plan.tiles;
      break;
  }
  if (plan.part != ColumnPart::kWhole) {
    plan.scratch_floats = static_cast<int64_t>(plan.reduces.size()) * plan.chunks * k;
  }

  PlanBatches(plan);
  plan.wide = std::max(max_input, plan.scratch_floats) + plan.block() * k >=
              std::numeric_limits<int32_t>::max();
}

// Note [member partials]: the geometry and layouts of a split by members
// (one column, so tx = 1 and a thread's lane is its thread index).
void PlanMemberSplit(ColumnReductionPlan& plan, int64_t max_input) {
  plan.classes = PlanMembers(plan.reduces);
  plan.scratch_floats = Partials(plan.classes);
  const int64_t members = static_cast<int64_t>(plan.reduces.size());
  if (plan.part == ColumnPart::kPartials) {
    plan.ty = kPartialsBlock;
    plan.grid = plan.scratch_floats;
    plan.shared_floats = kPartialsBlock / kWarp;  // a sum for each warp
  } else {
    plan.ty = kWarp * std::min(kMaxFinalWarps, members);
    plan.grid = 1;
    plan.shared_floats = members;  // the totals
    for (const ReduceClass& c : plan.classes) {
      for (size_t m = 0; m < c.members.size(); ++m) {
        plan.total_slot[c.members[m].reduce] = c.first_member + static_cast<int64_t>(m);
      }
    }
  }
  plan.wide = std::max(max_input + kMaxClassBlocks * kPartialsBlock, plan.scratch_floats) >=
              std::numeric_limits<int32_t>::max();
}

}  // namespace

StatusOr<ColumnReductionPlan> PlanColumnReduction(const ir::Instruction& fusion, ColumnPart part,
                                                  bool mixed) {
  ColumnReductionPlan plan;
  plan.part = part;
  ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
  if (part != ColumnPart::kWhole) mixed = HasRowReduce(*fused);
  plan.mixed = mixed;
  std::vector<const ir::Instruction*> outputs = FusionOutputs(*fused);
  const int64_t num_params = static_cast<int64_t>(fused->parameters().size());
  std::optional<std::vector<bool>> column_part;
  if (mixed) {
    StatusOr<std::vector<bool>> column = MixedReductionColumnPart(*fused);
    if (!column.ok()) return column.status().WithPrefix("%" + fusion.name());
    column_part = *column;
  }
  if (part != ColumnPart::kPartials) {  // the partials kernel writes only scratch
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (column_part && !(*column_part)[o]) continue;
      plan.written.push_back(outputs[o]);
      plan.slots.push_back(num_params + static_cast<int64_t>(o));
    }
  }

  ASSIGN_OR_RETURN(ColumnReduces found, FindColumnReduces(fusion, *fused, mixed));
  plan.reduces = std::move(found.reduces);
  plan.kept_dims = std::move(found.kept_dims);
  plan.columns = Elements(plan.kept_dims);
  for (const ir::Instruction* out : plan.written) {
    if (out->shape().is_tuple() || out->shape().dims() != plan.kept_dims) {
      return Error("%{}: output {} has shape {}; a column reduction writes {}", fusion.name(),
                   Describe(*out), out->shape().ToString(), ir::DimsToString(plan.kept_dims));
    }
  }

  // Geometry (Note [column reduction], Note [split column reductions]).
  int64_t max_input = 0;
  for (const ir::Instruction* r : plan.reduces) {
    plan.max_rows = std::max(plan.max_rows, plan.Rows(r));
    max_input = std::max(max_input, r->operand(0)->shape().num_elements());
  }
  if (part != ColumnPart::kWhole) {
    plan.chunks = ColumnReductionChunks(fusion);
    if (plan.chunks <= 1) {
      return Error("%{}: not a column reduction of independent reduces over enough rows to split",
                   fusion.name());
    }
  }
  const int64_t k = plan.columns;
  if (part != ColumnPart::kWhole && SplitsByMembers(k, mixed)) {
    PlanMemberSplit(plan, max_input);
    return plan;
  }
  PlanTiles(plan, max_input);
  if (part == ColumnPart::kFinal) {
    ASSIGN_OR_RETURN(ColumnReductionPlan partials,
                     PlanColumnReduction(fusion, ColumnPart::kPartials, mixed));
    plan.partial_index = std::move(partials.partial_index);
  }
  return plan;
}

}  // namespace gptc::codegen
