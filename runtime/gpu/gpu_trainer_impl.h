// GpuTrainer's state (GpuTrainer::Impl) and the per-entry records it keeps.
// Internal to the GPU trainer's files (gpu_trainer.cc: load and steps;
// gpu_trainer_evaluate.cc: entries that update no state, and sums over
// ranks; gpu_trainer_state.cc: the state to the host and back): this header
// includes the CUDA headers.
#ifndef GPTC_RUNTIME_GPU_GPU_TRAINER_IMPL_H_
#define GPTC_RUNTIME_GPU_GPU_TRAINER_IMPL_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/gpu/autotune.h"
#include "runtime/gpu/backend.h"
#include "runtime/gpu/cublaslt_api.h"
#include "runtime/gpu/cuda_api.h"
#include "runtime/gpu/device_buffer.h"
#include "runtime/gpu/executor.h"
#include "runtime/gpu/gpu_trainer.h"
#include "runtime/gpu/kernel_modules.h"
#include "runtime/gpu/plan_reader.h"
#include "runtime/gpu/profile.h"

namespace gptc::rt::gpu {

// An entry of the program, as the trainer runs it.
struct EntryState {
  const program::TrainEntry* entry = nullptr;
  DeviceBuffer arena;          // unused by a guest (Note [arena guests] in compiler/program/plan.h)
  EntryState* host = nullptr;  // the entry whose arena a guest runs in
  std::unique_ptr<EntryExecutor> executor;
  // Which parameter values the arena's param slots hold (entries other than
  // the state entry get a copy before they run); -1: none yet.
  int64_t params_version = -1;
};

// The per-step inputs the host writes, in the pinned staging buffer.
struct StagedInput {
  const PlanSlot* slot = nullptr;
  size_t offset = 0;  // in the staging buffer
};

struct GpuTrainer::Impl {
  std::string artifact_path;
  uint64_t artifact_checksum = 0;
  const program::TrainProgram* program = nullptr;
  GpuOptions options;
  // The CUDA it runs on (Note [CUDA backends]), and its runtime functions.
  const Backend* backend = nullptr;
  const RuntimeApi* cuda = nullptr;
  DeviceInfo device;
  const DriverApi* cu = nullptr;
  const CublasLtApi* lt = nullptr;
  cublasLtHandle_t lt_handle = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t uploaded = nullptr, done = nullptr;
  std::unique_ptr<KernelModules> modules;
  DeviceBuffer workspace;
  int64_t workspace_bytes = 0;
  std::vector<EntryState> entries;  // in the program's order
  // Note [entries of a step]: `state_entry` holds the parameters and AdamW moments
  // and applies the update, `micro_entry` runs once per micro-batch; with
  // grad-accum 1 both are train_step.
  EntryState* state_entry = nullptr;
  EntryState* micro_entry = nullptr;
  // grad-accum > 1: each parameter's accumulator, in accumulate's arena and in apply's.
  std::vector<std::pair<const PlanSlot*, const PlanSlot*>> grad_acc;
  PinnedBuffer staging, readback;
  // SumOverRanks's f32 values on the device, allocated at the first sum
  // (grown when a sum is longer).
  std::unique_ptr<DeviceBuffer> sums;
  int64_t sums_capacity = 0;
  // A state export's gathered ZeRO-1 shards (Note [ZeRO-1 state on the
  // GPU]), allocated at the first export (grown for a larger parameter).
  std::unique_ptr<DeviceBuffer> gathered;
  int64_t gathered_capacity = 0;
  std::vector<StagedInput> tokens, targets;  // per micro-batch, into micro_entry
  StagedInput step, lr;                      // into state_entry
  const PlanSlot* loss = nullptr;            // of micro_entry
  const PlanSlot* grad_norm = nullptr;       // of state_entry
  bool upload_pending = false;
  int64_t steps_done = 0;
  int64_t params_version = 0;
  ProfileTable first_profile, profile;
  std::unique_ptr<GemmAutotuner> autotuner;  // null: --autotune off

  ~Impl() {
    if (stream != nullptr) cuda->StreamSynchronize(stream);
    entries.clear();  // executors (graphs, constant pools) and arenas
    modules.reset();
    if (lt_handle != nullptr) lt->Destroy(lt_handle);
    for (cudaEvent_t e : {uploaded, done}) {
      if (e != nullptr) cuda->EventDestroy(e);
    }
    if (stream != nullptr) cuda->StreamDestroy(stream);
  }

  Status Load(const program::Artifact& artifact, uint64_t seed);
  // An arena and an executor for each entry (`ordered` as `entries`), the
  // gemms autotuned on the way.
  Status CreateExecutors(std::vector<EntryPlan>& ordered);
  // Note [autotune paths]; its cache's warnings go to stderr.
  std::unique_ptr<GemmAutotuner> MakeAutotuner() const;
  // The guests' hosts, the workspace's size, and whether the arenas and the
  // workspace fit the device.
  Status PlanMemory(const std::vector<EntryPlan>& ordered);
  // The bytes to allocate for entry i's arena: its own and its guests'.
  int64_t ArenaBytes(const std::vector<EntryPlan>& ordered, size_t i) const;
  Status FindSlots();
  // Runs one entry in the mode the options ask for: profiled, checked, as the
  // captured graph, or eagerly (then captured, when graphs are on). Profiled
  // thunk times are appended to `times`.
  Status RunEntry(EntryState& e, std::vector<ThunkTime>& times);
  // Note [ZeRO-1 state on the GPU] (gpu_trainer_state.cc).
  Status UploadState(const TrainerState& state);
  // Copies `values` into the state entry's input `role` of parameter
  // `param`, whose shape must be program::StateSlotShape's.
  Status UploadSlot(program::SlotRole role, size_t param, std::span<const float> values);
  // Every rank's shards of sharded input `slot`, the first `elements` of them.
  StatusOr<std::vector<float>> GatherShards(const PlanSlot& slot, int64_t elements);
  // This rank in the data-parallel group (0 alone).
  int64_t Rank() const;
  Status WaitFor(cudaEvent_t event, std::string_view what);
  Status CopyParamsInto(EntryState& e);
  // Checks step `number`'s micro-batches and copies them, the step number
  // and the learning rate `rate` into the staging buffer (once the previous
  // step's uploads from it are done).
  Status Stage(std::span<const MicroBatch> micro_batches, int64_t number, double rate);
  // Feeds tokens (and targets) and runs an entry that updates no state; its
  // outputs are then in the returned executor's arena.
  StatusOr<EntryExecutor*> RunForEvaluate(const program::TrainEntry& entry,
                                          const MicroBatch& batch);
  // Elements [first, first + count) of output `output` of an entry that ran.
  struct OutputRange {
    int64_t output = 0, first = 0, count = 0;
  };
  // Copies `ranges` of `ex`'s outputs to the host and waits for them.
  StatusOr<std::vector<std::vector<double>>> ReadOutputs(EntryExecutor& ex, std::string_view entry,
                                                         std::span<const OutputRange> ranges);
  std::string Where() const { return artifact_path; }
  void Progress(const std::string& status) const {
    if (options.progress) options.progress(status);
  }
};

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_GPU_TRAINER_IMPL_H_
