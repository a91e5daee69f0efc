// The emulated device's checked operations (kernel launches, copies,
// memsets, gemms, all-reduces) and its driver API. Every operation runs on
// the calling thread when its stream reaches it (Note [emulated streams]).
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>

#include "compiler/support/float_bits.h"
#include "runtime/emu/emu_state.h"
#include "runtime/emu/lt_api.h"

namespace gptc::rt::emu {

namespace {

using Clock = std::chrono::steady_clock;
using State = EmuDevice::State;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Note [emulated time]: a copy's or memset's stand-in duration.
double CopyMicros(size_t bytes) { return 1.0 + static_cast<double>(bytes) / 2e6; }

// The write event of an operation: its thunk's instruction's, or a new one.
uint32_t EventFor(Stream& s, const ThunkContext& ctx, const std::string& what) {
  MemoryChecker& mc = *s.device->checker;
  if (ctx.plan != nullptr) {
    mc.Touch(ctx.event, s.id, s.clock);
    return ctx.event;
  }
  return mc.NewEvent(WriteEvent{s.id, s.clock, nullptr, -1, what});
}

// The thunk of the operation about to run, when it is of `kind`.
ThunkContext TakeThunkOf(Stream& s, std::initializer_list<gpu::ThunkKind> kinds) {
  ThunkContext ctx = TakeThunk(s);
  if (ctx.plan == nullptr) return ctx;
  for (gpu::ThunkKind k : kinds) {
    if (ctx.get()->kind() == k) return ctx;
  }
  return ThunkContext{};
}

cudaError_t FinishThunk(State& d, const ThunkContext& ctx) {
  if (ctx.plan == nullptr || !LastOfInstruction(ctx)) return cudaSuccess;
  Status s = d.checker->FinishInstruction(ctx);
  return s.ok() ? cudaSuccess : Finding(d, ctx, "", s);
}

// --- kernels --------------------------------------------------------------

struct Module {
  Function function;
};

// The threads a block of `k` may have (cuFuncGetAttribute's
// MAX_THREADS_PER_BLOCK): registers are allocated per warp in units of 256
// from the 64K of an SM.
int64_t MaxThreads(const EmuKernel& k) {
  if (k.registers <= 0) return 1024;
  const int64_t per_warp = (k.registers * 32 + 255) / 256 * 256;
  return std::min<int64_t>(1024, 65536 / per_warp * 32);
}

int64_t DynamicSmemLimit(const Function& f) {
  return f.max_dynamic_smem >= 0 ? f.max_dynamic_smem
                                 : std::max<int64_t>(0, (48 << 10) - f.kernel->static_smem);
}

CUresult DriverFail(State& d, CUresult code, std::string message) {
  const cudaError_t as_runtime =
      code == CUDA_ERROR_ILLEGAL_ADDRESS ? cudaErrorIllegalAddress : cudaErrorInvalidValue;
  Fail(d, as_runtime, std::move(message));
  return code;
}

CUresult ToDriver(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return CUDA_SUCCESS;
    case cudaErrorIllegalAddress:
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    case cudaErrorStreamCaptureInvalidated:
      return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    case cudaErrorInvalidResourceHandle:
      return CUDA_ERROR_INVALID_HANDLE;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

cudaError_t KernelOp(Stream& s, const Function& f, Dim3 grid, Dim3 block, uint32_t smem,
                     const std::vector<uint64_t>& args) {
  State& d = *s.device;
  MemoryChecker& mc = *d.checker;
  const EmuKernel& k = *f.kernel;
  const ThunkContext ctx = TakeThunkOf(s, {gpu::ThunkKind::kKernel});
  const uint32_t event = EventFor(s, ctx, "kernel " + k.name + " (launched outside the plan)");
  const StreamPosition pos = Position(s);
  if (mc.checks() && ctx.plan != nullptr) {
    const auto& plan_kernel = std::get<gpu::KernelThunk>(ctx.get()->body);
    const char* arena = mc.ArenaOf(ctx.plan);
    for (size_t i = 0; i < plan_kernel.args.size() && arena != nullptr; ++i) {
      const gpu::ArenaSlice& slice = plan_kernel.args[i];
      if (i >= args.size() || args[i] != reinterpret_cast<uint64_t>(arena + slice.offset)) {
        return Finding(
            d, ctx, "",
            Error("argument {} is not the plan's slice [{}, +{})", i, slice.offset, slice.size));
      }
      const bool operand =
          plan_kernel.operands < 0 || static_cast<int64_t>(i) < plan_kernel.operands;
      Status st = operand ? mc.CheckOperand(ctx, slice, fmt::format("operand {}", i).c_str(), pos)
                          : mc.Write(arena + slice.offset, slice.size, event, pos, Describe(ctx),
                                     /*stamp=*/false);
      if (!st.ok()) return Finding(d, ctx, "", st);
    }
  }
  std::unique_ptr<GlobalAccessChecker> checker = mc.ForLaunch(ctx, event, args, pos);
  Launch launch{.kernel = k.name,
                .function = k.function,
                .args = args,
                .grid = grid,
                .block = block,
                .static_shared = k.host_shared_bytes,
                .dynamic_shared = smem,
                .uses_sync = k.uses_sync,
                .ordered = k.ordered,
                .warpgroups = k.warpgroups,
                .checks = mc.checks(),
                .global = checker.get()};
  // Note [emulated memory counters]
  // A launch outside the plan (the gemm autotuning's fallback kernels) is not the step's.
  KernelCounters* counters =
      d.options.counters && ctx.plan != nullptr ? &d.stats.kernels[k.name] : nullptr;
  LaunchCounters launch_counters;
  if (counters != nullptr) launch.counters = &launch_counters;
  // Note [emulated time]
  const double threads = static_cast<double>(grid.count()) * static_cast<double>(block.count());
  s.now_us += 2.0 + 2.0 * std::floor(threads / (132.0 * 2048.0));
  const Clock::time_point t0 = Clock::now();
  Status run = d.runner->Run(launch);
  d.stats.kernel_seconds += Since(t0);
  ++d.stats.launches;
  d.stats.blocks += static_cast<int64_t>(grid.count());
  if (!run.ok()) return Finding(d, ctx, "kernel " + k.name, run);
  if (counters != nullptr) {
    ++counters->launches;
    counters->blocks += static_cast<int64_t>(grid.count());
    counters->counts.Add(launch_counters);
    counters->registers = k.registers;
    counters->threads = static_cast<int64_t>(block.count());
    counters->shared_bytes = k.static_smem + smem;
    if (const gpu::Thunk* t = ctx.get(); t != nullptr) {
      // Each operand read once and each result written once: an in-place
      // result is its operand's slice again, read and then written.
      const auto& kernel = std::get<gpu::KernelThunk>(t->body);
      std::set<std::pair<int64_t, int64_t>> read, written;
      for (size_t i = 0; i < kernel.args.size(); ++i) {
        const gpu::ArenaSlice& slice = kernel.args[i];
        const bool operand = kernel.operands < 0 || static_cast<int64_t>(i) < kernel.operands;
        auto& seen = operand ? read : written;
        if (seen.emplace(slice.offset, slice.size).second) counters->argument_bytes += slice.size;
      }
    }
  }
  return FinishThunk(d, ctx);
}

CUresult CuGetErrorName(State& d, CUresult r, const char** out) {
  static const std::pair<CUresult, const char*> kNames[] = {
      {CUDA_SUCCESS, "CUDA_SUCCESS"},
      {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
      {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE"},
      {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
      {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
      {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"},
      {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS"},
      {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
      {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
  };
  for (const auto& [code, name] : kNames) {
    if (code == r) {
      *out = name;
      return CUDA_SUCCESS;
    }
  }
  *out = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult CuGetErrorString(State& d, CUresult r, const char** out) {
  if (r != CUDA_SUCCESS && !d.last_message.empty()) {
    *out = d.last_message.c_str();
  } else {
    *out = r == CUDA_SUCCESS ? "no error" : "emulated driver error";
  }
  return CUDA_SUCCESS;
}

CUresult ModuleLoadDataEx(State& d, CUmodule* module, const void* image, unsigned int n,
                          CUjit_option* options, void** values) {
  const EmuKernel* k = nullptr;
  for (const auto& library : d.libraries) {
    if (k == nullptr) k = library->FindImage(image);
  }
  if (k == nullptr) {
    const std::string message =
        "the emulator library has no host code for this PTX/cubin image (an artifact compiled "
        "without --emu, or not this artifact's image)";
    for (unsigned int i = 0; i < n; ++i) {
      if (options[i] != CU_JIT_ERROR_LOG_BUFFER) continue;
      size_t size = 0;
      for (unsigned int j = 0; j < n; ++j) {
        if (options[j] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
          size = reinterpret_cast<uintptr_t>(values[j]);
        }
      }
      if (size > 0) std::snprintf(static_cast<char*>(values[i]), size, "%s", message.c_str());
    }
    return DriverFail(d, CUDA_ERROR_INVALID_IMAGE, message);
  }
  auto* m = new Module{Function{k, -1}};
  *module = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

CUresult ModuleUnload(State& d, CUmodule module) {
  delete reinterpret_cast<Module*>(module);
  return CUDA_SUCCESS;
}

CUresult ModuleGetFunction(State& d, CUfunction* f, CUmodule module, const char* name) {
  auto* m = reinterpret_cast<Module*>(module);
  if (m == nullptr)
    return DriverFail(d, CUDA_ERROR_INVALID_HANDLE, "cuModuleGetFunction: no module");
  if (m->function.kernel->name != name) {
    return DriverFail(d, CUDA_ERROR_NOT_FOUND,
                      fmt::format("the module holds {}, not {}", m->function.kernel->name, name));
  }
  *f = reinterpret_cast<CUfunction>(&m->function);
  return CUDA_SUCCESS;
}

CUresult FuncSetAttribute(State& d, CUfunction function, CUfunction_attribute attr, int value) {
  auto* f = reinterpret_cast<Function*>(function);
  if (attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    const int64_t most = (227 << 10) - f->kernel->static_smem;
    if (value < 0 || value > most) {
      return DriverFail(d, CUDA_ERROR_INVALID_VALUE,
                        fmt::format("kernel {}: MAX_DYNAMIC_SHARED_SIZE_BYTES {}: at most {} with "
                                    "its {} bytes of static shared memory",
                                    f->kernel->name, value, most, f->kernel->static_smem));
    }
    f->max_dynamic_smem = value;
    return CUDA_SUCCESS;
  }
  if (attr == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) return CUDA_SUCCESS;
  return DriverFail(
      d, CUDA_ERROR_INVALID_VALUE,
      fmt::format("cuFuncSetAttribute: attribute {} is not emulated", static_cast<int>(attr)));
}

CUresult FuncGetAttribute(State& d, int* out, CUfunction_attribute attr, CUfunction function) {
  auto* f = reinterpret_cast<Function*>(function);
  const EmuKernel& k = *f->kernel;
  switch (attr) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *out = static_cast<int>(MaxThreads(k));
      break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
      *out = static_cast<int>(k.static_smem);
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *out = static_cast<int>(k.registers);
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *out = static_cast<int>(DynamicSmemLimit(*f));
      break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
      *out = 0;
      break;
    default:
      return DriverFail(
          d, CUDA_ERROR_INVALID_VALUE,
          fmt::format("cuFuncGetAttribute: attribute {} is not emulated", static_cast<int>(attr)));
  }
  return CUDA_SUCCESS;
}

CUresult LaunchKernel(State& d, CUfunction function, unsigned gx, unsigned gy, unsigned gz,
                      unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream stream,
                      void** params, void** extra) {
  auto* f = reinterpret_cast<Function*>(function);
  if (f == nullptr) return DriverFail(d, CUDA_ERROR_INVALID_HANDLE, "cuLaunchKernel: no function");
  const EmuKernel& k = *f->kernel;
  if (extra != nullptr) {
    return DriverFail(d, CUDA_ERROR_NOT_SUPPORTED,
                      "cuLaunchKernel: the emulator takes kernelParams, not extra");
  }
  const uint64_t threads = uint64_t{bx} * by * bz;
  if (bx == 0 || by == 0 || bz == 0 || bx > 1024 || by > 1024 || bz > 64 ||
      static_cast<int64_t>(threads) > MaxThreads(k)) {
    return DriverFail(d, CUDA_ERROR_INVALID_VALUE,
                      fmt::format("kernel {}: block {}x{}x{}: at most {} threads ({} registers a "
                                  "thread)",
                                  k.name, bx, by, bz, MaxThreads(k), k.registers));
  }
  if (gx == 0 || gy == 0 || gz == 0 || gx > 0x7fffffffu || gy > 65535 || gz > 65535) {
    return DriverFail(d, CUDA_ERROR_INVALID_VALUE,
                      fmt::format("kernel {}: grid {}x{}x{} out of range", k.name, gx, gy, gz));
  }
  if (static_cast<int64_t>(smem) > DynamicSmemLimit(*f)) {
    return DriverFail(d, CUDA_ERROR_INVALID_VALUE,
                      fmt::format("kernel {}: {} bytes of dynamic shared memory exceed its limit "
                                  "of {} (static {}; cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_"
                                  "BYTES) raises it)",
                                  k.name, smem, DynamicSmemLimit(*f), k.static_smem));
  }
  std::vector<uint64_t> args;
  for (int64_t i = 0; i < k.params; ++i) args.push_back(*static_cast<const uint64_t*>(params[i]));
  Stream* s = ToStream(d, reinterpret_cast<cudaStream_t>(stream));
  if (s == nullptr)
    return DriverFail(d, CUDA_ERROR_INVALID_HANDLE, "cuLaunchKernel: unknown stream");
  const Function* fn = f;
  return ToDriver(Enqueue(*s, [=](Stream& on) {
    return KernelOp(on, *fn, Dim3{gx, gy, gz}, Dim3{bx, by, bz}, smem, args);
  }));
}

// --- gemms ----------------------------------------------------------------

// The plan's slice of gemm operand `what` ("A", "B", "C", "D", "bias", "aux").
const gpu::ArenaSlice* GemmSlice(const gpu::GemmThunk& g, std::string_view what) {
  if (what == "A") return &g.a;
  if (what == "B") return &g.b;
  if (what == "C") return &g.c;
  if (what == "D") return &g.d;
  if (what == "bias" && g.bias) return &*g.bias;
  if (what == "aux" && g.aux) return &*g.aux;
  return nullptr;
}

cudaError_t GemmOp(Stream& s, const MatmulWork& work) {
  State& d = *s.device;
  MemoryChecker& mc = *d.checker;
  const ThunkContext ctx = TakeThunkOf(s, {gpu::ThunkKind::kGemm});
  const uint32_t event = EventFor(s, ctx, "a gemm (outside the plan): " + work.summary);
  const StreamPosition pos = Position(s);
  const std::string who = ctx.plan != nullptr ? Describe(ctx) : "gemm " + work.summary;
  if (mc.checks()) {
    const auto* g = ctx.plan != nullptr ? &std::get<gpu::GemmThunk>(ctx.get()->body) : nullptr;
    const char* arena = g != nullptr ? mc.ArenaOf(ctx.plan) : nullptr;
    const std::optional<gpu::GemmThunk> plain =
        g != nullptr && g->fallback_d ? std::optional(program::PlainGemm(*g)) : std::nullopt;
    std::vector<std::string> checked;
    for (const auto* ranges : {&work.reads, &work.writes}) {
      const bool read = ranges == &work.reads;
      for (const ByteRange& r : *ranges) {
        const char* p = static_cast<const char*>(r.begin);
        const gpu::ArenaSlice* slice = arena != nullptr ? GemmSlice(*g, r.what) : nullptr;
        // Note [epilogue fallback]: the plain gemm's C and D may be the scratch.
        if (const gpu::ArenaSlice* scratch =
                slice != nullptr && plain ? GemmSlice(*plain, r.what) : nullptr;
            scratch != nullptr) {
          const char* lo = arena + scratch->offset;
          if (p >= lo && p + r.bytes <= lo + scratch->size) slice = scratch;
        }
        if (slice != nullptr) {
          const char* lo = arena + slice->offset;
          if (p < lo || p + r.bytes > lo + slice->size) {
            return Finding(d, ctx, "",
                           Error("{} {} bytes at +{} of its {} slice [{}, +{}): outside "
                                 "it (a wrong leading dimension or batch stride?)",
                                 read ? "reads" : "writes", r.bytes, p - lo, r.what, slice->offset,
                                 slice->size));
          }
          if (read && std::find(checked.begin(), checked.end(), r.what) == checked.end()) {
            checked.push_back(r.what);
            Status st = mc.CheckOperand(ctx, *slice, r.what, pos);
            if (!st.ok()) return Finding(d, ctx, "", st);
          }
        } else if (read) {
          if (Status st = mc.CheckRead(p, r.bytes, pos, who); !st.ok())
            return Finding(d, ctx, who, st);
        }
        if (!read) {
          Status st = mc.Write(p, r.bytes, event, pos, who, /*stamp=*/false);
          if (!st.ok()) return Finding(d, ctx, who, st);
        }
      }
    }
  }
  s.now_us += work.stand_in_us;  // Note [emulated time]
  const Clock::time_point t0 = Clock::now();
  work.run();
  d.stats.gemm_seconds += Since(t0);
  ++d.stats.gemms;
  for (const ByteRange& r : work.writes) {
    Status st = mc.Write(static_cast<const char*>(r.begin), r.bytes, event, pos, who);
    if (!st.ok()) return Finding(d, ctx, who, st);
  }
  return FinishThunk(d, ctx);
}

cublasStatus_t GemmExecutor(State& d, cudaStream_t stream, MatmulWork work) {
  Stream* s = ToStream(d, stream);
  if (s == nullptr) {
    Fail(d, cudaErrorInvalidResourceHandle, "cublasLtMatmul: unknown stream");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  auto shared = std::make_shared<MatmulWork>(std::move(work));
  cudaError_t e = Enqueue(*s, [shared](Stream& on) { return GemmOp(on, *shared); });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

// The cuBLASLt API's own words, or the device's finding for a matmul it stopped.
const char* GemmStatusString(State& d, cublasStatus_t status) {
  if (status == CUBLAS_STATUS_EXECUTION_FAILED && !d.last_message.empty()) {
    return d.last_message.c_str();
  }
  return d.lt_status_string(status);
}

// --- collectives (all-reduce, reduce-scatter, all-gather) ---------------------

// Note [in-flight all-reduces]
// NCCL runs a bucket on the communication stream while the compute stream
// goes on; its buffers belong to it from issue to the compute stream's wait
// (Note [bucketed all-reduce] in runtime/gpu/executor.h). The emulator
// exchanges the values at issue (every rank issues the same buckets in the
// same order) but lands the result only when another stream or the host
// waits for it; until then the result reads as NaN and the checks report
// any thunk that reads it or writes either buffer (MemoryChecker flights).
// A reduce-scatter's or all-gather's operand and result differ in size; the
// flight covers each at its own.
std::vector<float> ToFloats(const void* p, int64_t count, ir::DType dtype) {
  std::vector<float> out(count);
  if (dtype == ir::DType::kF32) {
    std::memcpy(out.data(), p, count * 4);
    return out;
  }
  const auto* h = static_cast<const uint16_t*>(p);
  for (int64_t i = 0; i < count; ++i) {
    out[i] = dtype == ir::DType::kBF16 ? BF16BitsToF32(h[i]) : F16BitsToF32(h[i]);
  }
  return out;
}

std::string FromFloats(const std::vector<float>& v, ir::DType dtype) {
  if (dtype == ir::DType::kF32) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  }
  std::string out(v.size() * 2, '\0');
  auto* h = reinterpret_cast<uint16_t*>(out.data());
  for (size_t i = 0; i < v.size(); ++i) {
    h[i] = dtype == ir::DType::kBF16 ? F32ToBF16Bits(v[i]) : F32ToF16Bits(v[i]);
  }
  return out;
}

// One collective as the executor enqueues it (gpu::Communicator's calls):
// `count` is NCCL's (program::AllReduceThunk).
struct CollectiveCall {
  program::CollectiveOp op = program::CollectiveOp::kAllReduce;
  const void* in = nullptr;
  void* out = nullptr;
  int64_t count = 0;
  ir::DType dtype = ir::DType::kF32;
  gpu::ReduceOp reduce = gpu::ReduceOp::kSum;
};

// The values collective `c` leaves in its result, exchanged with the other
// ranks through `host` (the CPU device's communicator: rank-order sums, as
// the evaluator's, bit for bit).
StatusOr<std::vector<float>> Exchange(rt::Communicator* host, const CollectiveCall& c,
                                      int64_t in_count, int64_t out_count) {
  const ir::ReduceKind kind =
      c.reduce == gpu::ReduceOp::kMax ? ir::ReduceKind::kMax : ir::ReduceKind::kSum;
  std::vector<float> values = ToFloats(c.in, in_count, c.dtype);
  if (c.op == program::CollectiveOp::kAllReduce) {
    RETURN_IF_ERROR(host->AllReduce(kind, std::span<float>(values)));
    return values;
  }
  std::vector<float> result(out_count);
  if (c.op == program::CollectiveOp::kReduceScatter) {
    RETURN_IF_ERROR(host->ReduceScatter(kind, values, result));
  } else {
    RETURN_IF_ERROR(host->AllGather(values, result));
  }
  return result;
}

cudaError_t CollectiveOp(Stream& s, rt::Communicator* host, const CollectiveCall& c) {
  State& d = *s.device;
  MemoryChecker& mc = *d.checker;
  const ThunkContext ctx = TakeThunkOf(s, {gpu::ThunkKind::kAllReduce});
  const uint32_t event = EventFor(s, ctx, "a collective (outside the plan)");
  const StreamPosition pos = Position(s);
  const int64_t world = host->world_size();
  const int64_t in_count = c.count * (c.op == program::CollectiveOp::kReduceScatter ? world : 1);
  const int64_t out_count = c.count * (c.op == program::CollectiveOp::kAllGather ? world : 1);
  const size_t width = static_cast<size_t>(ir::DTypeBytes(c.dtype));
  const size_t in_bytes = in_count * width, out_bytes = out_count * width;
  const std::string who =
      ctx.plan != nullptr ? Describe(ctx) : std::string(program::CollectiveOpName(c.op));
  if (mc.checks()) {
    const auto* a = ctx.plan != nullptr ? &std::get<gpu::AllReduceThunk>(ctx.get()->body) : nullptr;
    Status st = a != nullptr ? mc.CheckOperand(ctx, a->in, "in", pos)
                             : mc.CheckRead(static_cast<const char*>(c.in), in_bytes, pos, who);
    if (st.ok()) {
      st = mc.Write(static_cast<char*>(c.out), out_bytes, event, pos, who, /*stamp=*/false);
    }
    if (!st.ok()) return Finding(d, ctx, who, st);
  }
  StatusOr<std::vector<float>> values = Exchange(host, c, in_count, out_count);
  if (!values.ok()) {
    return Fail(d, cudaErrorUnknown, fmt::format("{}: {}", who, values.status().message()), true);
  }
  auto result = std::make_shared<std::string>(FromFloats(*values, c.dtype));
  mc.BeginFlight(static_cast<const char*>(c.in), in_bytes, static_cast<const char*>(c.out),
                 out_bytes, who);
  std::memset(c.out, 0xff, out_bytes);
  // Note [emulated time]
  s.now_us += 10.0 + static_cast<double>(std::max(in_bytes, out_bytes)) / 1e5;
  ++d.stats.collectives;
  void* out = c.out;
  d.landings.push_back(Landing{s.id, s.clock, [&mc, out, result, event, ctx] {
                                 std::memcpy(out, result->data(), result->size());
                                 mc.Land(static_cast<const char*>(out), event, ctx);
                               }});
  return cudaSuccess;
}

class EmuCommunicator : public gpu::Communicator {
 public:
  EmuCommunicator(State& device, rt::Communicator* host) : d_(device), host_(host) {}
  int world_size() const override { return static_cast<int>(host_->world_size()); }
  int rank() const override { return static_cast<int>(host_->rank()); }
  Status AllReduce(const void* in, void* out, int64_t count, ir::DType dtype, gpu::ReduceOp op,
                   void* stream) override {
    return Run({program::CollectiveOp::kAllReduce, in, out, count, dtype, op}, stream);
  }
  Status ReduceScatter(const void* in, void* out, int64_t recv_count, ir::DType dtype,
                       gpu::ReduceOp op, void* stream) override {
    return Run({program::CollectiveOp::kReduceScatter, in, out, recv_count, dtype, op}, stream);
  }
  Status AllGather(const void* in, void* out, int64_t send_count, ir::DType dtype,
                   void* stream) override {
    return Run({program::CollectiveOp::kAllGather, in, out, send_count, dtype, gpu::ReduceOp::kSum},
               stream);
  }
  void Abort() override { host_->Abort(Error("an emulated rank aborted")); }

 private:
  Status Run(const CollectiveCall& c, void* stream) {
    const std::string_view name = program::CollectiveOpName(c.op);
    Stream* s = ToStream(d_, static_cast<cudaStream_t>(stream));
    if (s == nullptr) return Error("emulated {}: unknown stream", name);
    rt::Communicator* host = host_;
    cudaError_t e = Enqueue(*s, [=](Stream& on) { return CollectiveOp(on, host, c); });
    if (e != cudaSuccess) return Error("emulated {}: {}", name, d_.last_message);
    return Status::Ok();
  }

  State& d_;
  rt::Communicator* host_;
};

}  // namespace

// --- copies and memsets ---------------------------------------------------------

cudaError_t CopyOp(Stream& s, void* dst, const void* src, size_t bytes, std::string what) {
  State& d = *s.device;
  MemoryChecker& mc = *d.checker;
  const ThunkContext ctx = TakeThunkOf(
      s, {gpu::ThunkKind::kCopy, gpu::ThunkKind::kConstant, gpu::ThunkKind::kAllReduce});
  const uint32_t event = EventFor(s, ctx, what);
  const StreamPosition pos = Position(s);
  const std::string who = ctx.plan != nullptr ? Describe(ctx) : what;
  char* to = static_cast<char*>(dst);
  const char* from = static_cast<const char*>(src);
  const bool to_device = mc.Find(to, bytes) != nullptr;
  if (mc.checks()) {
    Status st = Status::Ok();
    const gpu::Thunk* t = ctx.get();
    if (t != nullptr && t->kind() == gpu::ThunkKind::kCopy) {
      st = mc.CheckOperand(ctx, std::get<gpu::CopyThunk>(t->body).src, "src", pos);
    } else if (t != nullptr && t->kind() == gpu::ThunkKind::kAllReduce) {
      st = mc.CheckOperand(ctx, std::get<gpu::AllReduceThunk>(t->body).in, "in", pos);
    } else if (t != nullptr) {
      st = mc.CheckRead(from, bytes, pos, who);
    } else {
      st = mc.CheckHostRead(from, bytes, pos, who);
    }
    if (st.ok() && to_device) st = mc.Write(to, bytes, event, pos, who, /*stamp=*/false);
    if (!st.ok()) return Finding(d, ctx, who, st);
  }
  std::memmove(dst, src, bytes);
  s.now_us += CopyMicros(bytes);
  ++d.stats.copies;
  if (mc.checks() && to_device) {
    (void)mc.Write(to, bytes, event, pos, who);
    if (ctx.plan == nullptr) mc.HostProduced(to, bytes, event, /*any_buffer=*/false);
  }
  return FinishThunk(d, ctx);
}

cudaError_t SetOp(Stream& s, void* dst, int value, size_t bytes, std::string what) {
  State& d = *s.device;
  MemoryChecker& mc = *d.checker;
  const uint32_t event = EventFor(s, ThunkContext{}, what);
  const StreamPosition pos = Position(s);
  char* to = static_cast<char*>(dst);
  if (mc.checks()) {
    if (Status st = mc.Write(to, bytes, event, pos, what, /*stamp=*/false); !st.ok()) {
      return Finding(d, ThunkContext{}, what, st);
    }
  }
  std::memset(dst, value, bytes);
  s.now_us += CopyMicros(bytes);
  if (mc.checks()) {
    (void)mc.Write(to, bytes, event, pos, what);
    mc.HostProduced(to, bytes, event, /*any_buffer=*/false);
  }
  return cudaSuccess;
}

gpu::DriverApi EmuDriverApi(State& d) {
  gpu::DriverApi api;
  api.GetErrorName = gpu::BindApiFn<&CuGetErrorName>(&d);
  api.GetErrorString = gpu::BindApiFn<&CuGetErrorString>(&d);
  api.ModuleLoadDataEx = gpu::BindApiFn<&ModuleLoadDataEx>(&d);
  api.ModuleUnload = gpu::BindApiFn<&ModuleUnload>(&d);
  api.ModuleGetFunction = gpu::BindApiFn<&ModuleGetFunction>(&d);
  api.FuncSetAttribute = gpu::BindApiFn<&FuncSetAttribute>(&d);
  api.FuncGetAttribute = gpu::BindApiFn<&FuncGetAttribute>(&d);
  api.LaunchKernel = gpu::BindApiFn<&LaunchKernel>(&d);
  return api;
}

gpu::CublasLtApi EmuCublasLt(State& d) {
  d.gemm_executor = [&d](cudaStream_t stream, MatmulWork work) {
    return GemmExecutor(d, stream, std::move(work));
  };
  gpu::CublasLtApi api = EmulatedCublasLt(&d.gemm_executor);
  d.lt_status_string = api.GetStatusString;
  api.GetStatusString = gpu::BindApiFn<&GemmStatusString>(&d);
  return api;
}

std::unique_ptr<gpu::Communicator> MakeEmuCommunicator(State& d, rt::Communicator* host) {
  return std::make_unique<EmuCommunicator>(d, host);
}

}  // namespace gptc::rt::emu
