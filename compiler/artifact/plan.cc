#include "compiler/artifact/plan.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/ir/computation.h"
#include "passes/fusion.h"

namespace gptc::artifact {

namespace {

using nlohmann::json;
using ir::Instruction;
using ir::Opcode;

json SliceJson(const passes::Slice& s) { return json{{"offset", s.offset}, {"size", s.size}}; }

// The slice of leaf `leaf` of `inst` with the id of its buffer (Note [plan
// buffers]).
StatusOr<json> BufferJson(const passes::BufferAssignment& ba, const Instruction* inst,
                          int64_t leaf = 0) {
  ASSIGN_OR_RETURN(passes::Slice s, ba.GetSlice(inst, leaf));
  json j = SliceJson(s);
  if (const passes::BufferAssignment::Buffer* b = ba.GetBuffer(inst, leaf)) j["buffer"] = b->id;
  return j;
}

json LayoutJson(const MatrixLayout& l) {
  return json{{"dtype", l.dtype},           {"rows", l.rows},
              {"cols", l.cols},             {"ld", l.ld},
              {"batch_count", l.batch_count}, {"batch_stride", l.batch_stride}};
}

json Dim3Json(const codegen::Dim3& d) { return json::array({d.x, d.y, d.z}); }

// A kernel thunk of `inst`: its launch and its argument slices (operands,
// then results: Note [kernel ABI]).
StatusOr<json> KernelThunk(const Instruction& inst, const codegen::CompiledKernel& kernel,
                           const std::string& kind, const passes::BufferAssignment& ba,
                           int64_t scratch_offset) {
  const codegen::KernelSpec& spec = kernel.spec;
  json args = json::array();
  int64_t operands = 0;
  for (const codegen::KernelParam& p : spec.params) {
    json arg;
    if (p.role == codegen::KernelParam::Role::kOperand) {
      ASSIGN_OR_RETURN(arg, BufferJson(ba, inst.operand(p.index)));
      ++operands;
    } else if (p.role == codegen::KernelParam::Role::kScratch) {
      // Note [split column reductions]: past the arena's buffers, in no buffer.
      arg = json{{"offset", scratch_offset}, {"size", p.shape.byte_size()}, {"buffer", -1}};
    } else {
      ASSIGN_OR_RETURN(arg, BufferJson(ba, &inst, p.index));
    }
    args.push_back(std::move(arg));
  }
  return json{{"kind", "kernel"},
              {"name", spec.name},
              {"fusion", inst.name()},
              {"fusion_kind", kind},
              {"meta", inst.metadata()},
              {"grid", Dim3Json(spec.grid)},
              {"block", Dim3Json(spec.block)},
              {"dynamic_smem", spec.dynamic_shared_bytes},
              {"args", std::move(args)},
              {"operands", operands}};
}

json Unsupported(const Instruction& inst, std::string what, std::string reason) {
  return json{{"kind", "unsupported"}, {"name", inst.name()}, {"meta", inst.metadata()},
              {"what", std::move(what)}, {"reason", std::move(reason)}};
}

StatusOr<json> GemmThunk(const Instruction& inst, const GemmPlan& plan,
                         const passes::BufferAssignment& ba) {
  json t{{"kind", "gemm"}, {"name", inst.name()}, {"meta", inst.metadata()},
         {"descriptor", GemmPlanToJson(plan)}};
  auto operand = [&](int64_t i) { return BufferJson(ba, inst.operand(i)); };
  auto output = [&](int64_t i) { return BufferJson(ba, &inst, i); };
  ASSIGN_OR_RETURN(t["a"], operand(plan.a_operand));
  ASSIGN_OR_RETURN(t["b"], operand(plan.b_operand));
  ASSIGN_OR_RETURN(t["d"], output(plan.d_output));
  if (plan.c_operand >= 0) {
    ASSIGN_OR_RETURN(t["c"], operand(plan.c_operand));
  } else {
    t["c"] = t["d"];
  }
  if (plan.bias_operand >= 0) {
    ASSIGN_OR_RETURN(t["bias"], operand(plan.bias_operand));
  }
  if (plan.aux_output >= 0) {
    ASSIGN_OR_RETURN(t["aux"], output(plan.aux_output));
  }
  if (plan.aux_operand >= 0) {
    ASSIGN_OR_RETURN(t["aux"], operand(plan.aux_operand));
  }
  if (plan.bias_grad_output >= 0) {
    ASSIGN_OR_RETURN(t["bias"], output(plan.bias_grad_output));
  }
  return t;
}

// The first thunk that reads `value` (through tuples, get-tuple-elements
// and reshapes, which launch nothing), or `end` when only the caller does.
int64_t FirstReader(const Instruction* value,
                    const std::unordered_map<const Instruction*, int64_t>& first_thunk,
                    int64_t end) {
  int64_t first = end;
  std::vector<const Instruction*> stack(value->users().begin(), value->users().end());
  std::unordered_set<const Instruction*> seen;
  while (!stack.empty()) {
    const Instruction* user = stack.back();
    stack.pop_back();
    if (!seen.insert(user).second) continue;
    if (auto it = first_thunk.find(user); it != first_thunk.end()) {
      first = std::min(first, it->second);
    } else {
      stack.insert(stack.end(), user->users().begin(), user->users().end());
    }
  }
  return first;
}

// Note [all-reduce buckets] (plan.h): packs the all_reduce thunks into buckets.
json Buckets(json& thunks, const std::vector<std::pair<int64_t, const Instruction*>>& all_reduces,
             const std::unordered_map<const Instruction*, int64_t>& first_thunk, int64_t end) {
  json buckets = json::array();
  json current;
  int64_t bytes = 0, wait_before = end;
  auto close = [&] {
    if (current.is_null()) return;
    current["bytes"] = bytes;
    current["issue_after"] = current["members"].back();
    current["wait_before"] = wait_before;
    buckets.push_back(std::move(current));
    current = json();
  };
  for (const auto& [index, inst] : all_reduces) {
    const int64_t size = thunks[index]["in"]["size"].get<int64_t>();
    // A member's result must not be read before the bucket is issued (at its
    // last member), and a bucket stops growing at the size cap.
    if (!current.is_null() && (index >= wait_before || bytes + size > kAllReduceBucketBytes)) {
      close();
    }
    if (current.is_null()) {
      current = json{{"id", buckets.size()}, {"members", json::array()}};
      bytes = 0;
      wait_before = end;
    }
    current["members"].push_back(index);
    bytes += size;
    wait_before = std::min(wait_before, FirstReader(inst, first_thunk, end));
    thunks[index]["bucket"] = current["id"];
  }
  close();
  return buckets;
}

json SlotJson(const program::Slot& slot, const json& slice) {
  json j{{"role", program::SlotRoleName(slot.role)},
         {"index", slot.index},
         {"name", slot.name},
         {"shape", slot.shape.ToString()},
         {"offset", slice["offset"]},
         {"size", slice["size"]}};
  if (slice.contains("buffer")) j["buffer"] = slice["buffer"];
  return j;
}

// Note [plan buffers]: every buffer of the entry's arena, so that the
// emulator can tell two values apart that share memory at different times
// (runtime/emu/: a thunk must read what its operand's producer wrote).
json BuffersJson(const passes::BufferAssignment& ba) {
  json buffers = json::array();
  for (const passes::BufferAssignment::Buffer& b : ba.buffers()) {
    std::string name = b.defining != nullptr ? b.defining->name() : "?";
    if (b.leaf > 0) name += fmt::format("{{{}}}", b.leaf);
    buffers.push_back(json{{"id", b.id},
                           {"name", std::move(name)},
                           {"offset", b.slice.offset},
                           {"size", b.slice.size}});
  }
  return buffers;
}

}  // namespace

json GemmPlanToJson(const GemmPlan& p) {
  json j{{"compute_type", p.compute_type},
         {"scale_type", p.scale_type},
         {"transa", p.transa},
         {"transb", p.transb},
         {"m", p.m},
         {"n", p.n},
         {"k", p.k},
         {"batch_count", p.batch_count},
         {"a", LayoutJson(p.a)},
         {"b", LayoutJson(p.b)},
         {"c", LayoutJson(p.c)},
         {"d", LayoutJson(p.d)},
         {"alpha", p.alpha},
         {"beta", p.beta},
         {"epilogue", p.epilogue},
         {"workspace_bytes", p.workspace_bytes}};
  if (!p.bias_dtype.empty()) j["bias_dtype"] = p.bias_dtype;
  if (p.aux_output >= 0 || p.aux_operand >= 0) j["aux_ld"] = p.aux_ld;
  if (!p.notes.empty()) j["notes"] = p.notes;
  return j;
}

StatusOr<json> BuildEntryPlan(const program::TrainEntry& entry,
                              const passes::BufferAssignment& ba,
                              const codegen::CompiledKernels& kernels, PlanStats& stats) {
  const ir::Computation& c = *entry.module->entry();
  // An instruction may need several kernels, launched in the order codegen
  // lists them (Note [multi-kernel instructions]: scatter-add's init, then add).
  std::unordered_map<std::string, std::vector<const codegen::CompiledKernel*>> by_fusion;
  for (const codegen::CompiledKernel& k : kernels.kernels) by_fusion[k.spec.fusion].push_back(&k);
  std::unordered_map<std::string, std::string> skipped;
  for (const codegen::SkippedFusion& s : kernels.skipped) skipped[s.fusion] = s.reason;

  // Note [split column reductions]: kernels that share scratch memory within
  // an instruction get it past the buffers (kernels run one at a time on the
  // compute stream, so one region serves all).
  const int64_t scratch_offset = (ba.arena_size() + 255) / 256 * 256;
  int64_t scratch_bytes = 0;
  for (const codegen::CompiledKernel& k : kernels.kernels) {
    for (const codegen::KernelParam& p : k.spec.params) {
      if (p.role == codegen::KernelParam::Role::kScratch) {
        scratch_bytes = std::max(scratch_bytes, p.shape.byte_size());
      }
    }
  }
  const int64_t arena_size = scratch_bytes > 0 ? scratch_offset + scratch_bytes : ba.arena_size();

  json thunks = json::array();
  // The first thunk of each instruction that launches work, and the all-reduces.
  std::unordered_map<const Instruction*, int64_t> first_thunk;
  std::vector<std::pair<int64_t, const Instruction*>> all_reduces;
  for (const auto& owned : c.instructions()) {
    const Instruction& inst = *owned;
    if (!passes::IsKernel(inst) && inst.opcode() != Opcode::kConstant &&
        inst.opcode() != Opcode::kCopy) {
      continue;  // parameters, tuples, get-tuple-elements, reshapes: no work
    }
    first_thunk[&inst] = static_cast<int64_t>(thunks.size());
    json t;
    bool is_gemm = inst.opcode() == Opcode::kDot ||
                   (inst.opcode() == Opcode::kFusion &&
                    inst.attrs().fusion_kind == ir::FusionKind::kGemm);
    if (is_gemm) {
      StatusOr<GemmPlan> plan = PlanGemm(inst);
      // Note [epilogue fallback kernels]: run only when the runtime has to
      // drop the gemm's epilogue: the bias gradient before the gemm, the
      // forward epilogue after it (reading the plain gemm's result in scratch).
      using Fallback = codegen::KernelSpec::GemmFallback;
      const bool bgrad = plan.ok() && plan->epilogue.starts_with("CUBLASLT_EPILOGUE_BGRAD");
      const bool forward = plan.ok() && !bgrad && plan->epilogue != "CUBLASLT_EPILOGUE_DEFAULT";
      std::vector<json> after;
      const codegen::KernelParam* scratch = nullptr;
      if (auto it = by_fusion.find(inst.name()); it != by_fusion.end() && (bgrad || forward)) {
        for (const codegen::CompiledKernel* kernel : it->second) {
          const Fallback f = kernel->spec.gemm_fallback;
          if (f == Fallback::kNone || (f == Fallback::kBiasGradient) != bgrad) continue;
          ASSIGN_OR_RETURN(
              json k, KernelThunk(inst, *kernel, bgrad ? "reduction" : "loop", ba, scratch_offset));
          k["fallback"] = true;
          ++stats.kernels_by_kind["gemm fallback"];
          ++stats.thunks["kernel"];
          if (bgrad) {
            thunks.push_back(std::move(k));
            continue;
          }
          for (const codegen::KernelParam& p : kernel->spec.params) {
            if (p.role == codegen::KernelParam::Role::kScratch) scratch = &p;
          }
          after.push_back(std::move(k));
        }
      }
      if (plan.ok()) {
        ASSIGN_OR_RETURN(t, GemmThunk(inst, *plan, ba));
        ++stats.epilogues[plan->epilogue];
        if (scratch != nullptr) {  // where the plain gemm puts the dot's f32 result
          t["fallback_d"] = json{
              {"offset", scratch_offset}, {"size", scratch->shape.byte_size()}, {"buffer", -1}};
        }
      } else {
        t = Unsupported(inst, "gemm layout", plan.status().message());
      }
      if (!after.empty()) {
        ++stats.thunks[t["kind"].get<std::string>()];
        thunks.push_back(std::move(t));
        for (json& k : after) thunks.push_back(std::move(k));
        continue;
      }
    } else if (auto it = by_fusion.find(inst.name()); it != by_fusion.end()) {
      std::string kind = inst.opcode() == Opcode::kFusion
                             ? std::string(ir::FusionKindName(inst.attrs().fusion_kind))
                             : std::string(ir::OpcodeName(inst.opcode()));
      for (const codegen::CompiledKernel* kernel : it->second) {
        ASSIGN_OR_RETURN(json t, KernelThunk(inst, *kernel, kind, ba, scratch_offset));
        ++stats.kernels_by_kind[kind];
        ++stats.thunks["kernel"];
        thunks.push_back(std::move(t));
      }
      continue;
    } else if (inst.opcode() == Opcode::kFusion) {
      std::string kind(ir::FusionKindName(inst.attrs().fusion_kind));
      auto s = skipped.find(inst.name());
      t = Unsupported(inst, "fusion kind " + kind,
                      s != skipped.end() ? s->second : "no kernel was compiled");
    } else if (inst.opcode() == Opcode::kAllReduce) {
      ASSIGN_OR_RETURN(json in, BufferJson(ba, inst.operand(0)));
      ASSIGN_OR_RETURN(json out, BufferJson(ba, &inst));
      t = json{{"kind", "all_reduce"},
               {"name", inst.name()},
               {"meta", inst.metadata()},
               {"reduce", inst.attrs().reduce_kind == ir::ReduceKind::kSum ? "sum" : "max"},
               {"dtype", ir::DTypeName(inst.shape().dtype())},
               {"count", inst.shape().num_elements()},
               {"in", std::move(in)},
               {"out", std::move(out)}};
      all_reduces.push_back({static_cast<int64_t>(thunks.size()), &inst});
    } else if (inst.opcode() == Opcode::kCopy && !inst.shape().is_tuple()) {
      ASSIGN_OR_RETURN(json in, BufferJson(ba, inst.operand(0)));
      ASSIGN_OR_RETURN(json out, BufferJson(ba, &inst));
      const int64_t bytes = out["size"].get<int64_t>();
      t = json{{"kind", "copy"},
               {"name", inst.name()},
               {"src", std::move(in)},
               {"dst", std::move(out)},
               {"bytes", bytes}};
    } else if (inst.opcode() == Opcode::kConstant && inst.shape().num_elements() <= 1024) {
      ASSIGN_OR_RETURN(json out, BufferJson(ba, &inst));
      t = json{{"kind", "constant"},
               {"name", inst.name()},
               {"dtype", ir::DTypeName(inst.shape().dtype())},
               {"values", inst.attrs().literal},
               {"dst", std::move(out)}};
    } else {
      t = Unsupported(inst, std::string(ir::OpcodeName(inst.opcode())),
                      fmt::format("{} has no emitter yet", ir::OpcodeName(inst.opcode())));
    }
    if (t["kind"] == "unsupported") ++stats.unsupported[t["what"].get<std::string>()];
    ++stats.thunks[t["kind"].get<std::string>()];
    thunks.push_back(std::move(t));
  }
  // Before the donation copies: a bucket waited for at the end of the step
  // completes before any copy reads its results.
  json buckets = Buckets(thunks, all_reduces, first_thunk, static_cast<int64_t>(thunks.size()));
  // Donations that could not be done in place: copy output -> parameter after the step.
  const ir::Instruction* root = c.root();
  std::vector<ir::Instruction*> params = c.parameters();
  for (const passes::BufferAssignment::DonationCopy& copy : ba.copies()) {
    const Instruction* out = root->opcode() == Opcode::kTuple ? root->operand(copy.output) : root;
    ASSIGN_OR_RETURN(json src, BufferJson(ba, out));
    ASSIGN_OR_RETURN(json dst, BufferJson(ba, params[copy.parameter]));
    const int64_t bytes = src["size"].get<int64_t>();
    thunks.push_back(json{{"kind", "copy"},
                          {"name", fmt::format("donation.out{}.in{}", copy.output, copy.parameter)},
                          {"src", std::move(src)},
                          {"dst", std::move(dst)},
                          {"bytes", bytes},
                          {"reason", copy.reason}});
    ++stats.thunks["copy"];
  }

  json inputs = json::array(), outputs = json::array(), donations = json::array();
  for (size_t i = 0; i < entry.signature.inputs.size(); ++i) {
    ASSIGN_OR_RETURN(json s, BufferJson(ba, params[i]));
    inputs.push_back(SlotJson(entry.signature.inputs[i], s));
  }
  for (size_t i = 0; i < entry.signature.outputs.size(); ++i) {
    const Instruction* out = root->opcode() == Opcode::kTuple ? root->operand(i) : root;
    ASSIGN_OR_RETURN(json s, BufferJson(ba, out));
    outputs.push_back(SlotJson(entry.signature.outputs[i], s));
  }
  for (auto [o, i] : entry.signature.donations) donations.push_back(json::array({o, i}));
  return json{{"name", entry.name},
              {"arena_size", arena_size},
              {"inputs", inputs},
              {"outputs", outputs},
              {"donations", donations},
              {"thunks", std::move(thunks)},
              {"buckets", std::move(buckets)},
              {"buffers", BuffersJson(ba)}};
}

}  // namespace gptc::artifact
