#include "runtime/emu/emu_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <tuple>

#include "runtime/emu/emu_state.h"
#include "runtime/emu/kernel_estimate.h"

namespace gptc::rt::emu {

using State = EmuDevice::State;

namespace {

// Host memory from /proc/meminfo (kB lines), in bytes; 0 when unknown.
int64_t MemInfo(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  int64_t kb = 0;
  std::string unit;
  while (in >> name >> kb >> unit) {
    if (name == key) return kb * 1024;
  }
  return 0;
}

// --- the CUDA runtime API ------------------------------------------------

cudaError_t GetDeviceCount(State& d, int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t SetDevice(State& d, int device) {
  if (device != 0)
    return Fail(d, cudaErrorInvalidDevice,
                fmt::format("emulated device {}: there is only device 0", device));
  return cudaSuccess;
}

cudaError_t GetDeviceProperties(State& d, cudaDeviceProp* prop, int device) {
  if (device != 0) return Fail(d, cudaErrorInvalidDevice, "there is only device 0");
  *prop = cudaDeviceProp{};
  const std::string name = fmt::format("gptc emulated {} (x86-64 host)", d.target);
  std::snprintf(prop->name, sizeof(prop->name), "%s", name.c_str());
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = d.runner->workers();
  prop->sharedMemPerBlock = 48 << 10;
  prop->sharedMemPerBlockOptin = 227 << 10;
  prop->maxThreadsPerBlock = 1024;
  prop->warpSize = 32;
  prop->totalGlobalMem = static_cast<size_t>(MemInfo("MemTotal:"));
  return cudaSuccess;
}

cudaError_t DriverGetVersion(State& d, int* v) {
  *v = 13000;
  return cudaSuccess;
}

cudaError_t RuntimeGetVersion(State& d, int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t MemGetInfo(State& d, size_t* free, size_t* total) {
  *free = static_cast<size_t>(MemInfo("MemAvailable:"));
  *total = static_cast<size_t>(MemInfo("MemTotal:"));
  return cudaSuccess;
}

cudaError_t GetLastError(State& d) {
  if (d.sticky != cudaSuccess) return d.sticky;
  cudaError_t e = d.last_error;
  d.last_error = cudaSuccess;
  return e;
}

const char* GetErrorName(State& d, cudaError_t e) { return ::cudaGetErrorName(e); }

const char* GetErrorString(State& d, cudaError_t e) {
  if (e != cudaSuccess && e == d.last_error && !d.last_message.empty()) {
    return d.last_message.c_str();
  }
  return ::cudaGetErrorString(e);
}

// Everything every stream has done is done (cudaFree and friends).
void SynchronizeDevice(State& d) {
  for (auto& s : d.streams) Learn(d, d.host_known, s->known, -1);
}

cudaError_t Malloc(State& d, void** p, size_t bytes) {
  if (d.sticky != cudaSuccess) return d.sticky;
  const size_t size = std::max<size_t>(bytes, 1);
  void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    return Fail(d, cudaErrorMemoryAllocation,
                fmt::format("emulated device: out of host memory for {} bytes", bytes));
  }
  // Device memory starts poisoned: a read of what nothing wrote is NaN (or
  // -1), never a lucky zero.
  std::memset(m, 0xff, size);
  d.device_memory[reinterpret_cast<uintptr_t>(m)] = size;
  d.checker->AddAllocation(static_cast<char*>(m), size,
                           fmt::format("device allocation #{} ({} bytes)", ++d.allocations, bytes));
  *p = m;
  return cudaSuccess;
}

cudaError_t Free(State& d, void* p) {
  SynchronizeDevice(d);
  if (p == nullptr) return cudaSuccess;
  auto it = d.device_memory.find(reinterpret_cast<uintptr_t>(p));
  if (it == d.device_memory.end()) {
    return Fail(d, cudaErrorInvalidValue, fmt::format("cudaFree({}): not an allocation", p));
  }
  d.checker->RemoveAllocation(static_cast<char*>(p));
  munmap(p, it->second);
  d.device_memory.erase(it);
  return cudaSuccess;
}

cudaError_t HostAlloc(State& d, void** p, size_t bytes, unsigned int) {
  *p = std::malloc(std::max<size_t>(bytes, 1));
  if (*p == nullptr) return Fail(d, cudaErrorMemoryAllocation, "out of host memory");
  d.host_memory[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return cudaSuccess;
}

cudaError_t FreeHost(State& d, void* p) {
  SynchronizeDevice(d);
  if (d.host_memory.erase(reinterpret_cast<uintptr_t>(p)) == 0) {
    return Fail(d, cudaErrorInvalidValue, "cudaFreeHost: not a cudaHostAlloc pointer");
  }
  std::free(p);
  return cudaSuccess;
}

// Synchronous calls have no place in a stream capture (CUDA invalidates it).
cudaError_t RefuseDuringCapture(State& d, const char* call) {
  for (auto& s : d.streams) {
    if (s->capture != nullptr) {
      s->capture->invalid = true;
      s->capture->why = call;
      return Fail(d, cudaErrorStreamCaptureImplicit,
                  fmt::format("{} during a stream capture (it synchronizes with the legacy "
                              "stream): the capture is invalidated",
                              call));
    }
  }
  return cudaSuccess;
}

cudaError_t Memcpy(State& d, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (cudaError_t e = RefuseDuringCapture(d, "cudaMemcpy"); e != cudaSuccess) return e;
  Stream& legacy = *d.streams[0];
  const std::string what = fmt::format("cudaMemcpy of {} bytes (legacy default stream)", bytes);
  cudaError_t e = Execute(legacy, [&](Stream& on) { return CopyOp(on, dst, src, bytes, what); });
  // To the host, the copy is complete on return; from pageable memory to the
  // device, only staged (CUDA's documented synchronous behaviour).
  if (e == cudaSuccess && kind != cudaMemcpyHostToDevice) Learn(d, d.host_known, legacy.known, -1);
  return e;
}

cudaError_t MemcpyAsync(State& d, void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                        cudaStream_t stream) {
  Stream* s = ToStream(d, stream);
  if (s == nullptr)
    return Fail(d, cudaErrorInvalidResourceHandle, "cudaMemcpyAsync: unknown stream");
  const std::string what = fmt::format("cudaMemcpyAsync of {} bytes", bytes);
  return Enqueue(*s, [=](Stream& on) { return CopyOp(on, dst, src, bytes, what); });
}

cudaError_t Memset(State& d, void* dst, int value, size_t bytes) {
  if (cudaError_t e = RefuseDuringCapture(d, "cudaMemset"); e != cudaSuccess) return e;
  const std::string what = fmt::format("cudaMemset of {} bytes (legacy default stream)", bytes);
  return Execute(*d.streams[0], [&](Stream& on) { return SetOp(on, dst, value, bytes, what); });
}

cudaError_t MemsetAsync(State& d, void* dst, int value, size_t bytes, cudaStream_t stream) {
  Stream* s = ToStream(d, stream);
  if (s == nullptr)
    return Fail(d, cudaErrorInvalidResourceHandle, "cudaMemsetAsync: unknown stream");
  const std::string what = fmt::format("cudaMemsetAsync of {} bytes", bytes);
  return Enqueue(*s, [=](Stream& on) { return SetOp(on, dst, value, bytes, what); });
}

cudaError_t StreamCreateWithFlags(State& d, cudaStream_t* out, unsigned int flags) {
  auto s = std::make_unique<Stream>();
  s->device = &d;
  s->id = static_cast<int>(d.streams.size());
  s->blocking = (flags & cudaStreamNonBlocking) == 0;
  s->known.assign(d.streams.size() + 1, 0);
  *out = reinterpret_cast<cudaStream_t>(s.get());
  d.streams.push_back(std::move(s));
  return cudaSuccess;
}

cudaError_t StreamDestroy(State& d, cudaStream_t stream) {
  Stream* s = ToStream(d, stream);
  if (s == nullptr || s->id == 0)
    return Fail(d, cudaErrorInvalidResourceHandle, "cudaStreamDestroy: unknown stream");
  // Its work still completes; the object stays for graphs that name it.
  Learn(d, d.host_known, s->known, -1);
  s->destroyed = true;
  return cudaSuccess;
}

cudaError_t StreamSynchronize(State& d, cudaStream_t stream) {
  Stream* s = ToStream(d, stream);
  if (s == nullptr)
    return Fail(d, cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: unknown stream");
  if (s->capture != nullptr) {
    s->capture->invalid = true;
    s->capture->why = "cudaStreamSynchronize";
    return Fail(d, cudaErrorStreamCaptureUnsupported,
                "cudaStreamSynchronize on a capturing stream");
  }
  if (d.sticky != cudaSuccess) return d.sticky;
  Learn(d, d.host_known, s->known, -1);
  return cudaSuccess;
}

cudaError_t EventCreateWithFlags(State& d, cudaEvent_t* out, unsigned int flags) {
  auto* e = new Event();
  e->timing = (flags & cudaEventDisableTiming) == 0;
  *out = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}

cudaError_t EventCreate(State& d, cudaEvent_t* out) {
  return EventCreateWithFlags(d, out, cudaEventDefault);
}

cudaError_t EventDestroy(State& d, cudaEvent_t event) {
  delete reinterpret_cast<Event*>(event);
  return cudaSuccess;
}

cudaError_t EventRecord(State& d, cudaEvent_t event, cudaStream_t stream) {
  Stream* s = ToStream(d, stream);
  auto* e = reinterpret_cast<Event*>(event);
  if (s == nullptr || e == nullptr)
    return Fail(d, cudaErrorInvalidResourceHandle, "cudaEventRecord: unknown stream or event");
  if (s->capture != nullptr) {
    e->captured = s->capture;
    e->stream = s;
    e->index = s->capture->ops.size();
  } else {
    e->captured = nullptr;
  }
  return Enqueue(*s, [e](Stream& on) {
    e->known = on.known;
    e->recorded = true;
    e->time_us = on.now_us;
    return cudaSuccess;
  });
}

cudaError_t StreamWaitEvent(State& d, cudaStream_t stream, cudaEvent_t event, unsigned int) {
  Stream* s = ToStream(d, stream);
  auto* e = reinterpret_cast<Event*>(event);
  if (s == nullptr || e == nullptr)
    return Fail(d, cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: unknown stream or event");
  if (Graph* g = e->captured; g != nullptr && e->stream->capture == g) {
    if (s->capture == nullptr) s->capture = g;  // a fork joins the capture
    if (s == g->origin && e->stream != s) {
      size_t& back = g->joined_back[e->stream];
      back = std::max(back, e->index);
    }
  }
  return Enqueue(*s, [e](Stream& on) {
    Learn(*on.device, on.known, e->known, on.id);
    on.now_us = std::max(on.now_us, e->time_us);
    return cudaSuccess;
  });
}

cudaError_t EventSynchronize(State& d, cudaEvent_t event) {
  auto* e = reinterpret_cast<Event*>(event);
  if (e == nullptr)
    return Fail(d, cudaErrorInvalidResourceHandle, "cudaEventSynchronize: unknown event");
  if (e->captured != nullptr && e->stream->capture == e->captured) {
    return Fail(d, cudaErrorStreamCaptureUnsupported,
                "cudaEventSynchronize of an event being captured");
  }
  if (d.sticky != cudaSuccess) return d.sticky;
  Learn(d, d.host_known, e->known, -1);
  return cudaSuccess;
}

cudaError_t EventElapsedTime(State& d, float* ms, cudaEvent_t start, cudaEvent_t end) {
  auto* a = reinterpret_cast<Event*>(start);
  auto* b = reinterpret_cast<Event*>(end);
  if (a == nullptr || b == nullptr || !a->recorded || !b->recorded || !a->timing || !b->timing) {
    return Fail(d, cudaErrorInvalidResourceHandle,
                "cudaEventElapsedTime: events not recorded with timing");
  }
  *ms = static_cast<float>((b->time_us - a->time_us) / 1000);
  return cudaSuccess;
}

cudaError_t StreamBeginCapture(State& d, cudaStream_t stream, cudaStreamCaptureMode) {
  Stream* s = ToStream(d, stream);
  if (s == nullptr || s->id == 0)
    return Fail(d, cudaErrorStreamCaptureUnsupported,
                "cudaStreamBeginCapture: the legacy stream cannot be captured");
  if (s->capture != nullptr)
    return Fail(d, cudaErrorIllegalState, "cudaStreamBeginCapture: already capturing");
  s->capture = new Graph();
  s->capture->origin = s;
  return cudaSuccess;
}

cudaError_t StreamEndCapture(State& d, cudaStream_t stream, cudaGraph_t* out) {
  Stream* s = ToStream(d, stream);
  *out = nullptr;
  if (s == nullptr || s->capture == nullptr || s->capture->origin != s) {
    return Fail(d, cudaErrorIllegalState,
                "cudaStreamEndCapture: the stream did not begin a capture");
  }
  Graph* g = s->capture;
  for (auto& other : d.streams) {
    if (other->capture == g) other->capture = nullptr;
  }
  if (g->invalid) {
    std::string why = g->why;
    delete g;
    return Fail(d, cudaErrorStreamCaptureInvalidated, "the capture was invalidated by " + why);
  }
  for (const auto& [forked, last] : g->last_op) {
    if (forked == s) continue;
    auto back = g->joined_back.find(forked);
    if (back == g->joined_back.end() || back->second < last) {
      delete g;
      return Fail(d, cudaErrorStreamCaptureUnjoined,
                  fmt::format("cudaStreamEndCapture: stream {} was forked into the capture and "
                              "not joined back (the origin must wait for an event recorded "
                              "after its last work)",
                              forked->id));
    }
  }
  *out = reinterpret_cast<cudaGraph_t>(g);
  return cudaSuccess;
}

cudaError_t GraphInstantiate(State& d, cudaGraphExec_t* out, cudaGraph_t graph,
                             unsigned long long) {
  auto* g = reinterpret_cast<Graph*>(graph);
  if (g == nullptr) return Fail(d, cudaErrorInvalidValue, "cudaGraphInstantiate: no graph");
  *out = reinterpret_cast<cudaGraphExec_t>(new GraphExec{g->origin, g->ops});
  return cudaSuccess;
}

cudaError_t GraphLaunch(State& d, cudaGraphExec_t exec, cudaStream_t stream) {
  auto* x = reinterpret_cast<GraphExec*>(exec);
  Stream* s = ToStream(d, stream);
  if (x == nullptr || s == nullptr)
    return Fail(d, cudaErrorInvalidResourceHandle, "cudaGraphLaunch: unknown graph or stream");
  for (const GraphOp& op : x->ops) {
    Stream& on = op.stream == x->origin ? *s : *op.stream;
    if (cudaError_t e = Execute(on, op.run); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t GraphDestroy(State& d, cudaGraph_t graph) {
  delete reinterpret_cast<Graph*>(graph);
  return cudaSuccess;
}

cudaError_t GraphExecDestroy(State& d, cudaGraphExec_t exec) {
  delete reinterpret_cast<GraphExec*>(exec);
  return cudaSuccess;
}

// The executor's thunks, for the checks (Note [provenance]).
class Observer : public gpu::ThunkObserver {
 public:
  explicit Observer(State& device) : d(device) {}

  void EntryCreated(const gpu::EntryPlan& plan, const char* arena) override {
    d.checker->AddEntry(plan, arena);
  }
  void EntryDestroyed(const gpu::EntryPlan& plan) override { d.checker->RemoveEntry(plan); }
  cudaError_t BeforeThunk(const gpu::EntryPlan& plan, int64_t index, cudaStream_t stream,
                          bool runs_work) override {
    Stream* s = ToStream(d, stream);
    if (s == nullptr)
      return Fail(d, cudaErrorInvalidResourceHandle, "thunk marker: unknown stream");
    const gpu::EntryPlan* p = &plan;
    return Enqueue(*s, [p, index, runs_work](Stream& on) {
      State& d = *on.device;
      const gpu::Thunk& t = p->thunks[index];
      uint32_t event = 0;
      if (on.last_plan == p && on.last_thunk == index - 1 && index > 0 &&
          p->thunks[index - 1].instruction() == t.instruction()) {
        event = on.last_event;  // a later kernel of the same instruction
      } else {
        event = d.checker->NewEvent(WriteEvent{on.id, on.clock, p, index, ""});
      }
      on.last_plan = p, on.last_thunk = index, on.last_event = event;
      ThunkContext ctx{p, index, event};
      if (runs_work) {
        on.pending = ctx;
      } else {
        on.pending = ThunkContext{};
        d.checker->AliasThunk(ctx);
        // A skipped epilogue fallback (Note [epilogue fallback]) may end its
        // instruction: the gemm before it wrote the results.
        if (t.kind() == gpu::ThunkKind::kKernel && index > 0 && LastOfInstruction(ctx) &&
            p->thunks[index - 1].instruction() == t.instruction()) {
          if (Status st = d.checker->FinishInstruction(ctx); !st.ok()) {
            return Finding(d, ctx, "", st);
          }
        }
      }
      return cudaSuccess;
    });
  }
  cudaError_t InputsInPlace(const gpu::EntryPlan& plan, std::span<const gpu::ArenaSlice> slices,
                            cudaStream_t stream) override {
    Stream* s = ToStream(d, stream);
    if (s == nullptr)
      return Fail(d, cudaErrorInvalidResourceHandle, "inputs in place: unknown stream");
    const gpu::EntryPlan* p = &plan;
    std::vector<gpu::ArenaSlice> in_place(slices.begin(), slices.end());
    return Enqueue(*s, [p, in_place](Stream& on) {
      for (const gpu::ArenaSlice& slice : in_place) on.device->checker->AdoptInPlace(*p, slice);
      return cudaSuccess;
    });
  }

 private:
  State& d;
};

}  // namespace

std::string EmuStats::Summary() const {
  return fmt::format(
      "{} kernel launches ({} blocks, {:.2f} s), {} gemms ({:.2f} s), {} copies, {} collectives",
      launches, blocks, kernel_seconds, gemms, gemm_seconds, copies, collectives);
}

int64_t KernelCounters::BlocksPerSm() const {
  // An H100 multiprocessor: 2048 threads, 64K registers allocated per warp
  // in units of 256, 228 KiB of shared memory (1 KiB reserved a block), 32
  // blocks.
  if (threads <= 0) return 0;
  const int64_t warps = (threads + 31) / 32;
  int64_t blocks = std::min<int64_t>(32, 2048 / (warps * 32));
  if (registers > 0) {
    blocks = std::min(blocks, 65536 / (warps * ((registers * 32 + 255) / 256 * 256)));
  }
  return std::min(blocks, (228 << 10) / (shared_bytes + (1 << 10)));
}

std::string EmuStats::CountersTable() const {
  if (kernels.empty()) return "";
  std::vector<std::pair<std::string, const KernelCounters*>> rows;
  for (const auto& [name, k] : kernels) rows.emplace_back(name, &k);
  auto moved = [](const KernelCounters& k) { return k.counts.SectorBytes(); };
  std::sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) {
    return moved(*a.second) > moved(*b.second) ||
           (moved(*a.second) == moved(*b.second) && a.first < b.first);
  });
  auto ratio = [](uint64_t a, uint64_t b) {
    return b == 0 ? std::string("-") : fmt::format("{:.1f}", static_cast<double>(a) / b);
  };
  std::string out = fmt::format(
      "memory counters (Note [emulated memory counters]; per launch, sectors of 32 bytes, "
      "shared wavefronts of 128):\n{:>7} {:>9} {:>7} {:>9} {:>7} {:>10} {:>10} {:>6} {:>8} "
      "{:>7} {:>8} {:>7} {:>4} {:>6} {:>7} {:>5}  {}\n",
      "launches", "ld req", "sec/req", "st req", "sec/req", "moved MiB", "args MiB", "args%",
      "smem ld", "wave/rq", "smem st", "wave/rq", "regs", "thr/bk", "smem/bk", "bk/SM", "kernel");
  for (const auto& [name, k] : rows) {
    const LaunchCounters& m = k->counts;
    const double n = static_cast<double>(std::max<int64_t>(k->launches, 1));
    const uint64_t bytes = moved(*k);
    out += fmt::format(
        "{:>7} {:>9.0f} {:>7} {:>9.0f} {:>7} {:>10.2f} {:>10.2f} {:>6} {:>8.0f} {:>7} {:>8.0f} "
        "{:>7} {:>4} {:>6} {:>7} {:>5}  {}\n",
        k->launches, m.global_load_requests / n,
        ratio(m.global_load_sectors, m.global_load_requests), m.global_store_requests / n,
        ratio(m.global_store_sectors, m.global_store_requests), bytes / n / (1 << 20),
        k->argument_bytes / n / (1 << 20),
        bytes == 0 ? std::string("-")
                   : fmt::format("{:.0f}", 100.0 * static_cast<double>(k->argument_bytes) / bytes),
        m.shared_load_requests / n, ratio(m.shared_load_wavefronts, m.shared_load_requests),
        m.shared_store_requests / n, ratio(m.shared_store_wavefronts, m.shared_store_requests),
        k->registers > 0 ? std::to_string(k->registers) : "?", k->threads, k->shared_bytes,
        k->BlocksPerSm(), name);
  }
  out.pop_back();
  return out;
}

std::string EmuStats::EstimateTable() const {
  if (kernels.empty()) return "";
  std::vector<std::tuple<double, std::string, const KernelCounters*, KernelEstimate>> rows;
  for (const auto& [name, k] : kernels) {
    const KernelEstimate e = EstimateH100(k);
    rows.emplace_back(-e.us * static_cast<double>(k.launches), name, &k, e);
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
  });
  std::string out = fmt::format(
      "instructions and H100 estimate (Note [emulated instruction counters], Note [H100 time "
      "estimate]; per launch, warp instructions, the mix in % of them):\n{:>7} {:>10}",
      "launches", "warp inst");
  for (uint32_t c = 0; c < program::emu::kNumInstructionClasses; ++c) {
    out += fmt::format(" {:>5.5}", InstructionClassName(c));
  }
  out += fmt::format(" {:>8} {:>9} {:>9} {:>9} {:>8} {:>6}  {}\n", "B/inst", "roof us", "est us",
                     "est/roof", "bound", "bk/SM", "kernel");
  for (const auto& [order, name, k, e] : rows) {
    const LaunchCounters& c = k->counts;
    const double n = static_cast<double>(std::max<int64_t>(k->launches, 1));
    const double total = static_cast<double>(c.Instructions());
    out += fmt::format("{:>7} {:>10.0f}", k->launches, total / n);
    for (uint32_t i = 0; i < program::emu::kNumInstructionClasses; ++i) {
      out += fmt::format(" {:>5.1f}", total == 0 ? 0.0 : 100.0 * c.instructions[i] / total);
    }
    const double bytes = static_cast<double>(c.SectorBytes());
    out += fmt::format(
        " {:>8.1f} {:>9.2f} {:>9.2f} {:>9} {:>8} {:>6}  {}\n", total == 0 ? 0.0 : bytes / total,
        e.roofline_us, e.us,
        e.roofline_us < 0.1 ? std::string("-") : fmt::format("{:.2f}", e.us / e.roofline_us),
        e.bound, k->BlocksPerSm(), name);
  }
  out.pop_back();
  return out;
}

StatusOr<std::unique_ptr<EmuDevice>> EmuDevice::Create(const program::Artifact& artifact,
                                                       std::string_view path,
                                                       const EmuOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<KernelLibrary> library, KernelLibrary::Load(artifact, path));
  library->SetChecks(options.checks || options.counters);
  auto state = std::make_unique<State>();
  state->options = options;
  state->target = artifact.manifest.target;
  state->libraries.push_back(std::move(library));
  state->runner = std::make_unique<GridRunner>(options.workers);
  state->checker = std::make_unique<MemoryChecker>(options.checks);
  State* d = state.get();
  auto legacy = std::make_unique<Stream>();
  legacy->device = d;
  legacy->known.assign(1, 0);
  state->streams.push_back(std::move(legacy));
  // Note [bound API functions] in runtime/gpu/api_fn.h: each bound to this device.
  state->runtime = gpu::RuntimeApi{
      .GetDeviceCount = gpu::BindApiFn<&GetDeviceCount>(d),
      .SetDevice = gpu::BindApiFn<&SetDevice>(d),
      .GetDeviceProperties = gpu::BindApiFn<&GetDeviceProperties>(d),
      .DriverGetVersion = gpu::BindApiFn<&DriverGetVersion>(d),
      .RuntimeGetVersion = gpu::BindApiFn<&RuntimeGetVersion>(d),
      .MemGetInfo = gpu::BindApiFn<&MemGetInfo>(d),
      .GetLastError = gpu::BindApiFn<&GetLastError>(d),
      .GetErrorName = gpu::BindApiFn<&GetErrorName>(d),
      .GetErrorString = gpu::BindApiFn<&GetErrorString>(d),
      .Malloc = gpu::BindApiFn<&Malloc>(d),
      .Free = gpu::BindApiFn<&Free>(d),
      .HostAlloc = gpu::BindApiFn<&HostAlloc>(d),
      .FreeHost = gpu::BindApiFn<&FreeHost>(d),
      .Memcpy = gpu::BindApiFn<&Memcpy>(d),
      .MemcpyAsync = gpu::BindApiFn<&MemcpyAsync>(d),
      .Memset = gpu::BindApiFn<&Memset>(d),
      .MemsetAsync = gpu::BindApiFn<&MemsetAsync>(d),
      .StreamCreateWithFlags = gpu::BindApiFn<&StreamCreateWithFlags>(d),
      .StreamDestroy = gpu::BindApiFn<&StreamDestroy>(d),
      .StreamSynchronize = gpu::BindApiFn<&StreamSynchronize>(d),
      .StreamWaitEvent = gpu::BindApiFn<&StreamWaitEvent>(d),
      .StreamBeginCapture = gpu::BindApiFn<&StreamBeginCapture>(d),
      .StreamEndCapture = gpu::BindApiFn<&StreamEndCapture>(d),
      .EventCreate = gpu::BindApiFn<&EventCreate>(d),
      .EventCreateWithFlags = gpu::BindApiFn<&EventCreateWithFlags>(d),
      .EventRecord = gpu::BindApiFn<&EventRecord>(d),
      .EventSynchronize = gpu::BindApiFn<&EventSynchronize>(d),
      .EventElapsedTime = gpu::BindApiFn<&EventElapsedTime>(d),
      .EventDestroy = gpu::BindApiFn<&EventDestroy>(d),
      .GraphInstantiate = gpu::BindApiFn<&GraphInstantiate>(d),
      .GraphLaunch = gpu::BindApiFn<&GraphLaunch>(d),
      .GraphDestroy = gpu::BindApiFn<&GraphDestroy>(d),
      .GraphExecDestroy = gpu::BindApiFn<&GraphExecDestroy>(d),
  };
  state->observer = std::make_unique<Observer>(*d);
  state->driver = EmuDriverApi(*d);
  state->cublaslt = EmuCublasLt(*d);
  state->backend =
      gpu::Backend{.name = "emulated",
                   .runtime = &state->runtime,
                   .driver = [d]() -> StatusOr<const gpu::DriverApi*> { return &d->driver; },
                   .cublaslt = [d]() -> StatusOr<const gpu::CublasLtApi*> { return &d->cublaslt; },
                   .observer = state->observer.get(),
                   .stand_in_clock = true};
  if (Status st = gpu::InstallBackend(state->backend); !st.ok()) {
    return Error("{}: {}", path, st.message());
  }
  return std::unique_ptr<EmuDevice>(new EmuDevice(std::move(state)));
}

EmuDevice::EmuDevice(std::unique_ptr<State> state) : state_(std::move(state)) {}

EmuDevice::~EmuDevice() {
  gpu::UninstallBackend(state_->backend);
  for (Landing& l : state_->landings) l.land();
  state_->landings.clear();
  for (auto& [base, size] : state_->device_memory) munmap(reinterpret_cast<void*>(base), size);
  for (auto& [base, size] : state_->host_memory) std::free(reinterpret_cast<void*>(base));
}

Status EmuDevice::AddArtifact(const program::Artifact& artifact, std::string_view path) {
  ASSIGN_OR_RETURN(std::unique_ptr<KernelLibrary> library, KernelLibrary::Load(artifact, path));
  library->SetChecks(state_->options.checks || state_->options.counters);
  state_->libraries.push_back(std::move(library));
  return Status::Ok();
}

std::string EmuDevice::Describe() const {
  return fmt::format("emu (gptc emulated {} on {} host thread{}, checks {})", state_->target,
                     state_->runner->workers(), state_->runner->workers() == 1 ? "" : "s",
                     state_->options.checks ? "on" : "off");
}

const EmuOptions& EmuDevice::options() const { return state_->options; }

EmuStats EmuDevice::stats() const { return state_->stats; }

std::unique_ptr<gpu::Communicator> EmuDevice::MakeCommunicator(rt::Communicator* host) {
  return MakeEmuCommunicator(*state_, host);
}

const gpu::Backend& EmuDevice::backend() const { return state_->backend; }

void EmuDevice::MarkHostWritten(const void* p, size_t bytes) {
  state_->checker->AdoptHostWrite(static_cast<const char*>(p), bytes);
}

}  // namespace gptc::rt::emu
