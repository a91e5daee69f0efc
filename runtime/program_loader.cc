#include "runtime/program_loader.h"

#include <utility>
#include <vector>

#include "compiler/ir/parser.h"
#include "compiler/program/gpt2_params.h"
#include "compiler/program/model_config.h"
#include "compiler/program/param.h"
#include "compiler/program/plan.h"

namespace gptc::rt {

namespace {

// One slot list of a plan entry, checked against the module's shapes.
StatusOr<std::vector<program::Slot>> ReadSlots(const std::vector<program::PlanSlot>& slots,
                                               std::string_view where,
                                               const std::vector<ir::Shape>& shapes) {
  if (slots.size() != shapes.size()) {
    return Error("{}: {} slots, the module has {}", where, slots.size(), shapes.size());
  }
  std::vector<program::Slot> out;
  for (size_t i = 0; i < slots.size(); ++i) {
    const program::Slot& s = slots[i];
    if (s.shape != shapes[i]) {
      return Error("{}[{}] ({} %{}): the plan says {}, the module has {}", where, i,
                   program::SlotRoleName(s.role), s.name, s.shape.ToString(), shapes[i].ToString());
    }
    out.push_back(s);
  }
  return out;
}

// The entry computation's parameter shapes and root (tuple elements) shapes.
std::pair<std::vector<ir::Shape>, std::vector<ir::Shape>> EntryShapes(const ir::Module& m) {
  std::vector<ir::Shape> in, out;
  for (const ir::Instruction* p : m.entry()->parameters()) in.push_back(p->shape());
  const ir::Shape& root = m.entry()->root()->shape();
  if (root.is_tuple()) {
    out = root.tuple_elements();
  } else {
    out.push_back(root);
  }
  return {in, out};
}

// Note [manifest against program]: the manifest's model and flags are what
// the tools print and act on (the data loader's batch, seq and vocabulary
// bound, the banner, a checkpoint's config), the IR and the params are what
// runs. A file whose checksum was recomputed after an edit can make them
// disagree, so they are compared once, here: the parameters must be the
// GPT-2 of manifest.model, and every entry's tokens and targets
// [batch (1 for logits), seq], its logits [1, seq, padded_vocab].
Status CheckParamsAgainstModel(const std::vector<program::ParamSpec>& params,
                               const program::ModelConfig& model) {
  RETURN_IF_ERROR(program::CheckModelConfig(model, "manifest.model"));
  // Counted first: the list is built only once they agree.
  const int64_t count = program::Gpt2ParamCount(model);
  if (static_cast<int64_t>(params.size()) != count) {
    return Error("manifest.model ({} layers) has {} parameters, section 'params' holds {}",
                 model.layers, count, params.size());
  }
  const std::vector<program::Gpt2Param> want = program::Gpt2Params(model);
  for (size_t i = 0; i < want.size(); ++i) {
    if (params[i].name != want[i].name || params[i].shape.dims() != want[i].shape) {
      return Error("section 'params' [{}] is {} {}, manifest.model makes it {} {}", i,
                   params[i].name, params[i].shape.ToString(), want[i].name,
                   ir::Shape(params[i].shape.dtype(), want[i].shape).ToString());
    }
  }
  return Status::Ok();
}

Status CheckSlotsAgainstFlags(const program::TrainEntry& entry, const program::ModelConfig& model,
                              const program::CompileFlags& flags) {
  using program::SlotRole;
  if (flags.batch < 1 || flags.seq < 1 || flags.seq > model.positions) {
    return Error("manifest.flags: batch {} and seq {} must be positive, seq at most the model's "
                 "{} positions",
                 flags.batch, flags.seq, model.positions);
  }
  const bool logits = entry.role == program::EntryRole::kLogits;
  const std::vector<int64_t> data = {logits ? 1 : flags.batch, flags.seq};
  for (const program::Slot& s : entry.signature.inputs) {
    const bool batch_shaped =
        s.role == SlotRole::kTokens || s.role == SlotRole::kTargets || s.role == SlotRole::kMask;
    if (!batch_shaped) continue;
    const std::vector<int64_t>& dims = s.shape.dims();
    // Note [score window] (passes/train_step.h): rows of at most seq tokens,
    // no more tokens than the train step's.
    const bool fits = entry.role == program::EntryRole::kScore
                          ? dims.size() == 2 && dims[0] >= 1 && dims[1] >= 1 &&
                                dims[1] <= flags.seq && dims[0] * dims[1] <= flags.batch * flags.seq
                          : dims == data;
    if (!fits) {
      return Error("entry {} input %{} is {}; manifest.flags say batch {} and seq {}",
                   entry.name(), s.name, s.shape.ToString(), flags.batch, flags.seq);
    }
  }
  const std::vector<int64_t> logit_dims = {1, flags.seq, model.padded_vocab};
  for (const program::Slot& s : entry.signature.outputs) {
    if (s.role == SlotRole::kLogits && s.shape.dims() != logit_dims) {
      return Error("entry {} output %{} is {}; manifest says seq {} and padded_vocab {}",
                   entry.name(), s.name, s.shape.ToString(), flags.seq, model.padded_vocab);
    }
  }
  return Status::Ok();
}

// The elements over all parameters and over the matmul operands (MFU's N),
// by the table's rows: the parameters are the GPT-2 of `model` (checked), so
// the sums fit.
void CountValues(const program::ModelConfig& model, LoadedProgram& out) {
  const std::vector<program::Gpt2Param> table = program::Gpt2Params(model);
  for (size_t i = 0; i < table.size(); ++i) {
    const int64_t n = out.program.params[i].shape.num_elements();
    out.parameter_values += n;
    if (table[i].kind->matmul) out.matmul_values += n;
  }
}

// The program's training flags from the manifest's, checked.
Status ReadTrainingFlags(const program::CompileFlags& flags, program::TrainProgram& program) {
  program.grad_accum = flags.grad_accum;
  program.world_size = flags.world_size;
  program.zero_stage = flags.zero_stage;
  program.adamw = flags.adamw;
  if (program.grad_accum < 1) return Error("flags: grad_accum {} < 1", program.grad_accum);
  if (program.world_size < 1) return Error("flags: world_size {} < 1", program.world_size);
  if (program.zero_stage != 0 && (program.zero_stage != 1 || program.world_size < 2)) {
    return Error(
        "flags: zero_stage {} with world_size {} (ZeRO-1 needs zero_stage 1 and two or more "
        "ranks)",
        program.zero_stage, program.world_size);
  }
  // A step's tokens (batch x seq x grad_accum x world_size) must stay countable.
  constexpr int64_t kMaxMultiplier = int64_t{1} << 16;
  if (program.grad_accum > kMaxMultiplier || program.world_size > kMaxMultiplier) {
    return Error("flags: grad_accum {} or world_size {} is above {}", program.grad_accum,
                 program.world_size, kMaxMultiplier);
  }
  return Status::Ok();
}

StatusOr<LoadedProgram> Load(const program::Artifact& artifact) {
  const program::Manifest& manifest = artifact.manifest;
  LoadedProgram out{
      .model = manifest.model, .flags = manifest.flags, .complete = manifest.complete};
  program::TrainProgram& program = out.program;
  RETURN_IF_ERROR(ReadTrainingFlags(manifest.flags, program));
  ASSIGN_OR_RETURN(program.params, program::ParamsSectionFromJson(artifact.params));

  const std::string* ir_text = artifact.Find("ir");
  if (ir_text == nullptr) return Error("missing section 'ir'");
  StatusOr<std::vector<std::unique_ptr<ir::Module>>> modules = ir::ParseModules(*ir_text, "ir");
  if (!modules.ok()) return modules.status().WithPrefix("section 'ir'");
  // The signatures are the plan's slots (written once, there).
  ASSIGN_OR_RETURN(program::Plan plan, program::PlanFromJson(artifact.plan));
  if (plan.entries.size() != modules->size()) {
    return Error("section 'plan' lists {} entries, section 'ir' holds {} modules",
                 plan.entries.size(), modules->size());
  }
  for (size_t e = 0; e < plan.entries.size(); ++e) {
    const program::EntryPlan& entry = plan.entries[e];
    const std::string at = fmt::format("entry {}", entry.name());
    std::unique_ptr<ir::Module>& module = (*modules)[e];
    auto [in_shapes, out_shapes] = EntryShapes(*module);
    program::EntrySignature sig;
    ASSIGN_OR_RETURN(sig.inputs, ReadSlots(entry.inputs, at + " inputs", in_shapes));
    ASSIGN_OR_RETURN(sig.outputs, ReadSlots(entry.outputs, at + " outputs", out_shapes));
    sig.donations = entry.donations;
    for (auto [o, i] : sig.donations) {
      if (o < 0 || o >= static_cast<int64_t>(sig.outputs.size()) || i < 0 ||
          i >= static_cast<int64_t>(sig.inputs.size()) ||
          sig.outputs[o].shape != sig.inputs[i].shape) {
        return Error("{}: donation [{}, {}] does not pair an output with an input of its shape", at,
                     o, i);
      }
    }
    for (const program::Slot& s : sig.inputs) {
      const bool per_param =
          s.role == program::SlotRole::kParam || s.role == program::SlotRole::kAdamM ||
          s.role == program::SlotRole::kAdamV || s.role == program::SlotRole::kGradAcc ||
          s.role == program::SlotRole::kMaster;
      if (!per_param) continue;
      if (s.index < 0 || s.index >= static_cast<int64_t>(program.params.size()) ||
          s.shape != program::StateSlotShape(s.role, program.params[s.index].shape,
                                             program.zero_stage, program.world_size)) {
        return Error("{}: input %{} ({}[{}]) does not match a parameter of section 'params'", at,
                     s.name, program::SlotRoleName(s.role), s.index);
      }
    }
    program.entries.push_back({entry.role, std::move(module), std::move(sig)});
  }
  using program::EntryRole;
  const bool single = program.Find(EntryRole::kTrainStep) != nullptr;
  const bool split =
      program.Find(EntryRole::kAccumulate) != nullptr && program.Find(EntryRole::kApply) != nullptr;
  if (program.grad_accum == 1 ? !single : !split) {
    return Error("grad_accum {} needs entries {}", program.grad_accum,
                 program.grad_accum == 1 ? "train_step" : "accumulate and apply");
  }
  if (program.grad_accum == 1 && program.entries[0].role != EntryRole::kTrainStep) {
    return Error("the first entry is {}, expected train_step", program.entries[0].name());
  }
  RETURN_IF_ERROR(CheckParamsAgainstModel(program.params, manifest.model));
  for (const program::TrainEntry& entry : program.entries) {
    RETURN_IF_ERROR(CheckSlotsAgainstFlags(entry, manifest.model, manifest.flags));
  }
  CountValues(manifest.model, out);
  return out;
}

}  // namespace

StatusOr<LoadedProgram> LoadProgram(const program::Artifact& artifact, std::string_view path) {
  StatusOr<LoadedProgram> p = Load(artifact);
  if (!p.ok()) return p.status().WithPrefix(path);
  return p;
}

}  // namespace gptc::rt
