#include "runtime/cpu_device.h"

#include "compiler/eval/evaluator.h"
#include "runtime/init.h"

namespace gptc::rt {

using program::SlotRole;

MicroBatch PatternBatch(int64_t batch, int64_t seq, int64_t vocab, int64_t index,
                        int64_t cycle_length) {
  std::vector<int32_t> cycle(cycle_length);
  for (int64_t i = 0; i < cycle_length; ++i) {
    cycle[i] = static_cast<int32_t>(SplitMix64(static_cast<uint64_t>(i)) % vocab);
  }
  MicroBatch mb;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = static_cast<int64_t>(SplitMix64(index * 1000003 + b) % cycle_length);
    for (int64_t t = 0; t < seq; ++t) {
      mb.tokens.push_back(cycle[(start + t) % cycle_length]);
      mb.targets.push_back(cycle[(start + t + 1) % cycle_length]);
    }
  }
  return mb;
}

CpuTrainer::CpuTrainer(const program::TrainProgram* program, uint64_t seed) : program_(program) {
  for (size_t i = 0; i < program->params.size(); ++i) {
    const program::ParamSpec& spec = program->params[i];
    eval::Literal p = eval::Literal::Zeros(spec.shape);
    std::vector<float> init = InitParameter(spec, seed, i);
    p.values.assign(init.begin(), init.end());
    params_.push_back(std::move(p));
    adam_m_.push_back(eval::Literal::Zeros(spec.shape));
    adam_v_.push_back(eval::Literal::Zeros(spec.shape));
    if (program->grad_accum > 1) grad_acc_.push_back(eval::Literal::Zeros(spec.shape));
  }
}

eval::Literal* CpuTrainer::StateFor(const program::Slot& slot) {
  switch (slot.role) {
    case SlotRole::kParam: return &params_[slot.index];
    case SlotRole::kAdamM: return &adam_m_[slot.index];
    case SlotRole::kAdamV: return &adam_v_[slot.index];
    case SlotRole::kGradAcc: return &grad_acc_[slot.index];
    default: return nullptr;
  }
}

namespace {

eval::Literal ScalarLiteral(double value) {
  eval::Literal l = eval::Literal::Zeros(ir::Shape::Scalar(ir::DType::kF32));
  l.values[0] = static_cast<double>(static_cast<float>(value));
  return l;
}

StatusOr<eval::Literal> TokenLiteral(const program::Slot& slot, const std::vector<int32_t>& ids) {
  if (static_cast<int64_t>(ids.size()) != slot.shape.num_elements()) {
    return Error("input %{}: {} values given, {} needs {}", slot.name, ids.size(),
                 slot.shape.ToString(), slot.shape.num_elements());
  }
  eval::Literal l;
  l.shape = slot.shape;
  l.values.assign(ids.begin(), ids.end());
  return l;
}

}  // namespace

StatusOr<std::vector<eval::Literal>> CpuTrainer::Run(const program::TrainEntry& entry,
                                                     const MicroBatch* batch, double step,
                                                     double lr) {
  const program::EntrySignature& sig = entry.signature;
  if (!lost_.ok()) return lost_;
  // Move the state into the argument list (no copies) and back afterwards.
  std::vector<eval::Literal> args(sig.inputs.size());
  for (size_t i = 0; i < sig.inputs.size(); ++i) {
    const program::Slot& slot = sig.inputs[i];
    if (eval::Literal* state = StateFor(slot)) {
      args[i] = std::move(*state);
      continue;
    }
    switch (slot.role) {
      case SlotRole::kTokens: {
        ASSIGN_OR_RETURN(args[i], TokenLiteral(slot, batch->tokens));
        break;
      }
      case SlotRole::kTargets: {
        ASSIGN_OR_RETURN(args[i], TokenLiteral(slot, batch->targets));
        break;
      }
      case SlotRole::kMask: {
        ASSIGN_OR_RETURN(args[i], TokenLiteral(slot, batch->mask));
        break;
      }
      case SlotRole::kStep: args[i] = ScalarLiteral(step); break;
      case SlotRole::kLr: args[i] = ScalarLiteral(lr); break;
      default:
        return Error("{}: input {} (%{}) has role {} that the CPU trainer cannot feed",
                     entry.name(), i, slot.name, program::SlotRoleName(slot.role));
    }
  }
  eval::EvalOptions options;
  options.collective = collective_;
  options.workspace = workspace_.get();
  // The donated state is given up once converted: its storage holds the
  // results (the state replacing it).
  std::vector<bool> recycle(args.size(), false);
  for (auto [out, in] : sig.donations) recycle[in] = true;
  StatusOr<eval::Literal> result =
      sig.donations.empty() ? eval::Evaluate(*entry.module, args, options)
                            : eval::EvaluateRecycling(*entry.module, args, recycle, options);
  if (!result.ok()) {
    for (size_t i = 0; i < sig.inputs.size(); ++i) {
      if (eval::Literal* state = StateFor(sig.inputs[i])) *state = std::move(args[i]);
    }
    if (!sig.donations.empty()) {
      lost_ = Error("the CPU trainer's state was given up to a step that failed ({}: {})",
                    entry.name(), result.status().message());
    }
    return result.status().WithPrefix(entry.name());
  }
  std::vector<eval::Literal> outputs;
  if (result->shape.is_tuple()) {
    outputs = std::move(result->elements);
  } else {
    outputs.push_back(std::move(*result));
  }
  for (size_t i = 0; i < sig.inputs.size(); ++i) {
    if (eval::Literal* state = StateFor(sig.inputs[i])) *state = std::move(args[i]);
  }
  for (auto [out, in] : sig.donations) *StateFor(sig.inputs[in]) = std::move(outputs[out]);
  return outputs;
}

StatusOr<std::vector<eval::Literal>> CpuTrainer::Evaluate(const program::TrainEntry& entry,
                                                          const MicroBatch& batch) {
  if (!entry.signature.donations.empty()) {
    return Error("{}: the entry updates state; run it with Step", entry.name());
  }
  return Run(entry, &batch, static_cast<double>(steps_done_), 0.0);
}

Status CpuTrainer::SumOverRanks(std::span<double> values) {
  if (collective_ == nullptr) return Status::Ok();
  return collective_->AllReduce(ir::ReduceKind::kSum, values).WithPrefix("sum over ranks");
}

StatusOr<StepResult> CpuTrainer::Step(std::span<const MicroBatch> micro_batches, double lr) {
  const int64_t k = program_->grad_accum;
  if (static_cast<int64_t>(micro_batches.size()) != k) {
    return Error("step {}: {} micro-batches given, grad_accum is {}", steps_done_ + 1,
                 micro_batches.size(), k);
  }
  const double step = static_cast<double>(steps_done_ + 1);
  StepResult r;
  if (k == 1) {
    const program::TrainEntry& entry = program_->entries[0];
    ASSIGN_OR_RETURN(std::vector<eval::Literal> out, Run(entry, &micro_batches[0], step, lr));
    r.loss = out[entry.signature.FindOutput(SlotRole::kLoss)].values[0];
    r.grad_norm = out[entry.signature.FindOutput(SlotRole::kGradNorm)].values[0];
  } else {
    const program::TrainEntry* acc = program_->Find(program::EntryRole::kAccumulate);
    const program::TrainEntry* apply = program_->Find(program::EntryRole::kApply);
    if (acc == nullptr || apply == nullptr) return Error("train program lacks accumulate/apply");
    for (eval::Literal& g : grad_acc_) std::fill(g.values.begin(), g.values.end(), 0.0);
    for (const MicroBatch& mb : micro_batches) {
      ASSIGN_OR_RETURN(std::vector<eval::Literal> out, Run(*acc, &mb, step, lr));
      r.loss += out[acc->signature.FindOutput(SlotRole::kLoss)].values[0] / k;
    }
    ASSIGN_OR_RETURN(std::vector<eval::Literal> out, Run(*apply, nullptr, step, lr));
    r.grad_norm = out[apply->signature.FindOutput(SlotRole::kGradNorm)].values[0];
  }
  ++steps_done_;
  return r;
}

StatusOr<TrainerState> CpuTrainer::ExportState() {
  TrainerState state;
  state.steps_done = steps_done_;
  for (size_t i = 0; i < params_.size(); ++i) {
    for (auto [from, to] : {std::pair{&params_[i], &state.values}, std::pair{&adam_m_[i], &state.adam_m},
                            std::pair{&adam_v_[i], &state.adam_v}}) {
      to->emplace_back(from->values.begin(), from->values.end());
    }
  }
  return state;
}

Status CpuTrainer::ImportState(const TrainerState& state) {
  const size_t n = program_->params.size();
  if (state.values.size() != n || state.adam_m.size() != n || state.adam_v.size() != n) {
    return Error("trainer state has {} parameters, the program {}", state.values.size(), n);
  }
  for (size_t i = 0; i < n; ++i) {
    const program::ParamSpec& spec = program_->params[i];
    const size_t count = static_cast<size_t>(spec.shape.num_elements());
    for (auto [from, to] : {std::pair{&state.values[i], &params_[i]},
                            std::pair{&state.adam_m[i], &adam_m_[i]},
                            std::pair{&state.adam_v[i], &adam_v_[i]}}) {
      if (from->size() != count) {
        return Error("trainer state: {} has {} values, {} needs {}", spec.name, from->size(),
                     spec.shape.ToString(), count);
      }
      to->values.assign(from->begin(), from->end());
    }
  }
  steps_done_ = state.steps_done;
  return Status::Ok();
}

}  // namespace gptc::rt
