#include "passes/train_step.h"

#include <algorithm>

#include "passes/all_reduce_combiner.h"
#include "passes/autodiff.h"
#include "passes/bf16_bias_gradients.h"
#include "passes/cse.h"
#include "passes/data_parallel.h"
#include "passes/dce.h"
#include "passes/distribute_row_sums.h"
#include "passes/fusion.h"
#include "passes/schedule.h"
#include "passes/simplify.h"

namespace gptc::passes {

Status CheckSignature(const ir::Module& module, const EntrySignature& sig) {
  const ir::Computation* entry = module.entry();
  std::vector<ir::Instruction*> params = entry->parameters();
  if (params.size() != sig.inputs.size()) {
    return Error("%{}: {} parameters, the signature has {} inputs", entry->name(), params.size(),
                 sig.inputs.size());
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i]->name() != sig.inputs[i].name || params[i]->shape() != sig.inputs[i].shape) {
      return Error("%{}: parameter {} is %{} {}, the signature's input {} is %{} {}",
                   entry->name(), i, params[i]->name(), params[i]->shape().ToString(), i,
                   sig.inputs[i].name, sig.inputs[i].shape.ToString());
    }
  }
  const ir::Shape& root = entry->root()->shape();
  if (!root.is_tuple() || root.tuple_elements().size() != sig.outputs.size()) {
    return Error("%{}: root is {}, expected a tuple of {} outputs", entry->name(),
                 root.ToString(), sig.outputs.size());
  }
  for (size_t i = 0; i < sig.outputs.size(); ++i) {
    if (root.tuple_elements()[i] != sig.outputs[i].shape) {
      return Error("%{}: output {} is {}, expected {} for {}", entry->name(), i,
                   root.tuple_elements()[i].ToString(), sig.outputs[i].shape.ToString(),
                   sig.outputs[i].name);
    }
  }
  return Status::Ok();
}

std::string DescribeSignature(const EntrySignature& signature) {
  std::string out;
  auto line = [&](std::string_view dir, size_t i, const Slot& s) {
    std::string role(SlotRoleName(s.role));
    if (s.index >= 0) role += fmt::format("[{}]", s.index);
    out += fmt::format("{} {} {} %{} {}", dir, i, role, s.name, s.shape.ToString());
  };
  for (size_t i = 0; i < signature.inputs.size(); ++i) {
    line("in", i, signature.inputs[i]);
    out += "\n";
  }
  for (size_t i = 0; i < signature.outputs.size(); ++i) {
    line("out", i, signature.outputs[i]);
    for (auto [o, in] : signature.donations) {
      if (o == static_cast<int64_t>(i)) out += fmt::format(" donates in {}", in);
    }
    out += "\n";
  }
  return out;
}

namespace {

// Note [entry signature] (frontend/tracer.h): `module`'s entry parameters
// are `params` (names and shapes), then `inputs` (shapes). Errors name the
// module.
Status CheckEntryInputs(const ir::Module& module, const std::vector<program::ParamSpec>& params,
                        const std::vector<program::InputSpec>& inputs) {
  std::vector<ir::Instruction*> entry = module.entry()->parameters();
  const size_t n = params.size();
  if (entry.size() != n + inputs.size()) {
    return Error("{}: {} parameters, expected {} params + {} data inputs", module.name(),
                 entry.size(), n, inputs.size());
  }
  for (size_t i = 0; i < n; ++i) {
    if (entry[i]->name() != params[i].name || entry[i]->shape() != params[i].shape) {
      return Error("{}: parameter {} is %{} {}, the train step has {} {}", module.name(), i,
                   entry[i]->name(), entry[i]->shape().ToString(), params[i].name,
                   params[i].shape.ToString());
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Instruction* p = entry[n + i];
    if (p->shape() != inputs[i].shape) {
      return Error("{}: parameter {} is %{} {}, the input {} is {}", module.name(), n + i,
                   p->name(), p->shape().ToString(), inputs[i].name, inputs[i].shape.ToString());
    }
  }
  return Status::Ok();
}

// `data_roles`: the entry's data inputs' (none for apply).
StatusOr<TrainEntry> RunOptimizer(EntryRole role, std::unique_ptr<ir::Module> module,
                                  OptimizerMode mode, int64_t num_params,
                                  std::vector<SlotRole> data_roles,
                                  const TrainStepOptions& options) {
  pass::Pipeline pipeline(std::string(program::EntryRoleName(role)), options.pipeline);
  if (options.dumps != nullptr) pipeline.set_dump_writer(options.dumps);
  // Autodiff ran with loss_scale 1/world: the gradients come divided already.
  // ZeRO-1: the optimizer reduce-scatters them itself, only the loss is
  // all-reduced here.
  const bool zero = options.zero_stage >= 1;
  const DataParallelOptions dp{.world_size = options.world_size,
                               .mode = mode,
                               .gradients_prescaled = true,
                               .gradients = !zero};
  // Gradients (and the loss) are averaged over ranks before the optimizer
  // reads them; apply's gradients are inputs the optimizer creates, so there
  // the pass runs after it.
  if (options.world_size > 1 && mode != OptimizerMode::kApply) pipeline.AddPass<DataParallel>(dp);
  const Optimizer& optimizer =
      pipeline.AddPass<Optimizer>(OptimizerOptions{.adamw = options.adamw,
                                                   .mode = mode,
                                                   .grad_accum = options.grad_accum,
                                                   .zero_world = zero ? options.world_size : 1,
                                                   .grad_comm = options.grad_comm,
                                                   .data_roles = std::move(data_roles)});
  if (options.world_size > 1 && mode == OptimizerMode::kApply && !zero) {
    pipeline.AddPass<DataParallel>(dp);
  }
  pipeline.AddPass<Dce>();
  if (options.optimize) {
    // Simplify and CSE before remat: CSE after remat would merge the
    // recomputed clones back into the values they replace.
    pipeline.AddPass<Simplify>();
    pipeline.AddPass<Cse>();
    pipeline.AddPass<Dce>();
    pipeline.AddPass<Remat>(options.remat);
    pipeline.AddPass<Fusion>();
    pipeline.AddPass<Schedule>();
  }
  // Last: the buckets follow the final order (Note [all-reduce buckets]).
  if (options.world_size > 1) {
    pipeline.AddPass<AllReduceCombiner>(
        AllReduceCombinerOptions{.bucket_bytes = options.all_reduce_bucket_bytes,
                                 .first_bucket_bytes = options.first_bucket_bytes});
  }
  RETURN_IF_ERROR(pipeline.Run(*module).status());
  // Note [optimizer signature]: the optimizer's, still true of the final module.
  RETURN_IF_ERROR(CheckSignature(*module, optimizer.signature()));
  return TrainEntry{role, std::move(module), optimizer.signature()};
}

}  // namespace

StatusOr<TrainProgram> BuildTrainProgram(std::unique_ptr<ir::Module> forward,
                                         std::vector<program::ParamSpec> params,
                                         const std::vector<program::InputSpec>& inputs,
                                         const TrainStepOptions& options) {
  if (options.grad_accum < 1) return Error("--grad-accum must be >= 1, got {}", options.grad_accum);
  if (options.world_size < 1) return Error("--dp must be >= 1, got {}", options.world_size);
  if (options.zero_stage != 0 && (options.zero_stage != 1 || options.world_size < 2)) {
    return Error("--zero {} with --dp {}: ZeRO-1 (--zero 1) shards over two or more ranks",
                 options.zero_stage, options.world_size);
  }
  if (options.grad_comm != ir::DType::kF32 &&
      (options.zero_stage == 0 || options.grad_comm != ir::DType::kBF16)) {
    return Error("--grad-comm {} needs --zero 1 (and is f32 or bf16)",
                 ir::DTypeName(options.grad_comm));
  }
  const int64_t n = static_cast<int64_t>(params.size());
  RETURN_IF_ERROR(CheckEntryInputs(*forward, params, inputs).WithPrefix("train step"));
  std::vector<SlotRole> data_roles;
  for (const program::InputSpec& input : inputs) data_roles.push_back(input.role);
  pass::Pipeline gradients("gradients", options.pipeline);
  if (options.dumps != nullptr) gradients.set_dump_writer(options.dumps);
  if (options.precision.policy != PrecisionPolicy::kF32) {
    gradients.AddPass<MixedPrecision>(options.precision);
  }
  // Data parallelism: seed the backward with 1/world, so every gradient comes
  // out divided at no cost (Note [scale first] in passes/data_parallel.h).
  gradients.AddPass<Autodiff>(
      AutodiffOptions{.loss_scale = 1.0 / static_cast<double>(options.world_size)});
  if (options.precision.policy != PrecisionPolicy::kF32) gradients.AddPass<Bf16BiasGradients>();
  gradients.AddPass<DistributeRowSums>();
  gradients.AddPass<Dce>();
  RETURN_IF_ERROR(gradients.Run(*forward).status());

  TrainProgram program;
  program.params = std::move(params);
  program.grad_accum = options.grad_accum;
  program.world_size = options.world_size;
  program.zero_stage = options.zero_stage;
  program.adamw = options.adamw;
  if (options.grad_accum == 1) {
    ASSIGN_OR_RETURN(TrainEntry step, RunOptimizer(EntryRole::kTrainStep, std::move(forward),
                                                   OptimizerMode::kStep, n, data_roles, options));
    program.entries.push_back(std::move(step));
    return program;
  }
  std::unique_ptr<ir::Module> apply = forward->Clone();
  const std::string model = forward->name();
  forward->set_name(model + ".accumulate");
  apply->set_name(model + ".apply");
  ASSIGN_OR_RETURN(TrainEntry acc,
                   RunOptimizer(EntryRole::kAccumulate, std::move(forward),
                                OptimizerMode::kAccumulate, n, data_roles, options));
  ASSIGN_OR_RETURN(TrainEntry app, RunOptimizer(EntryRole::kApply, std::move(apply),
                                                OptimizerMode::kApply, n, {}, options));
  program.entries.push_back(std::move(acc));
  program.entries.push_back(std::move(app));
  return program;
}

namespace {

// A forward entry's data slots: `module`'s entry parameters are the
// program's parameters, then `inputs` (CheckEntryInputs), whose roles are
// `roles` in some order. Errors name the module.
StatusOr<std::vector<Slot>> ForwardDataSlots(const TrainProgram& program, const ir::Module& module,
                                             const std::vector<program::InputSpec>& inputs,
                                             std::vector<SlotRole> roles) {
  RETURN_IF_ERROR(CheckEntryInputs(module, program.params, inputs));
  std::vector<ir::Instruction*> params = module.entry()->parameters();
  const size_t n = program.params.size();
  std::vector<Slot> slots;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto it = std::find(roles.begin(), roles.end(), inputs[i].role);
    if (it == roles.end()) {
      return Error("{}: input {} is {} data, expected {} inputs", module.name(), inputs[i].name,
                   program::SlotRoleName(inputs[i].role), inputs.size());
    }
    roles.erase(it);
    slots.push_back({inputs[i].role, -1, params[n + i]->name(), inputs[i].shape});
  }
  if (!roles.empty()) {
    return Error("{}: no {} input", module.name(), program::SlotRoleName(roles.front()));
  }
  return slots;
}

// The slot of role `role` among `slots` (ForwardDataSlots found it).
const Slot& SlotOf(const std::vector<Slot>& slots, SlotRole role) {
  return *std::find_if(slots.begin(), slots.end(), [&](const Slot& s) { return s.role == role; });
}

// The passes of a forward-only entry: no autodiff, optimizer or remat.
Status OptimizeForward(ir::Module& module, EntryRole role, const TrainStepOptions& options) {
  pass::Pipeline pipeline(std::string(program::EntryRoleName(role)), options.pipeline);
  if (options.dumps != nullptr) pipeline.set_dump_writer(options.dumps);
  if (options.precision.policy != PrecisionPolicy::kF32) {
    pipeline.AddPass<MixedPrecision>(options.precision);
  }
  pipeline.AddPass<Simplify>();
  pipeline.AddPass<Cse>();
  pipeline.AddPass<Dce>();
  if (options.optimize) {
    pipeline.AddPass<Fusion>();
    pipeline.AddPass<Schedule>();
  }
  return pipeline.Run(module).status();
}

// The entry's inputs: the parameters, then `data`.
EntrySignature ForwardSignature(const TrainProgram& program, std::vector<Slot> data) {
  EntrySignature sig;
  for (int64_t i = 0; i < static_cast<int64_t>(program.params.size()); ++i) {
    sig.inputs.push_back({SlotRole::kParam, i, program.params[i].name, program.params[i].shape});
  }
  for (Slot& slot : data) sig.inputs.push_back(std::move(slot));
  return sig;
}

// The root's one value (a root tuple of one element is unwrapped).
ir::Shape SingleOutput(const ir::Module& module) {
  const ir::Shape& root = module.entry()->root()->shape();
  return root.is_tuple() && root.tuple_elements().size() == 1 ? root.tuple_elements()[0] : root;
}

}  // namespace

Status AddLogitsEntry(TrainProgram& program, std::unique_ptr<ir::Module> logits,
                      const std::vector<program::InputSpec>& inputs,
                      const TrainStepOptions& options) {
  if (program.Find(EntryRole::kLogits) != nullptr)
    return Error("train program already has a logits entry");
  StatusOr<std::vector<Slot>> data =
      ForwardDataSlots(program, *logits, inputs, {SlotRole::kTokens});
  if (!data.ok()) return data.status().WithPrefix("logits module");
  const ir::Shape tokens = SlotOf(*data, SlotRole::kTokens).shape;
  if (tokens.dtype() != ir::DType::kS32 || tokens.rank() != 2 || tokens.dims()[0] != 1) {
    return Error("logits module {}: tokens are {}, expected s32[1,T]", logits->name(),
                 tokens.ToString());
  }
  EntrySignature sig = ForwardSignature(program, std::move(*data));
  RETURN_IF_ERROR(OptimizeForward(*logits, EntryRole::kLogits, options));
  const ir::Shape out = SingleOutput(*logits);
  if (out.is_tuple() || out.rank() != 3 || out.dims()[1] != tokens.dims()[1]) {
    return Error("logits module {}: root is {}, expected [1,{},V]", logits->name(),
                 logits->entry()->root()->shape().ToString(), tokens.dims()[1]);
  }
  sig.outputs.push_back({SlotRole::kLogits, -1, "logits", out});
  program.entries.push_back(TrainEntry{EntryRole::kLogits, std::move(logits), std::move(sig)});
  return Status::Ok();
}

Status AddEvalEntry(TrainProgram& program, std::unique_ptr<ir::Module> forward,
                    const std::vector<program::InputSpec>& inputs,
                    const TrainStepOptions& options) {
  if (program.Find(EntryRole::kEval) != nullptr)
    return Error("train program already has an eval entry");
  StatusOr<std::vector<Slot>> data =
      ForwardDataSlots(program, *forward, inputs, {SlotRole::kTokens, SlotRole::kTargets});
  if (!data.ok()) return data.status().WithPrefix("eval module");
  const ir::Shape tokens = SlotOf(*data, SlotRole::kTokens).shape;
  const ir::Shape targets = SlotOf(*data, SlotRole::kTargets).shape;
  if (tokens.dtype() != ir::DType::kS32 || tokens.rank() != 2 || targets != tokens) {
    return Error("eval module {}: tokens and targets are {} and {}, expected s32[B,T] both",
                 forward->name(), tokens.ToString(), targets.ToString());
  }
  EntrySignature sig = ForwardSignature(program, std::move(*data));
  RETURN_IF_ERROR(OptimizeForward(*forward, EntryRole::kEval, options));
  const ir::Shape loss = SingleOutput(*forward);
  if (loss != ir::Shape::Scalar(ir::DType::kF32)) {
    return Error("eval module {}: root is {}, expected the f32[] loss", forward->name(),
                 forward->entry()->root()->shape().ToString());
  }
  sig.outputs.push_back({SlotRole::kLoss, -1, "loss", loss});
  program.entries.push_back(TrainEntry{EntryRole::kEval, std::move(forward), std::move(sig)});
  return Status::Ok();
}

Status AddScoreEntry(TrainProgram& program, std::unique_ptr<ir::Module> score,
                     const std::vector<program::InputSpec>& inputs,
                     const TrainStepOptions& options) {
  if (program.Find(EntryRole::kScore) != nullptr)
    return Error("train program already has a score entry");
  StatusOr<std::vector<Slot>> data = ForwardDataSlots(
      program, *score, inputs, {SlotRole::kTokens, SlotRole::kTargets, SlotRole::kMask});
  if (!data.ok()) return data.status().WithPrefix("score module");
  const ir::Shape tokens = SlotOf(*data, SlotRole::kTokens).shape;
  for (SlotRole role : {SlotRole::kTargets, SlotRole::kMask}) {
    const ir::Shape& other = SlotOf(*data, role).shape;
    if (tokens.dtype() != ir::DType::kS32 || tokens.rank() != 2 || other != tokens) {
      return Error("score module {}: tokens and {} are {} and {}, expected s32[B,T] both",
                   score->name(), program::SlotRoleName(role), tokens.ToString(),
                   other.ToString());
    }
  }
  EntrySignature sig = ForwardSignature(program, std::move(*data));
  RETURN_IF_ERROR(OptimizeForward(*score, EntryRole::kScore, options));
  const ir::Shape row(ir::DType::kF32, {tokens.dims()[0]});
  const ir::Shape& root = score->entry()->root()->shape();
  if (!root.is_tuple() || root.tuple_elements() != std::vector<ir::Shape>{row, row}) {
    return Error("score module {}: root is {}, expected ({}, {}): loss sums and token counts",
                 score->name(), root.ToString(), row.ToString(), row.ToString());
  }
  sig.outputs.push_back({SlotRole::kLossSums, -1, "loss_sums", row});
  sig.outputs.push_back({SlotRole::kTokenCounts, -1, "token_counts", row});
  program.entries.push_back(TrainEntry{EntryRole::kScore, std::move(score), std::move(sig)});
  return Status::Ok();
}

}  // namespace gptc::passes
