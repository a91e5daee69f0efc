#include "runtime/cpu_device.h"

#include "compiler/eval/evaluator.h"
#include "compiler/program/zero_shards.h"
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
  const int64_t zero = program->zero_stage, world = program->world_size;
  for (size_t i = 0; i < program->params.size(); ++i) {
    const program::ParamSpec& spec = program->params[i];
    eval::Literal p = eval::Literal::Zeros(spec.shape);
    std::vector<float> init = InitParameter(spec, seed, i);
    p.values.assign(init.begin(), init.end());
    params_.push_back(std::move(p));
    auto state = [&](SlotRole role) {
      return eval::Literal::Zeros(program::StateSlotShape(role, spec.shape, zero, world));
    };
    adam_m_.push_back(state(SlotRole::kAdamM));
    adam_v_.push_back(state(SlotRole::kAdamV));
    // Cut from the parameters once the rank is known (set_collective).
    if (zero >= 1) master_.push_back(state(SlotRole::kMaster));
    if (program->grad_accum > 1) grad_acc_.push_back(eval::Literal::Zeros(spec.shape));
  }
}

void CpuTrainer::set_collective(eval::Collective* collective) {
  collective_ = collective;
  if (master_.empty() || collective == nullptr) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    master_[i].values = program::ShardOf<double, double>(params_[i].values, collective->rank(),
                                                         program_->world_size);
  }
}

Status CpuTrainer::CheckShardedRanks() const {
  if (program_->zero_stage == 0) return Status::Ok();
  if (collective_ == nullptr || collective_->world_size() != program_->world_size) {
    return Error(
        "the program shards its optimizer state over {} ranks (--zero {}), and the CPU trainer "
        "runs {}",
        program_->world_size, program_->zero_stage,
        collective_ == nullptr ? "alone" : fmt::format("{} ranks", collective_->world_size()));
  }
  return Status::Ok();
}

StatusOr<std::vector<float>> CpuTrainer::GatherShards(const eval::Literal& shard, int64_t i) {
  std::vector<double> gathered(shard.values.size() * static_cast<size_t>(program_->world_size));
  RETURN_IF_ERROR(collective_->AllGather(shard.values, gathered)
                      .WithPrefix(fmt::format("gathering {}'s shards", program_->params[i].name)));
  return program::Unshard<float, double>(gathered, program_->params[i].shape.num_elements());
}

eval::Literal* CpuTrainer::StateFor(const program::Slot& slot) {
  switch (slot.role) {
    case SlotRole::kParam: return &params_[slot.index];
    case SlotRole::kAdamM: return &adam_m_[slot.index];
    case SlotRole::kAdamV: return &adam_v_[slot.index];
    case SlotRole::kGradAcc: return &grad_acc_[slot.index];
    case SlotRole::kMaster:
      return &master_[slot.index];
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
  RETURN_IF_ERROR(CheckShardedRanks().WithPrefix(fmt::format("step {}", steps_done_ + 1)));
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
  if (!master_.empty()) {
    RETURN_IF_ERROR(CheckShardedRanks().WithPrefix("exporting the state"));
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto index = static_cast<int64_t>(i);
      state.values.emplace_back(params_[i].values.begin(), params_[i].values.end());
      ASSIGN_OR_RETURN(state.adam_m.emplace_back(), GatherShards(adam_m_[i], index));
      ASSIGN_OR_RETURN(state.adam_v.emplace_back(), GatherShards(adam_v_[i], index));
    }
    return state;
  }
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
  // Note [ZeRO-1 shards]: a sharded trainer keeps its rank's shards of the
  // moments and cuts its master weights from the parameters; it needs its
  // rank before it changes anything.
  const bool sharded = !master_.empty();
  if (sharded) RETURN_IF_ERROR(CheckShardedRanks().WithPrefix("importing the state"));
  const int64_t rank = sharded ? collective_->rank() : 0, world = program_->world_size;
  auto take = [&](const std::vector<float>& whole) {
    return sharded ? program::ShardOf<double, float>(whole, rank, world)
                   : std::vector<double>(whole.begin(), whole.end());
  };
  for (size_t i = 0; i < n; ++i) {
    const program::ParamSpec& spec = program_->params[i];
    const size_t count = static_cast<size_t>(spec.shape.num_elements());
    for (const std::vector<float>* from : {&state.values[i], &state.adam_m[i], &state.adam_v[i]}) {
      if (from->size() != count) {
        return Error("trainer state: {} has {} values, {} needs {}", spec.name, from->size(),
                     spec.shape.ToString(), count);
      }
    }
    params_[i].values.assign(state.values[i].begin(), state.values[i].end());
    adam_m_[i].values = take(state.adam_m[i]);
    adam_v_[i].values = take(state.adam_v[i]);
    if (sharded) master_[i].values = take(state.values[i]);
  }
  steps_done_ = state.steps_done;
  return Status::Ok();
}

}  // namespace gptc::rt
