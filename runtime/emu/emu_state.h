// The emulated device's state and operation engine (Note [emulated
// streams] in emu_device.h), shared by its CUDA runtime (emu_device.cc),
// driver and checked operations (emu_ops.cc). Internal to runtime/emu.
#ifndef GPTC_RUNTIME_EMU_EMU_STATE_H_
#define GPTC_RUNTIME_EMU_EMU_STATE_H_

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/emu/emu_device.h"
#include "runtime/emu/grid_runner.h"
#include "runtime/emu/kernel_library.h"
#include "runtime/emu/lt_api.h"
#include "runtime/emu/memory_checker.h"
#include "runtime/gpu/backend.h"

namespace gptc::rt::emu {

struct Graph;

// Note [emulated time]
// Events measure a stand-in device clock, not the host's: each stream's
// clock advances, as its operations run, by what the operation would take
// on an H100-like device in a deliberately simple model — a kernel 2 us
// plus 2 us for each full wave of 132 x 2048 threads, a copy or memset
// 1 us plus its bytes at 2 TB/s, an all-reduce 10 us plus its bytes at
// 100 GB/s, a gemm by its algorithm (Note [emulated gemm algorithms] in
// lt_api.cc) — and a stream waiting for an event moves up to the event's
// time. So cudaEventElapsedTime, and everything built on it (gemm
// autotuning, --profile), is deterministic on the emulator: tests can
// assert what a tuning chooses. The figures are stand-ins for testing the
// runtime's decisions, not estimates of a GPU's speed.
struct Stream {
  EmuDevice::State* device = nullptr;  // the device it belongs to
  int id = 0;                          // 0: the legacy default stream
  bool blocking = true;                // synchronizes with the legacy stream
  bool destroyed = false;
  uint64_t clock = 0;           // operations run so far
  double now_us = 0;            // Note [emulated time]
  std::vector<uint64_t> known;  // Note [stream order]: known[id] == clock
  Graph* capture = nullptr;     // the graph it is captured into
  ThunkContext pending;         // the thunk whose operation comes next
  // The last marker: thunks of one instruction share its write event.
  const gpu::EntryPlan* last_plan = nullptr;
  int64_t last_thunk = -1;
  uint32_t last_event = 0;
};

struct Event {
  std::vector<uint64_t> known;
  bool recorded = false;
  bool timing = true;
  double time_us = 0;  // the stream's clock when it was recorded (Note [emulated time])
  // Recorded during a capture: the graph and the op's index in it.
  Graph* captured = nullptr;
  Stream* stream = nullptr;
  size_t index = 0;
};

using OpFn = std::function<cudaError_t(Stream&)>;

struct GraphOp {
  Stream* stream;
  OpFn run;
};

struct Graph {
  Stream* origin = nullptr;
  std::vector<GraphOp> ops;
  std::map<Stream*, size_t> last_op;      // per stream: its last op's index
  std::map<Stream*, size_t> joined_back;  // per stream: its last record the origin waited for
  bool invalid = false;
  std::string why;
};

struct GraphExec {
  Stream* origin = nullptr;
  std::vector<GraphOp> ops;
};

struct Function {
  const EmuKernel* kernel = nullptr;
  int64_t max_dynamic_smem = -1;  // cuFuncSetAttribute's, -1: the default
};

// An all-reduce's result, landing when another party waits (Note
// [in-flight all-reduces] in emu_ops.cc).
struct Landing {
  int stream = 0;
  uint64_t clock = 0;
  std::function<void()> land;
};

struct EmuDevice::State {
  EmuOptions options;
  std::string target;
  std::vector<std::unique_ptr<KernelLibrary>> libraries;  // one per artifact
  std::unique_ptr<GridRunner> runner;
  std::unique_ptr<MemoryChecker> checker;
  std::vector<std::unique_ptr<Stream>> streams;  // [0]: legacy
  std::vector<uint64_t> host_known;              // what the host has seen end
  std::vector<Landing> landings;
  std::map<uintptr_t, size_t> device_memory;  // base -> bytes (mmap'ed)
  std::map<uintptr_t, size_t> host_memory;    // cudaHostAlloc'ed
  int64_t allocations = 0;
  // The last error, with the emulator's words for it; findings stick.
  cudaError_t last_error = cudaSuccess, sticky = cudaSuccess;
  std::string last_message;
  EmuStats stats;
  gpu::RuntimeApi runtime;
  gpu::DriverApi driver;
  gpu::CublasLtApi cublaslt;
  // cublasLtMatmul's work goes to the device's streams through it, and the
  // emulated library's own status strings stand behind the device's findings.
  MatmulExecutor gemm_executor;
  gpu::ApiFn<decltype(::cublasLtGetStatusString)> lt_status_string;
  gpu::Backend backend;
  std::unique_ptr<gpu::ThunkObserver> observer;
};

// Every function below takes its device explicitly, or finds it through a
// stream (Stream::device): nothing in runtime/emu is process-global.
// emu_streams.cc: the stream engine, which the runtime API (emu_device.cc)
// and the operations (emu_ops.cc) build on and which calls neither.

// Runs `op` on `s` now, or records it when `s` is captured.
cudaError_t Enqueue(Stream& s, OpFn op);
// Runs `op` on `s` now (Note [stream order]: merges what the host knows).
cudaError_t Execute(Stream& s, const OpFn& op);
// `to` learns `from` (vector clocks); all-reduces another party now waits
// for land. `owner`: the stream whose clock `to` is, or -1 for the host.
void Learn(EmuDevice::State& d, std::vector<uint64_t>& to, const std::vector<uint64_t>& from,
           int owner);
// The live stream `stream` names on `d` (null: the legacy one), or null.
Stream* ToStream(EmuDevice::State& d, cudaStream_t stream);
StreamPosition Position(Stream& s);
// The thunk the next operation of `s` belongs to (consumed), or none.
ThunkContext TakeThunk(Stream& s);
// Records an error (`message` for GetErrorString); a finding also sticks:
// every later call returns it, as a GPU's after a faulting kernel.
cudaError_t Fail(EmuDevice::State& d, cudaError_t code, std::string message, bool sticky = false);
// A memory defect of an operation: one line, prefixed with its thunk.
cudaError_t Finding(EmuDevice::State& d, const ThunkContext& ctx, const std::string& what,
                    const Status& status);
// Whether `ctx` is the last thunk of its instruction.
bool LastOfInstruction(const ThunkContext& ctx);
// The thunk's description for messages ("entry train_step thunk 12 (...)").
std::string Describe(const ThunkContext& ctx);

// emu_ops.cc: the driver API and cuBLASLt of the device, and its operations.
gpu::DriverApi EmuDriverApi(EmuDevice::State& d);
gpu::CublasLtApi EmuCublasLt(EmuDevice::State& d);
cudaError_t CopyOp(Stream& s, void* dst, const void* src, size_t bytes, std::string what);
cudaError_t SetOp(Stream& s, void* dst, int value, size_t bytes, std::string what);
std::unique_ptr<gpu::Communicator> MakeEmuCommunicator(EmuDevice::State& d, rt::Communicator* host);

}  // namespace gptc::rt::emu

#endif  // GPTC_RUNTIME_EMU_EMU_STATE_H_
