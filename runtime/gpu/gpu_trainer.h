// The GPU device: trains with a compiled artifact's thunk plan.
//
//   ASSIGN_OR_RETURN(Artifact a, ReadArtifact(path));
//   ASSIGN_OR_RETURN(LoadedProgram p, LoadProgram(a, path));
//   ASSIGN_OR_RETURN(auto trainer, gpu::GpuTrainer::Create(a, path, &p.program, seed, {}));
//   trainer->Step(micro_batches, lr);
//
// Load: check the artifact (complete, its entries, --dp N against the
// communicator: CheckCommunicatorWorld), open the device, check the target
// against the compute capability and memory against what is free, allocate one
// arena per entry (the logits, eval and score entries run in the train step's: Note
// [arena guests] in compiler/program/plan.h) plus the cuBLASLt workspace,
// load the kernels (cubin, else PTX JIT), translate each entry's plan (gemm
// algorithms chosen here), then
// initialize the parameters with runtime/init.h's counter-based rules on the
// host (the same values as the CPU device for the same seed) and upload them;
// the AdamW moments start at zero. Under ZeRO-1 (zero_stage 1) the moments
// and the master weights are this rank's shards (Note [ZeRO-1 state on the
// GPU] in gpu_trainer_state.cc).
//
// A step: copy tokens, targets, step and lr from pinned host memory into
// their input slots, run the plan (eagerly for the first step, then as a CUDA
// graph captured after it; the graph reads the per-step values from those
// device slots, so the copies stay outside it), copy loss and grad norm into
// pinned memory behind an event, and wait for that event only when returning
// the values. With grad-accum k, `accumulate` runs k times and `apply` once
// (Note [entries of a step] in gpu_trainer.cc).
//
// CUDA-free header: the state lives behind Impl.
#ifndef GPTC_RUNTIME_GPU_GPU_TRAINER_H_
#define GPTC_RUNTIME_GPU_GPU_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "compiler/program/container.h"
#include "compiler/program/gpu_spec.h"
#include "runtime/gpu/autotune_options.h"
#include "runtime/gpu/communicator.h"
#include "runtime/gpu/device.h"
#include "runtime/trainer.h"

namespace gptc::rt::gpu {

struct Backend;

struct GpuOptions {
  // The CUDA it runs on (Note [CUDA backends] in backend.h), which outlives
  // the trainer; null: the installed one (NVIDIA's unless an emulated device
  // is installed).
  const Backend* backend = nullptr;
  int device = 0;
  // Replay the step as a CUDA graph after the first (eager) step.
  bool use_graph = true;
  // Time every thunk of every step with CUDA events (no graph); see ProfileReport.
  bool profile = false;
  // Synchronize after every thunk so that a fault names its thunk (slow).
  bool sync_each_thunk = false;
  // Null: world size 1 (all-reduces are identities). An artifact compiled
  // with --dp N needs one of world size N (CheckCommunicatorWorld), e.g.
  // CreateNcclCommunicator (nccl_communicator.h); it outlives the trainer.
  Communicator* communicator = nullptr;
  // Device memory left free for the CUDA context, cuBLASLt and the kernels
  // (Note [memory beside the arenas] in compiler/program/gpu_spec.h).
  int64_t reserve_bytes = program::kGpuReserveBytes;
  // Each gemm's algorithm (Note [autotune paths] in autotune.h).
  AutotuneOptions autotune;
  // Told what the load is doing ("loading 56 kernels", "autotuning gemm 3:
  // ..."), for a status line; may be empty.
  std::function<void(const std::string&)> progress;
};

class GpuTrainer : public Trainer {
 public:
  // `program` (from LoadProgram on the same artifact) must outlive the
  // trainer. Every error is one line naming the artifact, and the thunk,
  // call and error string where one failed.
  static StatusOr<std::unique_ptr<GpuTrainer>> Create(const program::Artifact& artifact,
                                                      std::string_view artifact_path,
                                                      const program::TrainProgram* program,
                                                      uint64_t seed, const GpuOptions& options);
  ~GpuTrainer() override;

  std::string DeviceDescription() const override;
  std::string DeviceName() const override;
  StatusOr<StepResult> Step(std::span<const MicroBatch> micro_batches, double lr) override;
  StatusOr<std::vector<eval::Literal>> Evaluate(const program::TrainEntry& entry,
                                                const MicroBatch& batch) override;
  // Copies only the slice to the host (a sample reads one [V] row of [1,T,V] logits).
  StatusOr<std::vector<double>> EvaluateSlice(const program::TrainEntry& entry,
                                              const MicroBatch& batch, int64_t output,
                                              int64_t first, int64_t count) override;
  // On the device through GpuOptions::communicator: the values go up as
  // f32, are all-reduced on the trainer's stream (NCCL's order) and come
  // back. Without a communicator, nothing.
  Status SumOverRanks(std::span<double> values) override;
  int64_t steps_done() const override;
  // The whole state; under ZeRO-1 the moments are all-gathered over the
  // communicator, so every rank calls it together.
  StatusOr<TrainerState> ExportState() override;
  // Under ZeRO-1 uploads this rank's shards of the moments and of the
  // values (the master slot) with the whole values.
  Status ImportState(const TrainerState& state) override;

  const DeviceInfo& device() const;
  // The per-thunk profile of the steps so far (GpuOptions::profile); steps
  // after the first when there are several (the first pays for warm-up).
  std::string ProfileReport(int top_n = 25) const;
  // A one-line summary of the load: arenas, kernels (cubin/JIT), gemms.
  std::string LoadSummary() const override;
  // ProfileReport() when `profiled`.
  std::string RunReport(bool profiled) const override { return profiled ? ProfileReport() : ""; }
  // The profile (ProfileReport's figures) as JSON for tools: {"format":
  // "gptc-profile-1", "steps", "rows": [{"entry", "kind", "name", "meta",
  // "ms_per_step", "calls_per_step"}], "gemm_tuning": [{"key", "thunks",
  // "path", "algorithm", "candidates", "us", "tflops", "from_cache"}]}.
  std::string ProfileJson() const override;

  struct Impl;

 private:
  explicit GpuTrainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_GPU_TRAINER_H_
