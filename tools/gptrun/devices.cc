#include "tools/gptrun/devices.h"

#include <algorithm>
#include <optional>
#include <string>

#include "compiler/program/gpu_spec.h"
#include "runtime/cpu_device.h"
#include "tools/common/flags.h"
#include "tools/common/trusted_libraries.h"
#if GPTC_HAVE_GPU
#include "runtime/emu/emu_trainer.h"
#include "runtime/gpu/autotune_cache.h"
#include "runtime/gpu/backend.h"
#include "runtime/gpu/device.h"
#include "runtime/gpu/gpu_trainer.h"
#endif

namespace gptc::tools {

StatusOr<DeviceFlags> ReadDeviceFlags(const Flags& flags) {
  DeviceFlags d;
  d.device = flags.Get("device");
  if (flags.Has("device") && d.device != "cpu" && d.device != "gpu" && d.device != "emu") {
    return UsageError("--device must be cpu, gpu or emu, got '{}'", d.device);
  }
  const std::string checks = flags.Get("emu-checks");
  if (checks != "on" && checks != "off") {
    return UsageError("--emu-checks must be on or off, got '{}'", checks);
  }
  d.emu_checks = checks == "on";
  d.trust_artifact = flags.Has("trust-artifact");
  return d;
}

void DeclareDeviceChoiceFlags(Flags& flags) {
  flags.Value("device", "cpu|gpu|emu", "as for training (default: the GPU when there is one)")
      .Value("gpu", "N", "GPU: the device index")
      .Conflicts("device", "cpu")
      .Conflicts("device", "emu")
      .Value("emu-checks", "on|off", "emu: the memory and race checks", "on")
      .Requires("device", "emu")
      .Bool("trust-artifact",
            "emu: run the artifact's emulator library even though this machine's gptc did not "
            "build it (as for training)")
      .Requires("device", "emu");
}

bool HaveGpuDevice() { return GPTC_HAVE_GPU != 0; }

bool GpuPresent() {
#if GPTC_HAVE_GPU
  return rt::gpu::CountDevices() > 0;
#else
  return false;
#endif
}

StatusOr<int64_t> GpuMemoryBudget(int ordinal) {
#if GPTC_HAVE_GPU
  if (rt::gpu::CountDevices() == 0) return Error("no GPU to take the memory budget from");
  ASSIGN_OR_RETURN(rt::gpu::DeviceInfo device, rt::gpu::OpenDevice(rt::gpu::Cuda(), ordinal));
  // The CUDA context is up: only the trainer's reserve and the cuBLASLt
  // workspace still come out of the free memory.
  return std::max<int64_t>(0, device.free_bytes - program::kGpuFreeMemoryBesideArenas);
#else
  return Error("this gptrun has no GPU device to take the memory budget from");
#endif
}

ChosenDevice ChooseDevice(const TrainOptions& o, const rt::LoadedProgram& loaded) {
  if (!o.device.empty()) return {o.device, ""};
#if GPTC_HAVE_GPU
  if (rt::gpu::CountDevices() == 0) return {"cpu", ""};
  if (!loaded.complete) {
    return {"cpu", fmt::format("note: a GPU is present but {} is incomplete (some instructions "
                               "have no kernel yet): running on the CPU device",
                               o.artifact)};
  }
  return {"gpu", ""};
#else
  return {"cpu", ""};
#endif
}

#if GPTC_HAVE_GPU
namespace {

// Note [trusted emulator libraries]: the artifact's emulator library runs
// only when this machine's gptc built it, or the user said so.
Status CheckTrustedLibrary(const TrainOptions& o, const program::Artifact& artifact) {
  const std::string* library = artifact.Find("emu");
  if (o.trust_artifact || library == nullptr || IsTrustedLibrary(*library)) return Status::Ok();
  const std::optional<std::string> record = TrustRecordPath(*library);
  return Error(
      "{}: its emulator library is native code this machine's gptc did not build ({}): "
      "compile the artifact here with `gptc compile ... --emu`, or pass --trust-artifact if you "
      "trust its source",
      o.artifact,
      record ? "no record " + *record : "no cache directory: $XDG_CACHE_HOME and $HOME are unset");
}

rt::gpu::AutotuneOptions AutotuneOptionsOf(const TrainOptions& o) {
  rt::gpu::AutotuneOptions a;
  a.mode = o.autotune;
  a.cache_path = rt::gpu::DefaultAutotuneCachePath();
  return a;
}

}  // namespace
#endif

StatusOr<std::unique_ptr<rt::Trainer>> MakeTrainer(const std::string& device, const TrainOptions& o,
                                                   const program::Artifact& artifact,
                                                   const program::TrainProgram* program,
                                                   const Distributed& dist) {
  if (device == "cpu") {
    if (o.profile) return UsageError("--profile needs the GPU device (--device gpu or emu)");
    auto cpu = std::make_unique<rt::CpuTrainer>(program, o.seed);
    if (dist.comm != nullptr) cpu->set_collective(dist.comm.get());
    return std::unique_ptr<rt::Trainer>(std::move(cpu));
  }
#if GPTC_HAVE_GPU
  if (device == "emu") {
    RETURN_IF_ERROR(CheckTrustedLibrary(o, artifact));
    rt::emu::EmuTrainerOptions e;
    e.emu.checks = o.emu_checks;
    e.emu.counters = o.profile;  // Note [emulated memory counters]
    e.gpu = rt::gpu::GpuOptions{.use_graph = !o.no_graph,
                                .profile = o.profile,
                                .sync_each_thunk = o.debug_sync,
                                .autotune = AutotuneOptionsOf(o),
                                .progress = o.load_progress};
    e.host_communicator = dist.comm.get();
    ASSIGN_OR_RETURN(std::unique_ptr<rt::emu::EmuTrainer> t,
                     rt::emu::EmuTrainer::Create(artifact, o.artifact, program, o.seed, e));
    return std::unique_ptr<rt::Trainer>(std::move(t));
  }
  rt::gpu::GpuOptions g{.device = dist.gpu,
                        .use_graph = !o.no_graph,
                        .profile = o.profile,
                        .sync_each_thunk = o.debug_sync,
                        .communicator = dist.gpu_comm.get(),
                        .autotune = AutotuneOptionsOf(o),
                        .progress = o.load_progress};
  ASSIGN_OR_RETURN(std::unique_ptr<rt::gpu::GpuTrainer> t,
                   rt::gpu::GpuTrainer::Create(artifact, o.artifact, program, o.seed, g));
  return std::unique_ptr<rt::Trainer>(std::move(t));
#else
  return Error(
      "--device gpu: this gptrun was built without the CUDA toolkit (no GPU device); "
      "use --device cpu");
#endif
}

std::string LoadSummary(rt::Trainer& trainer) { return trainer.LoadSummary(); }

std::string ProfileJson(rt::Trainer& trainer) { return trainer.ProfileJson(); }

std::string ProfileReport(rt::Trainer& trainer, bool profiled) {
  return trainer.RunReport(profiled);
}

}  // namespace gptc::tools
