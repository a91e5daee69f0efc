#include "compiler/artifact/plan.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compiler/analysis/kernel_cost.h"
#include "compiler/analysis/kernel_count.h"
#include "compiler/artifact/plan_roles.h"
#include "compiler/ir/all_reduce_bucket.h"
#include "compiler/ir/computation.h"

namespace gptc::artifact {

namespace {

using ir::Instruction;
using ir::Opcode;
using program::ArenaSlice;
using program::Thunk;

// Note [all-reduce buckets] (passes/all_reduce_combiner.h): the buckets the
// combiner recorded on the collectives, as thunk indexes: each is issued
// after its last member's thunk and waited for before the first thunk that
// reads any member's result. Tells each member its bucket.
StatusOr<std::vector<program::AllReduceBucket>> Buckets(
    std::vector<Thunk>& thunks,
    const std::vector<std::pair<int64_t, const Instruction*>>& collectives,
    const std::unordered_map<const Instruction*, int64_t>& first_thunk, int64_t end) {
  // A reader launches work where it has a thunk.
  auto launch_position = [&](const Instruction& reader) -> std::optional<int64_t> {
    auto it = first_thunk.find(&reader);
    if (it == first_thunk.end()) return std::nullopt;
    return it->second;
  };
  std::vector<program::AllReduceBucket> buckets;
  const Instruction* previous = nullptr;
  for (const auto& [index, inst] : collectives) {
    const std::string_view op = ir::OpcodeName(inst->opcode());
    const std::optional<int64_t> bucket = ir::CollectiveBucket(*inst);
    if (!bucket) {
      return Error("%{}: {} has no bucket (run all-reduce-combiner after the schedule)",
                   inst->name(), op);
    }
    const int64_t last = buckets.empty() ? -1 : buckets.back().id;
    if ((*bucket != last && *bucket != last + 1) ||
        (*bucket == last && previous->opcode() != inst->opcode())) {
      return Error(
          "%{}: {} in bucket {} after bucket {}: buckets must be numbered from 0, "
          "each a run of consecutive collectives of one opcode",
          inst->name(), op, *bucket, last);
    }
    previous = inst;
    if (*bucket != last) buckets.push_back({.id = *bucket, .wait_before = end});
    auto& member = std::get<program::AllReduceThunk>(thunks[index].body);
    program::AllReduceBucket& b = buckets.back();
    b.members.push_back(index);
    b.issue_after = index;
    b.bytes += member.in.size;
    b.wait_before =
        std::min(b.wait_before, analysis::FirstLaunchingReader(*inst, launch_position, end));
    member.bucket = b.id;
  }
  return buckets;
}

// Note [plan buffers]: every buffer of the entry's arena, so that the
// emulator can tell two values apart that share memory at different times
// (runtime/emu/: a thunk must read what its operand's producer wrote).
std::vector<program::PlanBuffer> PlanBuffers(const analysis::BufferAssignment& ba) {
  std::vector<program::PlanBuffer> buffers;
  for (const analysis::BufferAssignment::Buffer& b : ba.buffers()) {
    std::string name = b.defining != nullptr ? b.defining->name() : "?";
    std::string shape;
    if (b.defining != nullptr) {
      const ir::Shape& s = b.defining->shape();
      shape = (s.is_tuple() && b.leaf < static_cast<int64_t>(s.tuple_elements().size())
                   ? s.tuple_elements()[b.leaf]
                   : s)
                  .ToString();
    }
    if (b.leaf > 0) name += fmt::format("{{{}}}", b.leaf);
    buffers.push_back({.id = b.id,
                       .name = std::move(name),
                       .slice = {.offset = b.slice.offset, .size = b.slice.size, .buffer = b.id},
                       .shape = std::move(shape)});
  }
  return buffers;
}

// The work of instruction `inst` (program::ThunkCost), recorded on its first
// thunk: an instruction of several kernels does it once in all.
program::ThunkCost CostOf(const Instruction& inst) {
  const analysis::KernelCost c = analysis::AnalyzeKernelCost(inst);
  return {.flops = c.flops, .bytes_read = c.bytes_read, .bytes_written = c.bytes_written};
}

// Whether `inst` is a gemm: a dot or a kind=gemm fusion.
bool IsGemm(const Instruction& inst) {
  return inst.opcode() == Opcode::kDot ||
         (inst.opcode() == Opcode::kFusion && inst.attrs().fusion_kind == ir::FusionKind::kGemm);
}

// Builds one entry's plan: thunks in schedule order, then the buckets, the
// donation copies, the signature's slots and the buffers.
class EntryPlanBuilder {
 public:
  EntryPlanBuilder(const program::TrainEntry& entry, const analysis::BufferAssignment& ba,
                   const codegen::CompiledKernels& kernels, PlanStats& stats)
      : entry_(entry),
        ba_(ba),
        stats_(stats),
        c_(*entry.module->entry()),
        roles_(c_, entry.signature) {
    // An instruction may need several kernels, launched in the order codegen
    // lists them (Note [multi-kernel instructions]: scatter-add's init, then add).
    for (const codegen::CompiledKernel& k : kernels.kernels) {
      by_fusion_[k.spec.fusion].push_back(&k);
    }
    for (const codegen::SkippedFusion& s : kernels.skipped) skipped_[s.fusion] = s.reason;
    // Note [split column reductions]: kernels that share scratch memory within
    // an instruction get it past the buffers (kernels run one at a time on the
    // compute stream, so one region serves all).
    scratch_offset_ = (ba.arena_size() + 255) / 256 * 256;
    int64_t scratch_bytes = 0;
    for (const codegen::CompiledKernel& k : kernels.kernels) {
      for (const codegen::KernelParam& p : k.spec.params) {
        if (p.role == codegen::KernelParam::Role::kScratch) {
          scratch_bytes = std::max(scratch_bytes, p.shape.byte_size());
        }
      }
    }
    plan_.role = entry.role;
    plan_.arena_size = scratch_bytes > 0 ? scratch_offset_ + scratch_bytes : ba.arena_size();
  }

  StatusOr<program::EntryPlan> Build() && {
    for (const auto& owned : c_.instructions()) RETURN_IF_ERROR(AddInstruction(*owned));
    // Before the donation copies: a bucket waited for at the end of the step
    // completes before any copy reads its results.
    ASSIGN_OR_RETURN(plan_.buckets, Buckets(plan_.thunks, collectives_, first_thunk_,
                                            static_cast<int64_t>(plan_.thunks.size())));
    RETURN_IF_ERROR(AddDonationCopies());
    RETURN_IF_ERROR(AddSlots());
    plan_.donations = entry_.signature.donations;
    plan_.buffers = PlanBuffers(ba_);
    SetBufferCategories(ba_, plan_);
    return std::move(plan_);
  }

 private:
  // The slice of leaf `leaf` of `inst`, with the id of its buffer (Note [plan
  // buffers]).
  StatusOr<ArenaSlice> SliceOf(const Instruction* inst, int64_t leaf = 0) const {
    ASSIGN_OR_RETURN(analysis::Slice s, ba_.GetSlice(inst, leaf));
    const analysis::BufferAssignment::Buffer* b = ba_.GetBuffer(inst, leaf);
    return ArenaSlice{.offset = s.offset, .size = s.size, .buffer = b != nullptr ? b->id : -1};
  }

  // Note [split column reductions]: a kernel's scratch, past the arena's
  // buffers, in no buffer.
  ArenaSlice Scratch(const codegen::KernelParam& p) const {
    return {.offset = scratch_offset_, .size = p.shape.byte_size(), .buffer = -1};
  }

  const Instruction* RootElement(int64_t i) const {
    const Instruction* root = c_.root();
    return root->opcode() == Opcode::kTuple ? root->operand(i) : root;
  }

  void Push(Thunk t) {
    t.index = static_cast<int64_t>(plan_.thunks.size());
    ++stats_.thunks[std::string(program::ThunkKindName(t.kind()))];
    if (const auto* u = std::get_if<program::UnsupportedThunk>(&t.body)) {
      ++stats_.unsupported[u->what];
    }
    plan_.thunks.push_back(std::move(t));
  }

  Thunk Unsupported(const Instruction& inst, std::string what, std::string reason) const {
    return {.name = inst.name(),
            .meta = inst.metadata(),
            .body = program::UnsupportedThunk{std::move(what), std::move(reason)},
            .role = roles_.Of(inst)};
  }

  Status AddInstruction(const Instruction& inst);
  StatusOr<Thunk> KernelThunk(const Instruction& inst, const codegen::CompiledKernel& kernel,
                              const std::string& kind) const;
  Status AddKernels(const Instruction& inst, const std::vector<const codegen::CompiledKernel*>& ks);
  Status AddGemm(const Instruction& inst);
  StatusOr<Thunk> GemmThunk(const Instruction& inst, const GemmPlan& plan) const;
  StatusOr<Thunk> CollectiveThunk(const Instruction& inst);
  StatusOr<Thunk> CopyThunk(const Instruction& inst) const;
  StatusOr<Thunk> ConstantThunk(const Instruction& inst) const;
  Status AddDonationCopies();
  Status AddSlots();

  const program::TrainEntry& entry_;
  const analysis::BufferAssignment& ba_;
  PlanStats& stats_;
  const ir::Computation& c_;
  const ThunkRoles roles_;  // Note [plan roles]
  std::unordered_map<std::string, std::vector<const codegen::CompiledKernel*>> by_fusion_;
  std::unordered_map<std::string, std::string> skipped_;
  int64_t scratch_offset_ = 0;
  program::EntryPlan plan_;
  // The first thunk of each instruction that launches work, and the collectives.
  std::unordered_map<const Instruction*, int64_t> first_thunk_;
  std::vector<std::pair<int64_t, const Instruction*>> collectives_;
};

Status EntryPlanBuilder::AddInstruction(const Instruction& inst) {
  if (!analysis::IsKernel(inst) && inst.opcode() != Opcode::kConstant &&
      inst.opcode() != Opcode::kCopy) {
    return Status::Ok();  // parameters, tuples, get-tuple-elements, reshapes: no work
  }
  first_thunk_[&inst] = static_cast<int64_t>(plan_.thunks.size());
  if (IsGemm(inst)) return AddGemm(inst);
  if (auto it = by_fusion_.find(inst.name()); it != by_fusion_.end()) {
    return AddKernels(inst, it->second);
  }
  Thunk t;
  if (inst.opcode() == Opcode::kFusion) {
    std::string kind(ir::FusionKindName(inst.attrs().fusion_kind));
    auto s = skipped_.find(inst.name());
    t = Unsupported(inst, "fusion kind " + kind,
                    s != skipped_.end() ? s->second : "no kernel was compiled");
  } else if (ir::IsCollective(inst.opcode())) {
    ASSIGN_OR_RETURN(t, CollectiveThunk(inst));
  } else if (inst.opcode() == Opcode::kCopy && !inst.shape().is_tuple()) {
    ASSIGN_OR_RETURN(t, CopyThunk(inst));
  } else if (inst.opcode() == Opcode::kConstant && inst.shape().num_elements() <= 1024) {
    ASSIGN_OR_RETURN(t, ConstantThunk(inst));
  } else {
    t = Unsupported(inst, std::string(ir::OpcodeName(inst.opcode())),
                    fmt::format("{} has no emitter yet", ir::OpcodeName(inst.opcode())));
  }
  Push(std::move(t));
  return Status::Ok();
}

// A kernel thunk of `inst`: its launch and its argument slices (operands,
// then results: Note [kernel ABI]).
StatusOr<Thunk> EntryPlanBuilder::KernelThunk(const Instruction& inst,
                                              const codegen::CompiledKernel& kernel,
                                              const std::string& kind) const {
  const codegen::KernelSpec& spec = kernel.spec;
  program::KernelThunk k{.fusion = inst.name(),
                         .fusion_kind = kind,
                         .grid = {spec.grid.x, spec.grid.y, spec.grid.z},
                         .block = {spec.block.x, spec.block.y, spec.block.z},
                         .dynamic_smem = spec.dynamic_shared_bytes};
  for (const codegen::KernelParam& p : spec.params) {
    ArenaSlice arg;
    if (p.role == codegen::KernelParam::Role::kOperand) {
      ASSIGN_OR_RETURN(arg, SliceOf(inst.operand(p.index)));
      ++k.operands;
    } else if (p.role == codegen::KernelParam::Role::kScratch) {
      arg = Scratch(p);
    } else {
      ASSIGN_OR_RETURN(arg, SliceOf(&inst, p.index));
    }
    k.args.push_back(arg);
  }
  return Thunk{
      .name = spec.name, .meta = inst.metadata(), .body = std::move(k), .role = roles_.Of(inst)};
}

Status EntryPlanBuilder::AddKernels(const Instruction& inst,
                                    const std::vector<const codegen::CompiledKernel*>& kernels) {
  std::string kind = inst.opcode() == Opcode::kFusion
                         ? std::string(ir::FusionKindName(inst.attrs().fusion_kind))
                         : std::string(ir::OpcodeName(inst.opcode()));
  // Note [multi-kernel instructions]: a result over operand 0 (Note
  // [in-place temporaries]) needs no copy of it.
  bool in_place = false;
  if (std::any_of(kernels.begin(), kernels.end(),
                  [](const codegen::CompiledKernel* k) { return k->spec.copies_operand; })) {
    ASSIGN_OR_RETURN(const ArenaSlice from, SliceOf(inst.operand(0)));
    ASSIGN_OR_RETURN(const ArenaSlice to, SliceOf(&inst));
    in_place = from.offset == to.offset;
  }
  bool first = true;
  for (const codegen::CompiledKernel* kernel : kernels) {
    if (in_place && kernel->spec.copies_operand) continue;
    ASSIGN_OR_RETURN(Thunk t, KernelThunk(inst, *kernel, kind));
    std::get<program::KernelThunk>(t.body).updates_operand = in_place;
    if (std::exchange(first, false)) t.cost = CostOf(inst);
    ++stats_.kernels_by_kind[kind];
    Push(std::move(t));
  }
  return Status::Ok();
}

// A gemm and its fallback kernel (Note [epilogue fallback] in
// compiler/program/plan.h), which the gemm thunk names: run only when the
// runtime has to drop the gemm's epilogue: the bias gradient before the
// gemm, the forward epilogue after it (reading the plain gemm's result in
// scratch).
Status EntryPlanBuilder::AddGemm(const Instruction& inst) {
  StatusOr<GemmPlan> plan = PlanGemm(inst);
  if (!plan.ok()) {
    Push(Unsupported(inst, "gemm layout", plan.status().message()));
    return Status::Ok();
  }
  using Fallback = codegen::KernelSpec::GemmFallback;
  const program::EpilogueBias bias = program::GemmEpilogueInfoOf(plan->epilogue).bias;
  const bool bgrad =
      bias == program::EpilogueBias::kGradientOfA || bias == program::EpilogueBias::kGradientOfB;
  const bool forward = !bgrad && plan->epilogue != program::GemmEpilogue::kDefault;
  std::optional<Thunk> fallback;
  std::optional<ArenaSlice> fallback_d;
  if (auto it = by_fusion_.find(inst.name()); it != by_fusion_.end() && (bgrad || forward)) {
    for (const codegen::CompiledKernel* kernel : it->second) {
      const Fallback f = kernel->spec.gemm_fallback;
      if (f == Fallback::kNone || (f == Fallback::kBiasGradient) != bgrad) continue;
      if (fallback) return Error("%{}: two fallback kernels for one gemm", inst.name());
      ASSIGN_OR_RETURN(fallback, KernelThunk(inst, *kernel, bgrad ? "reduction" : "loop"));
      std::get<program::KernelThunk>(fallback->body).fallback = true;
      ++stats_.kernels_by_kind["gemm fallback"];
      for (const codegen::KernelParam& p : kernel->spec.params) {
        // Where the plain gemm puts the dot's f32 result.
        if (!bgrad && p.role == codegen::KernelParam::Role::kScratch) fallback_d = Scratch(p);
      }
    }
  }
  ASSIGN_OR_RETURN(Thunk t, GemmThunk(inst, *plan));
  t.cost = CostOf(inst);
  auto& g = std::get<program::GemmThunk>(t.body);
  g.fallback_d = fallback_d;
  const int64_t at = static_cast<int64_t>(plan_.thunks.size());
  if (fallback) g.fallback_kernel = bgrad ? at : at + 1;
  ++stats_.gemm_epilogues[std::string(program::GemmEpilogueName(plan->epilogue))];
  if (fallback && bgrad) Push(std::move(*fallback));
  Push(std::move(t));
  if (fallback && !bgrad) Push(std::move(*fallback));
  return Status::Ok();
}

StatusOr<Thunk> EntryPlanBuilder::GemmThunk(const Instruction& inst, const GemmPlan& plan) const {
  program::GemmThunk g{.config = plan};
  auto operand = [&](int64_t i) { return SliceOf(inst.operand(i)); };
  auto output = [&](int64_t i) { return SliceOf(&inst, i); };
  ASSIGN_OR_RETURN(g.a, operand(plan.a_operand));
  ASSIGN_OR_RETURN(g.b, operand(plan.b_operand));
  ASSIGN_OR_RETURN(g.d, output(plan.d_output));
  g.c = g.d;
  if (plan.c_operand >= 0) {
    ASSIGN_OR_RETURN(g.c, operand(plan.c_operand));
  }
  if (plan.bias_operand >= 0) {
    ASSIGN_OR_RETURN(g.bias, operand(plan.bias_operand));
  }
  if (plan.aux_output >= 0) {
    ASSIGN_OR_RETURN(g.aux, output(plan.aux_output));
  }
  if (plan.aux_operand >= 0) {
    ASSIGN_OR_RETURN(g.aux, operand(plan.aux_operand));
  }
  if (plan.bias_grad_output >= 0) {
    ASSIGN_OR_RETURN(g.bias, output(plan.bias_grad_output));
  }
  return Thunk{
      .name = inst.name(), .meta = inst.metadata(), .body = std::move(g), .role = roles_.Of(inst)};
}

// An all-reduce, reduce-scatter or all-gather: `count` is what NCCL takes
// (program::AllReduceThunk), the smaller of the two sides.
StatusOr<Thunk> EntryPlanBuilder::CollectiveThunk(const Instruction& inst) {
  using program::CollectiveOp;
  const CollectiveOp op = inst.opcode() == Opcode::kReduceScatter ? CollectiveOp::kReduceScatter
                          : inst.opcode() == Opcode::kAllGather   ? CollectiveOp::kAllGather
                                                                  : CollectiveOp::kAllReduce;
  program::AllReduceThunk a{.reduce = inst.attrs().reduce_kind,
                            .dtype = inst.shape().dtype(),
                            .count = op == CollectiveOp::kAllGather
                                         ? inst.operand(0)->shape().num_elements()
                                         : inst.shape().num_elements(),
                            .collective = op};
  ASSIGN_OR_RETURN(a.in, SliceOf(inst.operand(0)));
  ASSIGN_OR_RETURN(a.out, SliceOf(&inst));
  const bool overlap =
      a.in.offset < a.out.offset + a.out.size && a.out.offset < a.in.offset + a.in.size;
  if (op != CollectiveOp::kAllReduce && overlap) {
    return Error("%{}: the {}'s operand and result overlap in the arena", inst.name(),
                 ir::OpcodeName(inst.opcode()));
  }
  collectives_.push_back({static_cast<int64_t>(plan_.thunks.size()), &inst});
  return Thunk{
      .name = inst.name(), .meta = inst.metadata(), .body = std::move(a), .role = roles_.Of(inst)};
}

StatusOr<Thunk> EntryPlanBuilder::CopyThunk(const Instruction& inst) const {
  program::CopyThunk c;
  ASSIGN_OR_RETURN(c.src, SliceOf(inst.operand(0)));
  ASSIGN_OR_RETURN(c.dst, SliceOf(&inst));
  c.bytes = c.dst.size;
  return Thunk{.name = inst.name(), .body = std::move(c), .role = roles_.Of(inst)};
}

StatusOr<Thunk> EntryPlanBuilder::ConstantThunk(const Instruction& inst) const {
  program::ConstantThunk k{.dtype = inst.shape().dtype(), .values = inst.attrs().literal};
  ASSIGN_OR_RETURN(k.dst, SliceOf(&inst));
  return Thunk{.name = inst.name(), .body = std::move(k), .role = roles_.Of(inst)};
}

// Donations that could not be done in place: copy output -> parameter after
// the step.
Status EntryPlanBuilder::AddDonationCopies() {
  std::vector<ir::Instruction*> params = c_.parameters();
  for (const analysis::BufferAssignment::DonationCopy& copy : ba_.copies()) {
    program::CopyThunk c{.reason = copy.reason};
    ASSIGN_OR_RETURN(c.src, SliceOf(RootElement(copy.output)));
    ASSIGN_OR_RETURN(c.dst, SliceOf(params[copy.parameter]));
    c.bytes = c.src.size;
    // The copy finishes the output's value: its role is that value's.
    Push({.name = fmt::format("donation.out{}.in{}", copy.output, copy.parameter),
          .body = std::move(c),
          .role = roles_.Of(*RootElement(copy.output))});
  }
  return Status::Ok();
}

// The signature's slots with the slices where the caller puts and finds them.
Status EntryPlanBuilder::AddSlots() {
  std::vector<ir::Instruction*> params = c_.parameters();
  for (size_t i = 0; i < entry_.signature.inputs.size(); ++i) {
    program::PlanSlot s{entry_.signature.inputs[i]};
    ASSIGN_OR_RETURN(s.slice, SliceOf(params[i]));
    plan_.inputs.push_back(std::move(s));
  }
  for (size_t i = 0; i < entry_.signature.outputs.size(); ++i) {
    program::PlanSlot s{entry_.signature.outputs[i]};
    ASSIGN_OR_RETURN(s.slice, SliceOf(RootElement(static_cast<int64_t>(i))));
    plan_.outputs.push_back(std::move(s));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<program::EntryPlan> BuildEntryPlan(const program::TrainEntry& entry,
                                            const analysis::BufferAssignment& ba,
                                            const codegen::CompiledKernels& kernels,
                                            PlanStats& stats) {
  return EntryPlanBuilder(entry, ba, kernels, stats).Build();
}

}  // namespace gptc::artifact
