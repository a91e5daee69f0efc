// The emulated GPU device (gptrun --device emu, docs/EMULATOR.md): CUDA's
// runtime, driver and cuBLASLt implemented on the host, installed as the
// process's CUDA backend (Note [CUDA backends] in runtime/gpu/backend.h), so
// that the GPU runtime (GpuTrainer, the executor, CUDA graphs, all-reduce
// buckets) runs the artifact's own plan: its kernels compiled for the host
// (gptc compile --emu), its gemms with cuBLASLt's documented semantics,
// its arena offsets, streams and events — with memory and race checks.
//
//   ASSIGN_OR_RETURN(auto emu, emu::EmuDevice::Create(artifact, path, {}));
//   ASSIGN_OR_RETURN(auto t, gpu::GpuTrainer::Create(artifact, path, &program, seed, {}));
//
// Note [emulated streams]
// Every operation runs when it is enqueued (or, in a captured graph, when
// the graph is launched), in the order of the calls: the emulator is
// deterministic and needs no threads of its own beyond the workers of a
// kernel's grid. What it keeps of asynchrony is what the checks need: each
// stream's place and what it knows of the others (Note [stream order] in
// memory_checker.h), and all-reduces whose results land only when another
// stream or the host waits for them (Note [in-flight all-reduces]).
//
// The device's state is its own (Note [bound API functions] in
// runtime/gpu/api_fn.h: its CUDA functions are bound to it); what is one
// per process is the installed backend, so one emulated device at a time is
// installed (Create refuses a second). One host thread drives it.
#ifndef GPTC_RUNTIME_EMU_EMU_DEVICE_H_
#define GPTC_RUNTIME_EMU_EMU_DEVICE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "compiler/program/container.h"
#include "compiler/support/status.h"
#include "runtime/communicator.h"
#include "runtime/emu/grid_runner.h"
#include "runtime/gpu/communicator.h"

namespace gptc::rt::gpu {
struct Backend;
}  // namespace gptc::rt::gpu

namespace gptc::rt::emu {

struct EmuOptions {
  // Memory and race checks (docs/EMULATOR.md); off: only the kernels' own
  // arithmetic, several times faster.
  bool checks = true;
  // Host threads running a grid's blocks (0: one per hardware thread).
  int workers = 0;
  // Note [emulated memory counters] in grid_runner.h for every kernel (the
  // instrumented accesses run even with the checks off).
  bool counters = false;
};

// One kernel's counters over its launches (EmuOptions::counters).
struct KernelCounters {
  int64_t launches = 0;
  int64_t blocks = 0;  // over its launches
  // The sizes of its arguments' buffers (Note [kernel ABI]), each operand
  // once and each result once: what it must move at least when it reads
  // every operand and writes every result whole (a gather reads less).
  int64_t argument_bytes = 0;
  LaunchCounters counts;
  // Its launch shape, from ptxas and the plan: registers a thread (0:
  // unknown), threads and shared bytes a block, and the resident blocks of
  // an H100 multiprocessor they allow (Occupancy).
  int64_t registers = 0, threads = 0, shared_bytes = 0;
  int64_t BlocksPerSm() const;
};

// What the device did, for the log and benchmarks (collectives: the
// all-reduces, reduce-scatters and all-gathers it ran).
struct EmuStats {
  int64_t launches = 0, blocks = 0, gemms = 0, copies = 0, collectives = 0;
  double kernel_seconds = 0, gemm_seconds = 0;
  std::map<std::string, KernelCounters> kernels;  // by kernel name, with counters on
  std::string Summary() const;  // "412 kernels (1.93 s), 110 gemms (0.41 s), ..."
  // The counters, one row per kernel, the most sectors first (empty without).
  std::string CountersTable() const;
  // Each kernel's instruction mix and Note [H100 time estimate] beside its
  // memory roofline, the longest estimate first (empty without counters).
  std::string EstimateTable() const;
};

class EmuDevice {
 public:
  // Loads `artifact`'s emulator library and installs the emulated CUDA as the
  // process's backend until the device is destroyed. Errors: no emulator
  // library (say how to compile one), another backend installed.
  static StatusOr<std::unique_ptr<EmuDevice>> Create(const program::Artifact& artifact,
                                                     std::string_view path,
                                                     const EmuOptions& options);
  ~EmuDevice();
  EmuDevice(const EmuDevice&) = delete;
  EmuDevice& operator=(const EmuDevice&) = delete;

  // The kernels of another artifact too (tests that run two at once).
  Status AddArtifact(const program::Artifact& artifact, std::string_view path);

  // "emulated sm_90a on 2 host threads, checks on".
  std::string Describe() const;
  const EmuOptions& options() const;
  EmuStats stats() const;

  // The all-reduces of a --dp N artifact, over `host` (the CPU device's
  // communicator: processes over TCP, or threads), which must outlive it.
  std::unique_ptr<gpu::Communicator> MakeCommunicator(rt::Communicator* host);

  // Its CUDA runtime, driver and cuBLASLt, for a trainer or an executor
  // (gpu::GpuOptions::backend, gpu::ExecutorResources::backend).
  const gpu::Backend& backend() const;

  // For tests that fill a thunk's operands themselves: device memory
  // [p, p + bytes) now holds what every buffer at exactly that place expects
  // (Note [provenance] in memory_checker.h).
  void MarkHostWritten(const void* p, size_t bytes);

  struct State;

 private:
  explicit EmuDevice(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace gptc::rt::emu

#endif  // GPTC_RUNTIME_EMU_EMU_DEVICE_H_
