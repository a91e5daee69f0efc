#include "runtime/emu/emu_trainer.h"

namespace gptc::rt::emu {

StatusOr<std::unique_ptr<EmuTrainer>> EmuTrainer::Create(const program::Artifact& artifact,
                                                         std::string_view path,
                                                         const program::TrainProgram* program,
                                                         uint64_t seed,
                                                         const EmuTrainerOptions& options) {
  std::unique_ptr<EmuTrainer> t(new EmuTrainer());
  ASSIGN_OR_RETURN(t->device_, EmuDevice::Create(artifact, path, options.emu));
  gpu::GpuOptions gpu = options.gpu;
  gpu.device = 0;
  gpu.communicator = nullptr;
  if (options.host_communicator != nullptr && options.host_communicator->world_size() > 1) {
    t->communicator_ = t->device_->MakeCommunicator(options.host_communicator);
    gpu.communicator = t->communicator_.get();
  }
  ASSIGN_OR_RETURN(t->trainer_, gpu::GpuTrainer::Create(artifact, path, program, seed, gpu));
  return t;
}

EmuTrainer::~EmuTrainer() = default;

std::string EmuTrainer::LoadSummary() const { return trainer_->LoadSummary(); }

}  // namespace gptc::rt::emu
