// The trainer of gptrun --device emu: the GPU trainer (runtime/gpu/
// gpu_trainer.h) on the emulated device (emu_device.h). It owns both, so
// the device outlives the trainer that runs on it.
#ifndef GPTC_RUNTIME_EMU_EMU_TRAINER_H_
#define GPTC_RUNTIME_EMU_EMU_TRAINER_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "compiler/perf/step_model.h"
#include "runtime/emu/emu_device.h"
#include "runtime/gpu/gpu_trainer.h"
#include "runtime/trainer.h"

namespace gptc::rt::emu {

struct EmuTrainerOptions {
  EmuOptions emu;
  // The GPU trainer's (its `device` and `communicator` are ignored).
  gpu::GpuOptions gpu;
  // --dp N: the ranks' host communicator (TCP between processes); null for one.
  rt::Communicator* host_communicator = nullptr;
};

class EmuTrainer : public Trainer {
 public:
  static StatusOr<std::unique_ptr<EmuTrainer>> Create(const program::Artifact& artifact,
                                                      std::string_view path,
                                                      const program::TrainProgram* program,
                                                      uint64_t seed,
                                                      const EmuTrainerOptions& options);
  ~EmuTrainer() override;

  std::string DeviceDescription() const override { return device_->Describe(); }
  std::string DeviceName() const override { return "emu"; }
  StatusOr<StepResult> Step(std::span<const MicroBatch> micro_batches, double lr) override {
    return trainer_->Step(micro_batches, lr);
  }
  StatusOr<std::vector<eval::Literal>> Evaluate(const program::TrainEntry& entry,
                                                const MicroBatch& batch) override {
    return trainer_->Evaluate(entry, batch);
  }
  StatusOr<std::vector<double>> EvaluateSlice(const program::TrainEntry& entry,
                                              const MicroBatch& batch, int64_t output,
                                              int64_t first, int64_t count) override {
    return trainer_->EvaluateSlice(entry, batch, output, first, count);
  }
  // The GPU trainer's, over the emulated communicator (--dp N).
  Status SumOverRanks(std::span<double> values) override { return trainer_->SumOverRanks(values); }
  int64_t steps_done() const override { return trainer_->steps_done(); }
  StatusOr<TrainerState> ExportState() override { return trainer_->ExportState(); }
  Status ImportState(const TrainerState& state) override { return trainer_->ImportState(state); }

  // The GPU trainer's load line, and what the emulator did so far.
  std::string LoadSummary() const override;
  // The GPU trainer's, its times the emulator's stand-ins, then the memory
  // counters of every kernel (EmuOptions::counters), then the artifact's
  // H100 step estimate (Note [step model] in compiler/perf/step_model.h).
  std::string ProfileReport(int top_n = 25) const;
  // The GPU trainer's, with "counters": one object per kernel, and
  // "h100_model": the step estimate's totals and launches.
  std::string ProfileJson() const override;
  // ProfileReport() when `profiled`, then "emulator: " and what it checked.
  std::string RunReport(bool profiled) const override {
    return (profiled ? ProfileReport() + "\n" : "") + "emulator: " + stats().Summary();
  }
  EmuStats stats() const { return device_->stats(); }

 private:
  EmuTrainer() = default;
  // Destroyed in reverse: the trainer, then its communicator, then the device.
  std::unique_ptr<EmuDevice> device_;
  std::unique_ptr<gpu::Communicator> communicator_;
  // With counters (--profile): the artifact's step for the H100 model, and
  // its estimate once asked for (a 124m step takes a second or two).
  std::optional<StatusOr<perf::StepProgram>> model_program_;
  mutable std::optional<StatusOr<perf::StepEstimate>> model_estimate_;
  const StatusOr<perf::StepEstimate>* ModelEstimate() const;
  std::unique_ptr<gpu::GpuTrainer> trainer_;
};

}  // namespace gptc::rt::emu

#endif  // GPTC_RUNTIME_EMU_EMU_TRAINER_H_
