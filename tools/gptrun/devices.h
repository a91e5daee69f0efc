// gptrun's devices: which one runs (--device cpu|gpu|emu, or the default: the
// GPU when there is one and the artifact can run on it) and how it is made.
// The train loop only sees rt::Trainer.
#ifndef GPTC_TOOLS_GPTRUN_DEVICES_H_
#define GPTC_TOOLS_GPTRUN_DEVICES_H_

#include <memory>
#include <string>

#include "compiler/support/status.h"
#include "compiler/program/container.h"
#include "runtime/program_loader.h"
#include "runtime/trainer.h"
#include "tools/gptrun/distributed.h"
#include "tools/gptrun/train_loop.h"

namespace gptc::tools {

class Flags;

// The device flags gptrun's training, generate and eval share: --device (empty:
// chosen at load), --emu-checks, --trust-artifact.
struct DeviceFlags {
  std::string device;
  bool emu_checks = true;
  bool trust_artifact = false;
};
// Reads them; an error is a usage error naming the flag.
StatusOr<DeviceFlags> ReadDeviceFlags(const Flags& flags);
// Declares them, with --gpu N, as gptrun generate and gptrun eval take them
// (training's own, longer help is in main.cc).
void DeclareDeviceChoiceFlags(Flags& flags);

// Whether this gptrun was built with the GPU device.
bool HaveGpuDevice();
// Whether this gptrun has the GPU device and a GPU is present to run it.
bool GpuPresent();

// --model --remat auto on a GPU without --memory-budget: GPU `ordinal`'s free
// memory less what the runtime keeps beside the arenas (CUDA and cuBLASLt's
// reserve and workspace), as a byte count; an error without a GPU.
StatusOr<int64_t> GpuMemoryBudget(int ordinal);

struct ChosenDevice {
  std::string name;  // "cpu", "gpu" or "emu"
  std::string note;  // "note: ..." why the default fell back to the CPU, or empty
};

// The device to run on: options.device when given, else the GPU when one is
// present and the artifact is complete, else the CPU.
ChosenDevice ChooseDevice(const TrainOptions& options, const rt::LoadedProgram& loaded);

// The trainer of `device` for the loaded artifact, on `dist`'s GPU and with
// its communicator (none for one rank). `program` and `dist` must outlive it.
StatusOr<std::unique_ptr<rt::Trainer>> MakeTrainer(const std::string& device,
                                                   const TrainOptions& options,
                                                   const program::Artifact& artifact,
                                                   const program::TrainProgram* program,
                                                   const Distributed& dist);

// What the trainer's device says of itself (rt::Trainer::LoadSummary,
// RunReport and ProfileJson); empty for the CPU.
std::string LoadSummary(rt::Trainer& trainer);
std::string ProfileReport(rt::Trainer& trainer, bool profiled);
std::string ProfileJson(rt::Trainer& trainer);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_DEVICES_H_
