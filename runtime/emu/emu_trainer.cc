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
  if (options.emu.counters) t->model_program_ = perf::StepProgramOf(artifact);
  return t;
}

const StatusOr<perf::StepEstimate>* EmuTrainer::ModelEstimate() const {
  if (!model_program_) return nullptr;
  if (!model_estimate_) {
    if (!model_program_->ok()) {
      model_estimate_ = model_program_->status();
    } else {
      model_estimate_ = perf::EstimateStep(**model_program_, perf::H100());
    }
  }
  return &*model_estimate_;
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
  if (const StatusOr<perf::StepEstimate>* e = ModelEstimate()) {
    out += '\n';
    out += e->ok() ? perf::FormatStepEstimate(**model_program_, **e, top_n)
                   : fmt::format("H100 step estimate: not available: {}", e->status().message());
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
  if (const StatusOr<perf::StepEstimate>* e = ModelEstimate(); e != nullptr && e->ok()) {
    const perf::StepProgram& p = **model_program_;
    nlohmann::json launches = nlohmann::json::array();
    for (size_t i = 0; i < p.launches.size(); ++i) {
      const perf::StepLaunch& l = p.launches[i];
      nlohmann::json row{{"entry", l.entry},
                         {"thunk", l.thunk},
                         {"name", l.name},
                         {"us", (**e).launches[i].us},
                         {"repeat", l.repeat}};
      if (const auto& k = (**e).launches[i].kernel) row["bound"] = k->bound;
      launches.push_back(std::move(row));
    }
    j["h100_model"] = {{"step_us", (**e).us()},
                       {"kernel_us", (**e).kernel_us},
                       {"gemm_us", (**e).gemm_us},
                       {"other_us", (**e).other_us},
                       {"roofline_us", (**e).roofline_us},
                       {"tokens_per_second", (**e).TokensPerSecond(p.tokens)},
                       {"launches", std::move(launches)}};
  }
  // The times are stand-ins (Note [emulated time]): readers must say so.
  j["device"] = "emu";
  j["emulated"] = true;
  return j.dump(1) + "\n";
}

}  // namespace gptc::rt::emu
