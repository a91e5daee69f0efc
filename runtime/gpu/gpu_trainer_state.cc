// GpuTrainer's state on the host and back: the parameters and AdamW moments
// of the state entry (Note [entries of a step] in gpu_trainer.cc).
//
// Note [ZeRO-1 state on the GPU]
// TrainerState is whole whatever the program: every parameter's values and
// moments, n elements each. Under zero_stage 1 the state entry's adam_m,
// adam_v and master inputs are this rank's f32[s] shards (Note [ZeRO-1
// shards] in compiler/program/program.h; the rank is the communicator's):
// UploadState cuts them from the whole values (master from the parameter's
// values, ShardOf), and ExportState reads the whole parameter slot (every
// rank's copy, rebuilt by the step's all-gathers) and all-gathers each
// moment's shards over the communicator, dropping the padding (Unshard). So
// under ZeRO-1 every rank calls ExportState together, as it runs the steps.
#include <algorithm>
#include <span>

#include "runtime/gpu/gpu_trainer_impl.h"
#include "compiler/program/zero_shards.h"

namespace gptc::rt::gpu {

using program::SlotRole;

namespace {

// The slots of a parameter's state: the whole values, the moments, and
// under ZeRO-1 the master shard.
std::vector<SlotRole> StateRoles(int64_t zero_stage) {
  std::vector<SlotRole> roles = {SlotRole::kParam, SlotRole::kAdamM, SlotRole::kAdamV};
  if (zero_stage >= 1) roles.push_back(SlotRole::kMaster);
  return roles;
}

}  // namespace

int64_t GpuTrainer::Impl::Rank() const {
  return options.communicator != nullptr ? options.communicator->rank() : 0;
}

Status GpuTrainer::Impl::UploadSlot(SlotRole role, size_t param, std::span<const float> values) {
  const EntryPlan& plan = state_entry->executor->plan();
  const program::ParamSpec& spec = program->params[param];
  const PlanSlot* slot = plan.FindInput(role, static_cast<int64_t>(param));
  if (slot == nullptr) {
    return Error("{}: train_step has no {} input for {}", Where(), program::SlotRoleName(role),
                 spec.name);
  }
  const ir::Shape want =
      program::StateSlotShape(role, spec.shape, program->zero_stage, program->world_size);
  const size_t bytes = values.size() * sizeof(float);
  if (slot->shape.num_elements() != want.num_elements() ||
      static_cast<int64_t>(bytes) > slot->slice.size) {
    return Error("{}: input {} of {} is {}, the state needs {}", Where(),
                 program::SlotRoleName(role), spec.name, slot->shape.ToString(), want.ToString());
  }
  return cuda->Check(
      cuda->MemcpyAsync(state_entry->executor->At(slot->slice), values.data(), bytes,
                        cudaMemcpyHostToDevice, stream),
      fmt::format("cudaMemcpyAsync({} {} to the device)", program::SlotRoleName(role), spec.name));
}

Status GpuTrainer::Impl::UploadState(const TrainerState& state) {
  const size_t n = program->params.size();
  if (state.values.size() != n || state.adam_m.size() != n || state.adam_v.size() != n) {
    return Error("trainer state has {} parameters, the program {}", state.values.size(), n);
  }
  RETURN_IF_ERROR(cuda->Check(cuda->StreamSynchronize(stream), "cudaStreamSynchronize"));
  // Pageable host memory (the shards cut here too): waited for below.
  std::vector<std::vector<float>> shards;
  for (size_t i = 0; i < n; ++i) {
    const program::ParamSpec& spec = program->params[i];
    for (SlotRole role : StateRoles(program->zero_stage)) {
      const std::vector<float>& whole = role == SlotRole::kAdamM   ? state.adam_m[i]
                                        : role == SlotRole::kAdamV ? state.adam_v[i]
                                                                   : state.values[i];
      if (static_cast<int64_t>(whole.size()) != spec.shape.num_elements()) {
        return Error("trainer state: {} {} has {} values, {} needs {}", program::SlotRoleName(role),
                     spec.name, whole.size(), spec.shape.ToString(), spec.shape.num_elements());
      }
      std::span<const float> values = whole;
      if (program::IsShardedRole(role, program->zero_stage)) {
        shards.push_back(program::ShardOf<float, float>(whole, Rank(), program->world_size));
        values = shards.back();
      }
      RETURN_IF_ERROR(UploadSlot(role, i, values));
    }
  }
  RETURN_IF_ERROR(
      cuda->Check(cuda->StreamSynchronize(stream), "cudaStreamSynchronize (state upload)"));
  steps_done = state.steps_done;
  ++params_version;
  return Status::Ok();
}

// Note [ZeRO-1 state on the GPU]: the shards of `slot` (f32[s]) of every
// rank, gathered into `gathered` and read back without the padding.
StatusOr<std::vector<float>> GpuTrainer::Impl::GatherShards(const PlanSlot& slot,
                                                            int64_t elements) {
  Communicator* comm = options.communicator;
  if (comm == nullptr) return Error("{}: a ZeRO-1 state export needs a communicator", Where());
  const int64_t s = slot.shape.num_elements();
  const int64_t bytes = s * comm->world_size() * static_cast<int64_t>(sizeof(float));
  if (bytes > gathered_capacity) {
    // Every earlier gather was waited for: the old buffer is idle.
    gathered = std::make_unique<DeviceBuffer>();
    gathered_capacity = bytes;
    RETURN_IF_ERROR(cuda->Check(gathered->Allocate(*cuda, bytes), "state export: cudaMalloc"));
  }
  RETURN_IF_ERROR(comm->AllGather(state_entry->executor->At(slot.slice), gathered->ptr, s,
                                  ir::DType::kF32, stream)
                      .WithPrefix(fmt::format("state export of %{}", slot.name)));
  // The host waits before the copy back, as SumOverRanks does (the emulated
  // device lands a collective's result when the host waits for it).
  RETURN_IF_ERROR(cuda->Check(cuda->EventRecord(done, stream), "cudaEventRecord"));
  RETURN_IF_ERROR(WaitFor(done, "state export"));
  std::vector<float> all(s * comm->world_size());
  RETURN_IF_ERROR(cuda->Check(
      cuda->MemcpyAsync(all.data(), gathered->ptr, bytes, cudaMemcpyDeviceToHost, stream),
      fmt::format("cudaMemcpyAsync(%{} to the host)", slot.name)));
  RETURN_IF_ERROR(cuda->Check(cuda->EventRecord(done, stream), "cudaEventRecord"));
  RETURN_IF_ERROR(WaitFor(done, "state export"));
  return program::Unshard<float, float>(all, elements);
}

StatusOr<TrainerState> GpuTrainer::ExportState() {
  Impl& m = *impl_;
  const EntryPlan& plan = m.state_entry->executor->plan();
  TrainerState state;
  state.steps_done = m.steps_done;
  for (size_t i = 0; i < m.program->params.size(); ++i) {
    const int64_t n = m.program->params[i].shape.num_elements();
    for (auto [role, to] :
         {std::pair{SlotRole::kParam, &state.values}, std::pair{SlotRole::kAdamM, &state.adam_m},
          std::pair{SlotRole::kAdamV, &state.adam_v}}) {
      const PlanSlot* slot = plan.FindInput(role, static_cast<int64_t>(i));
      if (slot == nullptr) {
        return Error("train_step has no {} input {}", program::SlotRoleName(role), i);
      }
      if (program::IsShardedRole(role, m.program->zero_stage)) {
        ASSIGN_OR_RETURN(std::vector<float> whole, m.GatherShards(*slot, n));
        to->push_back(std::move(whole));
        continue;
      }
      to->emplace_back(n);
      RETURN_IF_ERROR(m.cuda->Check(
          m.cuda->MemcpyAsync(to->back().data(), m.state_entry->executor->At(slot->slice), n * 4,
                              cudaMemcpyDeviceToHost, m.stream),
          fmt::format("cudaMemcpyAsync({} {} to the host)", program::SlotRoleName(role),
                      m.program->params[i].name)));
    }
  }
  RETURN_IF_ERROR(m.cuda->Check(m.cuda->EventRecord(m.done, m.stream), "cudaEventRecord"));
  RETURN_IF_ERROR(m.WaitFor(m.done, "state export"));
  return state;
}

Status GpuTrainer::ImportState(const TrainerState& state) { return impl_->UploadState(state); }

}  // namespace gptc::rt::gpu
