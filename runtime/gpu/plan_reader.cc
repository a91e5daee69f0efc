#include "runtime/gpu/plan_reader.h"

#include <cublasLt.h>
#include <library_types.h>

#include <algorithm>
#include <array>
#include <limits>
#include <tuple>

#include "compiler/program/json_field.h"
#include "runtime/gpu/host_values.h"

namespace gptc::rt::gpu {

namespace {

using nlohmann::json;
using program::GemmCompute;
using program::GemmDType;
using program::GemmEpilogue;
using program::GemmOp;

// Bytes a column-major layout spans (its last element + 1), for a layout
// CheckLayout accepted; in 128 bits, as a plan's numbers may be anything.
__int128 LayoutBytes(const GemmLayout& l) {
  return static_cast<__int128>(program::GemmDTypeBytes(l.dtype)) *
         (static_cast<__int128>(l.batch_count - 1) * l.batch_stride +
          static_cast<__int128>(l.cols - 1) * l.ld + l.rows);
}

Status CheckLayout(std::string_view name, const GemmLayout& l) {
  constexpr int64_t kMax = int64_t{1} << 48;  // the IR's most elements: LayoutBytes fits
  if (l.rows < 1 || l.cols < 1 || l.ld < l.rows || l.batch_count < 1 || l.batch_stride < 0 ||
      l.cols > kMax || l.ld > kMax || l.batch_count > kMax || l.batch_stride > kMax) {
    return Error("descriptor.{}: bad layout rows={} cols={} ld={} batch_count={} batch_stride={}",
                 name, l.rows, l.cols, l.ld, l.batch_count, l.batch_stride);
  }
  return Status::Ok();
}

// Every slice lies inside the arena; `what` names its owner.
Status CheckInArena(const ArenaSlice& s, std::string_view what, int64_t arena_size) {
  if (s.offset < 0 || s.size < 0 || s.offset > arena_size || s.size > arena_size - s.offset) {
    return Error("{}: slice [{}, +{}) is outside the arena of {} bytes", what, s.offset, s.size,
                 arena_size);
  }
  return Status::Ok();
}

// Note [launch bounds]: a launch is checked at load against what every
// CUDA GPU allows (grid x below 2^31, y and z at most 65535; block x and y
// at most 1024, z at most 64, 1024 threads) and against its own work: every
// kernel gptc emits gives each block at least one byte of its arguments to
// read or write (a thread an element, a warp or a block a row, a tile), so a
// grid of more blocks than its arguments have bytes is not the compiler's
// and would only spin through blocks with nothing to do (on the emulator,
// for minutes). The kernel's own limits (threads for its registers, shared
// memory) are checked when its function is at hand (KernelModules).
constexpr std::array<int64_t, 3> kMaxGrid = {(int64_t{1} << 31) - 1, 65535, 65535};
constexpr std::array<int64_t, 3> kMaxBlock = {1024, 1024, 64};
constexpr int64_t kMaxBlockThreads = 1024;
constexpr int64_t kMaxBlockSmem = 227 << 10;  // the most a block gets on any GPU (sm_90)

// One check per thunk kind; `where` names the thunk.
Status CheckKernel(const KernelThunk& k, const std::string& where) {
  for (const auto& [key, d, most] : {std::tuple{"grid", &k.grid, &kMaxGrid},
                                     std::tuple{"block", &k.block, &kMaxBlock}}) {
    for (int i = 0; i < 3; ++i) {
      if ((*d)[i] < 1 || (*d)[i] > (*most)[i]) {
        return Error("{}: {}[{}] is {}; it must be in [1, {}]", where, key, i, (*d)[i],
                     (*most)[i]);
      }
    }
  }
  if (k.block[0] * k.block[1] * k.block[2] > kMaxBlockThreads || k.dynamic_smem < 0 ||
      k.dynamic_smem > kMaxBlockSmem) {
    return Error("{}: block {}x{}x{} / dynamic smem {} out of range", where, k.block[0], k.block[1],
                 k.block[2], k.dynamic_smem);
  }
  if (k.operands < 0 || k.operands > static_cast<int64_t>(k.args.size())) {
    return Error("{}: {} operands of {} args", where, k.operands, k.args.size());
  }
  int64_t bytes = 0;  // saturating: each slice is inside the arena, their sum need not fit
  for (const ArenaSlice& s : k.args) {
    bytes = s.size > std::numeric_limits<int64_t>::max() - bytes
                ? std::numeric_limits<int64_t>::max()
                : bytes + s.size;
  }
  // Each factor is below 2^31: the product fits in 128 bits, not 64.
  const __int128 blocks = static_cast<__int128>(k.grid[0]) * k.grid[1] * k.grid[2];
  if (blocks > std::max<int64_t>(bytes, 1)) {
    return Error("{}: grid {}x{}x{} launches more blocks than its {} arguments have bytes ({})",
                 where, k.grid[0], k.grid[1], k.grid[2], k.args.size(), bytes);
  }
  return Status::Ok();
}

Status CheckGemm(const GemmThunk& g, const std::string& where) {
  const GemmConfig& c = g.config;
  RETURN_IF_ERROR(CheckGemmConfig(c).WithPrefix(where));
  const std::string_view epilogue = program::GemmEpilogueName(c.epilogue);
  if ((program::ReadsBias(c.epilogue) || program::WritesBias(c.epilogue)) != g.bias.has_value()) {
    return Error("{}: epilogue {} {} a bias slice", where, epilogue,
                 g.bias ? "does not take" : "needs");
  }
  if ((program::WritesAux(c.epilogue) || program::ReadsAux(c.epilogue)) != g.aux.has_value()) {
    return Error("{}: epilogue {} {} an aux slice", where, epilogue,
                 g.aux ? "does not take" : "needs");
  }
  for (auto [matrix, s, layout] : {std::tuple{"a", &g.a, &c.a}, std::tuple{"b", &g.b, &c.b},
                                   std::tuple{"c", &g.c, &c.c}, std::tuple{"d", &g.d, &c.d}}) {
    if (const __int128 bytes = LayoutBytes(*layout); bytes > s->size) {
      return Error("{}: matrix {} spans {} bytes, its slice has {}", where, matrix,
                   bytes > std::numeric_limits<int64_t>::max()
                       ? std::string("more than 2^63")
                       : std::to_string(static_cast<int64_t>(bytes)),
                   s->size);
    }
  }
  return Status::Ok();
}

Status CheckCopy(const CopyThunk& c, const std::string& where) {
  if (c.bytes < 0 || c.bytes > c.src.size || c.bytes > c.dst.size) {
    return Error("{}: copies {} bytes between slices of {} and {}", where, c.bytes, c.src.size,
                 c.dst.size);
  }
  return Status::Ok();
}

Status CheckConstant(const ConstantThunk& c, const std::string& where) {
  const int64_t count = c.dst.size / ir::DTypeBytes(c.dtype);
  const int64_t n = static_cast<int64_t>(c.values.size());
  if (n != count && !(n == 1 && count > 1)) {
    return Error("{}: {} values for a slice of {} {} elements", where, n, count,
                 ir::DTypeName(c.dtype));
  }
  return Status::Ok();
}

// A collective thunk's `count` fits its slices (program::AllReduceThunk);
// a reduce-scatter's or all-gather's larger side is a whole number of
// counts (the world size, which the executor checks) and the two sides do
// not overlap (NCCL's in-place forms are not used).
Status CheckAllReduce(const AllReduceThunk& a, const std::string& where) {
  const int64_t width = ir::DTypeBytes(a.dtype);
  if (a.count < 0 || a.count > a.in.size / width || a.count > a.out.size / width) {
    return Error("{}: {} {} elements do not fit its slices", where, a.count,
                 ir::DTypeName(a.dtype));
  }
  if (a.collective == program::CollectiveOp::kAllReduce) return Status::Ok();
  const ArenaSlice& whole = a.collective == program::CollectiveOp::kReduceScatter ? a.in : a.out;
  const int64_t bytes = a.count * width;
  if (bytes == 0 || whole.size % bytes != 0) {
    return Error("{}: its {} slice of {} bytes is not a whole number of {} {} elements", where,
                 &whole == &a.in ? "in" : "out", whole.size, a.count, ir::DTypeName(a.dtype));
  }
  if (a.in.offset < a.out.offset + a.out.size && a.out.offset < a.in.offset + a.in.size) {
    return Error("{}: in [{}, +{}) and out [{}, +{}) overlap", where, a.in.offset, a.in.size,
                 a.out.offset, a.out.size);
  }
  return Status::Ok();
}

Status CheckThunk(const Thunk& t, int64_t arena_size) {
  const std::string where = t.Describe();
  for (const ArenaSlice* s : ThunkSlices(t)) RETURN_IF_ERROR(CheckInArena(*s, where, arena_size));
  if (const auto* k = std::get_if<KernelThunk>(&t.body)) return CheckKernel(*k, where);
  if (const auto* g = std::get_if<GemmThunk>(&t.body)) return CheckGemm(*g, where);
  if (const auto* c = std::get_if<CopyThunk>(&t.body)) return CheckCopy(*c, where);
  if (const auto* c = std::get_if<ConstantThunk>(&t.body)) return CheckConstant(*c, where);
  if (const auto* a = std::get_if<AllReduceThunk>(&t.body)) return CheckAllReduce(*a, where);
  return Status::Ok();
}

// A slot's slice holds its shape inside the arena.
Status CheckSlot(const PlanSlot& s, std::string_view where, int64_t arena_size) {
  if (s.slice.offset < 0 || s.slice.offset > arena_size ||
      s.slice.size < s.shape.num_elements() * ir::DTypeBytes(s.shape.dtype()) ||
      s.slice.size > arena_size - s.slice.offset) {
    return Error("{} (%{}): slice [{}, +{}) does not hold {} inside the arena of {} bytes", where,
                 s.name, s.slice.offset, s.slice.size, s.shape.ToString(), arena_size);
  }
  return Status::Ok();
}

// Note [epilogue fallback] (compiler/program/plan.h): each gemm names its
// fallback kernel, a kernel thunk of the same instruction marked `fallback`
// (after the gemm when it reads the plain gemm's result in `fallback_d`),
// and every kernel so marked is named by one gemm.
Status CheckFallbacks(const EntryPlan& p, std::string_view where) {
  std::vector<int> named(p.thunks.size(), 0);
  for (size_t i = 0; i < p.thunks.size(); ++i) {
    const auto* g = std::get_if<GemmThunk>(&p.thunks[i].body);
    if (g == nullptr || !g->fallback_kernel) continue;
    const int64_t f = *g->fallback_kernel;
    const KernelThunk* k = f >= 0 && f < static_cast<int64_t>(p.thunks.size())
                               ? std::get_if<KernelThunk>(&p.thunks[f].body)
                               : nullptr;
    if (k == nullptr || !k->fallback || p.thunks[f].instruction() != p.thunks[i].instruction()) {
      return Error(
          "{}: thunk {} ({}) names thunk {} as its fallback kernel, which is not a "
          "fallback kernel of {}",
          where, i, p.thunks[i].name, f, p.thunks[i].instruction());
    }
    const program::GemmEpilogue e = g->config.epilogue;
    if (program::WritesBias(e) && program::ReadsAux(e)) {
      return Error("{}: thunk {} ({}): {} has no fallback kernel", where, i, p.thunks[i].name,
                   program::GemmEpilogueName(e));
    }
    if (!program::WritesBias(e) && !g->fallback_d) {
      return Error(
          "{}: thunk {} ({}): its fallback kernel reads the plain gemm's result, but "
          "the gemm has no fallback_d",
          where, i, p.thunks[i].name);
    }
    if (g->fallback_d && f < static_cast<int64_t>(i)) {
      return Error("{}: thunk {} ({}): its fallback kernel {} reads fallback_d before the gemm",
                   where, i, p.thunks[i].name, f);
    }
    ++named[f];
  }
  for (size_t i = 0; i < p.thunks.size(); ++i) {
    const auto* k = std::get_if<KernelThunk>(&p.thunks[i].body);
    if (k != nullptr && k->fallback && named[i] != 1) {
      return Error("{}: thunk {} ({}) is a fallback kernel named by {} gemms, not one", where, i,
                   p.thunks[i].name, named[i]);
    }
  }
  return Status::Ok();
}

// Note [all-reduce buckets] (passes/all_reduce_combiner.h): each bucket's
// members are its all_reduce thunks (of one collective), in order, issued
// after the last and waited for later; every all_reduce names a bucket of
// the entry.
Status CheckBuckets(const EntryPlan& p, std::string_view where) {
  const int64_t n = static_cast<int64_t>(p.thunks.size());
  for (size_t b = 0; b < p.buckets.size(); ++b) {
    const AllReduceBucket& bucket = p.buckets[b];
    const std::string bw = fmt::format("{} bucket {}", where, b);
    if (bucket.id != static_cast<int64_t>(b)) return Error("{}: id {} out of order", bw, bucket.id);
    if (bucket.members.empty() || bucket.issue_after != bucket.members.back() ||
        bucket.wait_before <= bucket.issue_after || bucket.wait_before > n) {
      return Error("{}: members {}, issue_after {}, wait_before {} are inconsistent ({} thunks)",
                   bw, json(bucket.members).dump(), bucket.issue_after, bucket.wait_before, n);
    }
    const AllReduceThunk* first = nullptr;
    for (size_t k = 0; k < bucket.members.size(); ++k) {
      const int64_t m = bucket.members[k];
      const auto* a = m >= 0 && m < n ? std::get_if<AllReduceThunk>(&p.thunks[m].body) : nullptr;
      if (a == nullptr || a->bucket != bucket.id || (k > 0 && m <= bucket.members[k - 1])) {
        return Error("{}: member {} is not an all_reduce thunk of this bucket", bw, m);
      }
      if (first == nullptr) first = a;
      if (a->collective != first->collective) {
        return Error("{}: member {} ({}) and member {} ({}) differ: a bucket holds one collective",
                     bw, m, program::CollectiveOpName(a->collective), bucket.members[0],
                     program::CollectiveOpName(first->collective));
      }
    }
  }
  for (const Thunk& t : p.thunks) {
    const auto* a = std::get_if<AllReduceThunk>(&t.body);
    if (a != nullptr && a->bucket >= static_cast<int64_t>(p.buckets.size())) {
      return Error("{}: {} names bucket {}, the entry has {}", where, t.Describe(), a->bucket,
                   p.buckets.size());
    }
  }
  return Status::Ok();
}

// Every slice that names a buffer names one of the table, at its place.
Status CheckBufferIds(const EntryPlan& p, std::string_view where) {
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const PlanBuffer& b = p.buffers[i];
    const std::string bw = fmt::format("{} buffers[{}]", where, i);
    if (b.id != static_cast<int64_t>(i)) return Error("{}: id {} out of order", bw, b.id);
    RETURN_IF_ERROR(CheckInArena(b.slice, bw, p.arena_size));
  }
  auto check = [&](const ArenaSlice& s, const std::string& what) -> Status {
    if (s.buffer < 0) return Status::Ok();
    const PlanBuffer* b = p.FindBuffer(s.buffer);
    if (b == nullptr) {
      return Error("{}: {} names buffer {}, which is not in 'buffers'", where, what, s.buffer);
    }
    if (!(b->slice == s)) {
      return Error("{}: {} is [{}, +{}), its buffer %{} is [{}, +{})", where, what, s.offset,
                   s.size, b->name, b->slice.offset, b->slice.size);
    }
    return Status::Ok();
  };
  for (const PlanSlot& slot : p.inputs) RETURN_IF_ERROR(check(slot.slice, "input %" + slot.name));
  for (const PlanSlot& slot : p.outputs) RETURN_IF_ERROR(check(slot.slice, "output %" + slot.name));
  for (const Thunk& t : p.thunks) {
    for (const ArenaSlice* s : ThunkSlices(t)) RETURN_IF_ERROR(check(*s, t.Describe()));
  }
  return Status::Ok();
}

}  // namespace

int32_t CudaDataType(GemmDType t) {
  switch (t) {
    case GemmDType::kBF16:
      return CUDA_R_16BF;
    case GemmDType::kF16:
      return CUDA_R_16F;
    case GemmDType::kF32:
      return CUDA_R_32F;
  }
  return -1;
}

int32_t CudaComputeType(GemmCompute c) {
  return c == GemmCompute::k32FFastTF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

int32_t CudaOperation(GemmOp op) { return op == GemmOp::kT ? CUBLAS_OP_T : CUBLAS_OP_N; }

// Note [gemm epilogue table]: the table's values are cuBLASLt's.
#define GPTC_GEMM_EPILOGUE_VALUE(e, name, value, activation, bias, aux) \
  static_assert(CUBLASLT_EPILOGUE_##name == value, "CUBLASLT_EPILOGUE_" #name);
GPTC_GEMM_EPILOGUES(GPTC_GEMM_EPILOGUE_VALUE)
#undef GPTC_GEMM_EPILOGUE_VALUE

int32_t CudaEpilogue(GemmEpilogue e) { return program::GemmEpilogueInfoOf(e).cuda_value; }

Status CheckGemmConfig(const GemmConfig& c) {
  constexpr std::string_view where = "descriptor";
  for (auto [name, l] :
       {std::pair{"a", &c.a}, std::pair{"b", &c.b}, std::pair{"c", &c.c}, std::pair{"d", &c.d}}) {
    RETURN_IF_ERROR(CheckLayout(name, *l));
  }
  if (c.m < 1 || c.n < 1 || c.k < 1 || c.batch_count < 1) {
    return Error("{}: bad problem m={} n={} k={} batch_count={}", where, c.m, c.n, c.k,
                 c.batch_count);
  }
  // The layouts must describe op(A)[m, k], op(B)[k, n], C and D [m, n].
  const bool ta = c.transa == GemmOp::kT, tb = c.transb == GemmOp::kT;
  auto check = [&](std::string_view name, const GemmLayout& l, int64_t rows,
                   int64_t cols) -> Status {
    if (l.rows != rows || l.cols != cols) {
      return Error("{}.{} is {}x{}, the problem needs {}x{}", where, name, l.rows, l.cols, rows,
                   cols);
    }
    if (l.batch_count != c.batch_count) {
      return Error("{}.{} has batch_count {}, the problem {}", where, name, l.batch_count,
                   c.batch_count);
    }
    return Status::Ok();
  };
  RETURN_IF_ERROR(check("a", c.a, ta ? c.k : c.m, ta ? c.m : c.k));
  RETURN_IF_ERROR(check("b", c.b, tb ? c.n : c.k, tb ? c.k : c.n));
  RETURN_IF_ERROR(check("c", c.c, c.m, c.n));
  RETURN_IF_ERROR(check("d", c.d, c.m, c.n));
  if ((program::WritesAux(c.epilogue) || program::ReadsAux(c.epilogue)) && c.aux_ld < c.m) {
    return Error("{}: epilogue {} with aux_ld {} < m {}", where,
                 program::GemmEpilogueName(c.epilogue), c.aux_ld, c.m);
  }
  return Status::Ok();
}

std::string ConstantBytes(const ConstantThunk& c) {
  const int64_t count = c.dst.size / ir::DTypeBytes(c.dtype);
  std::vector<double> values = c.values;
  if (values.size() == 1 && count > 1) values.assign(count, values[0]);  // a splat
  return EncodeValues(c.dtype, values);
}

Status CheckEntryPlan(const EntryPlan& p) {
  const std::string where = fmt::format("plan entry {}", p.name());
  if (p.arena_size < 0) return Error("{}: arena_size {} < 0", where, p.arena_size);
  for (auto [key, slots] : {std::pair{"inputs", &p.inputs}, std::pair{"outputs", &p.outputs}}) {
    for (size_t i = 0; i < slots->size(); ++i) {
      RETURN_IF_ERROR(
          CheckSlot((*slots)[i], fmt::format("{} {}[{}]", where, key, i), p.arena_size));
    }
  }
  for (const Thunk& t : p.thunks) {
    RETURN_IF_ERROR(CheckThunk(t, p.arena_size).WithPrefix(where));
  }
  RETURN_IF_ERROR(CheckFallbacks(p, where));
  RETURN_IF_ERROR(CheckBuckets(p, where));
  return CheckBufferIds(p, where);
}

StatusOr<EntryPlan> ReadEntryPlan(const json& entry) {
  ASSIGN_OR_RETURN(EntryPlan p, program::EntryPlanFromJson(entry));
  RETURN_IF_ERROR(CheckEntryPlan(p));
  return p;
}

StatusOr<std::vector<EntryPlan>> ReadPlan(const json& plan) {
  ASSIGN_OR_RETURN(program::Plan p, program::PlanFromJson(plan));
  for (const EntryPlan& e : p.entries) RETURN_IF_ERROR(CheckEntryPlan(e));
  return std::move(p.entries);
}

Status CheckKernelIndex(const std::vector<KernelRecord>& index, int64_t ptx_bytes,
                        int64_t cubin_bytes) {
  for (size_t i = 0; i < index.size(); ++i) {
    const KernelRecord& k = index[i];
    const std::string where = fmt::format("manifest kernels[{}]", i);
    if (k.ptx_offset < 0 || k.ptx_size < 1 || k.ptx_offset > ptx_bytes ||
        k.ptx_size > ptx_bytes - k.ptx_offset) {
      return Error("{} ({}): PTX [{}, +{}) is outside the ptx section of {} bytes", where, k.name,
                   k.ptx_offset, k.ptx_size, ptx_bytes);
    }
    if (k.cubin) {
      auto [offset, size] = *k.cubin;
      if (offset < 0 || size < 1 || offset > cubin_bytes || size > cubin_bytes - offset) {
        return Error("{} ({}): cubin [{}, +{}) is outside the cubin section of {} bytes", where,
                     k.name, offset, size, cubin_bytes);
      }
    }
  }
  return Status::Ok();
}

namespace {

// The roles of entry inputs the trainer feeds (Note [entries of a step]).
bool Feedable(program::SlotRole role) {
  using program::SlotRole;
  for (SlotRole r : {SlotRole::kParam, SlotRole::kAdamM, SlotRole::kAdamV, SlotRole::kGradAcc,
                     SlotRole::kMaster, SlotRole::kTokens, SlotRole::kTargets, SlotRole::kMask,
                     SlotRole::kStep, SlotRole::kLr}) {
    if (role == r) return true;
  }
  return false;
}

}  // namespace

Status CheckTrainerSignature(const program::EntrySignature& sig, const EntryPlan& plan) {
  if (plan.inputs.size() != sig.inputs.size() || plan.outputs.size() != sig.outputs.size()) {
    return Error("plan entry {} has {} inputs / {} outputs, the program {} / {}", plan.name(),
                 plan.inputs.size(), plan.outputs.size(), sig.inputs.size(), sig.outputs.size());
  }
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    const PlanSlot& s = plan.inputs[i];
    if (s.shape != sig.inputs[i].shape || s.role != sig.inputs[i].role) {
      return Error("plan entry {} input {} (%{}) is {} {}, the program's is {} {}", plan.name(), i,
                   s.name, program::SlotRoleName(s.role), s.shape.ToString(),
                   program::SlotRoleName(sig.inputs[i].role), sig.inputs[i].shape.ToString());
    }
    if (!Feedable(s.role)) {
      return Error("entry {} input {} (%{}) has role {}, which the GPU trainer cannot feed",
                   plan.name(), i, s.name, program::SlotRoleName(s.role));
    }
  }
  return Status::Ok();
}

StatusOr<std::vector<int>> CheckArenaHosts(const std::vector<EntryPlan>& plans,
                                           program::EntryRole micro) {
  std::vector<int> hosts;
  for (const EntryPlan& guest : plans) {
    const int h = program::ArenaHostIndex(plans, guest);
    hosts.push_back(h);
    if (h < 0) continue;
    const EntryPlan& host = plans[h];
    if (host.role != micro) {
      return Error("plan entry {}: runs in the arena of {}, which does not run the micro-batches",
                   guest.name(), host.name());
    }
    for (const PlanSlot& slot : guest.inputs) {
      if (slot.role != program::SlotRole::kParam) continue;
      const PlanSlot* at = host.FindInput(program::SlotRole::kParam, slot.index);
      if (at == nullptr || at->shape != slot.shape || at->slice.offset != slot.slice.offset) {
        return Error("plan entry {}: input %{} (param {}) is not where {} holds it", guest.name(),
                     slot.name, slot.index, host.name());
      }
    }
  }
  return hosts;
}

}  // namespace gptc::rt::gpu
