#include "runtime/emu/emu_trainer.h"

#include <nlohmann/json.hpp>

#include "runtime/emu/kernel_estimate.h"

namespace gptc::rt::emu {

StatusOr<std::unique_ptr<EmuTrainer>> EmuTrainer::Create(const program::Artifact& artifact,
                                                         std::string_view path,
                                                         const program::TrainProgram* program,
                                                         uint64_t seed,
                                                         const EmuTrainerOptions& options) {
  std::unique_ptr<EmuTrainer> t(new EmuTrainer());
  ASSIGN_OR_RETURN(t->device_, EmuDevice::Create(artifact, path, options.emu));
  gpu::GpuOptions gpu = options.gpu;
  gpu.backend = &t->device_->backend();
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

std::string EmuTrainer::ProfileReport(int top_n) const {
  std::string out =
      "emulated device: the times below are stand-ins (Note [emulated time] in "
      "runtime/emu/emu_state.h), not a GPU's\n" +
      trainer_->ProfileReport(top_n);
  const EmuStats s = stats();
  if (std::string counters = s.CountersTable(); !counters.empty()) {
    out += "\n" + counters + "\n" + s.EstimateTable();
  }
  return out;
}

std::string EmuTrainer::ProfileJson() const {
  nlohmann::json j = nlohmann::json::parse(trainer_->ProfileJson(), nullptr, false);
  if (j.is_discarded()) return trainer_->ProfileJson();
  nlohmann::json counters = nlohmann::json::array();
  for (const auto& [name, k] : stats().kernels) {
    const LaunchCounters& m = k.counts;
    counters.push_back({{"kernel", name},
                        {"launches", k.launches},
                        {"argument_bytes", k.argument_bytes},
                        {"global_load_requests", m.global_load_requests},
                        {"global_load_sectors", m.global_load_sectors},
                        {"global_load_bytes", m.global_load_bytes},
                        {"global_store_requests", m.global_store_requests},
                        {"global_store_sectors", m.global_store_sectors},
                        {"global_store_bytes", m.global_store_bytes},
                        {"shared_load_requests", m.shared_load_requests},
                        {"shared_load_wavefronts", m.shared_load_wavefronts},
                        {"shared_store_requests", m.shared_store_requests},
                        {"shared_store_wavefronts", m.shared_store_wavefronts},
                        {"registers", k.registers},
                        {"threads_per_block", k.threads},
                        {"shared_bytes_per_block", k.shared_bytes},
                        {"blocks_per_sm", k.BlocksPerSm()}});
    nlohmann::json& row = counters.back();
    row["blocks"] = k.blocks;
    nlohmann::json mix = nlohmann::json::object();
    for (uint32_t c = 0; c < program::emu::kNumInstructionClasses; ++c) {
      mix[std::string(InstructionClassName(c))] = m.instructions[c];
    }
    row["warp_instructions"] = std::move(mix);
    const KernelEstimate e = EstimateH100(k);
    row["h100_estimate_us"] = e.us;
    row["h100_estimate_bound"] = e.bound;
    row["roofline_us"] = e.roofline_us;
  }
  j["counters"] = std::move(counters);
  // The times are stand-ins (Note [emulated time]): readers must say so.
  j["device"] = "emu";
  j["emulated"] = true;
  return j.dump(1) + "\n";
}

}  // namespace gptc::rt::emu
