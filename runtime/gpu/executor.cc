#include "runtime/gpu/executor.h"

#include <fmt/ranges.h>

namespace gptc::rt::gpu {

namespace {

constexpr int64_t kPoolAlignment = 256;

int64_t AlignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

}  // namespace

StatusOr<std::unique_ptr<EntryExecutor>> EntryExecutor::Create(const ExecutorResources& resources,
                                                               EntryPlan plan, char* arena,
                                                               const ExecutorOptions& options) {
  std::vector<std::string> unsupported;
  for (const Thunk& t : plan.thunks) {
    if (t.kind() != ThunkKind::kUnsupported) continue;
    const auto& u = std::get<UnsupportedThunk>(t.body);
    unsupported.push_back(fmt::format("{}: {}: {}", t.Describe(), u.what, u.reason));
  }
  if (!unsupported.empty() && !options.allow_unsupported) {
    return Error(
        "entry {} is incomplete ({} thunk{} without a kernel; the artifact says "
        "complete:false): {}",
        plan.name(), unsupported.size(), unsupported.size() == 1 ? "" : "s",
        fmt::join(unsupported, "; "));
  }
  std::unique_ptr<EntryExecutor> e(new EntryExecutor(resources, std::move(plan), arena));
  ASSIGN_OR_RETURN(e->cu_, e->backend_.driver());
  ASSIGN_OR_RETURN(e->lt_, e->backend_.cublaslt());
  // Constants: one pool, uploaded now; each constant thunk copies from it.
  int64_t pool_bytes = 0;
  for (const Thunk& t : e->plan_.thunks) {
    if (t.kind() == ThunkKind::kConstant) {
      e->constant_bytes_.push_back(ConstantBytes(std::get<ConstantThunk>(t.body)));
      pool_bytes += AlignUp(static_cast<int64_t>(e->constant_bytes_.back().size()), kPoolAlignment);
    }
  }
  if (pool_bytes > 0) {
    RETURN_IF_ERROR(e->cuda_.Check(
        e->cuda_.Malloc(&e->constant_pool_, pool_bytes),
        fmt::format("entry {}: cudaMalloc({} bytes of constants)", e->plan_.name(), pool_bytes)));
  }
  int64_t pool_offset = 0;
  size_t constant = 0;
  for (const Thunk& t : e->plan_.thunks) {
    if (t.kind() == ThunkKind::kConstant) {
      const std::string& bytes = e->constant_bytes_[constant++];
      char* dst = static_cast<char*>(e->constant_pool_) + pool_offset;
      // On the executor's stream (the legacy default stream would race a
      // non-blocking one); the bytes live in constant_bytes_ as long as the
      // executor.
      RETURN_IF_ERROR(e->cuda_.Check(e->cuda_.MemcpyAsync(dst, bytes.data(), bytes.size(),
                                                          cudaMemcpyHostToDevice, resources.stream),
                                     t.Describe() + ": cudaMemcpyAsync (constant upload)"));
      MemcpyCall call{
          .dst = e->At(std::get<ConstantThunk>(t.body).dst), .src = dst, .bytes = bytes.size()};
      e->calls_.push_back(call);
      pool_offset += AlignUp(static_cast<int64_t>(bytes.size()), kPoolAlignment);
      continue;
    }
    ASSIGN_OR_RETURN(Call call, e->Translate(t));
    e->calls_.push_back(std::move(call));
  }
  // Note [autotune paths]: on the arena as the trainer filled it, before any input.
  if (resources.autotuner != nullptr) RETURN_IF_ERROR(e->TuneGemms());
  // Note [epilogue fallback]: a fallback kernel runs only for a gemm that
  // runs without its epilogue.
  for (size_t i = 0; i < e->calls_.size(); ++i) {
    const auto* k = std::get_if<KernelThunk>(&e->plan_.thunks[i].body);
    if (k != nullptr && k->fallback && !e->fallback_of_.contains(i)) e->calls_[i] = NoOp{};
  }
  RETURN_IF_ERROR(e->PrepareBuckets());
  // Note [CUDA backends]: the emulator's checks follow the plan.
  e->observer_ = e->backend_.observer;
  if (e->observer_ != nullptr) e->observer_->EntryCreated(e->plan_, e->arena_);
  return e;
}

Status EntryExecutor::Observe(size_t i, cudaStream_t stream) {
  if (observer_ == nullptr) return Status::Ok();
  const bool runs_work = !std::holds_alternative<NoOp>(calls_[i]);
  return cuda_.Check(observer_->BeforeThunk(plan_, static_cast<int64_t>(i), stream, runs_work),
                     plan_.thunks[i].Describe() + ": the emulator's thunk marker");
}

Status EntryExecutor::PrepareBuckets() {
  const Communicator* comm = resources_.communicator;
  if (comm == nullptr || comm->world_size() <= 1 || plan_.buckets.empty()) return Status::Ok();
  const size_t n = plan_.thunks.size();
  issues_bucket_.assign(n, -1);
  waits_.assign(n + 1, {});
  in_bucket_.assign(n, false);
  for (size_t b = 0; b < plan_.buckets.size(); ++b) {
    const AllReduceBucket& bucket = plan_.buckets[b];  // checked by ReadEntryPlan
    issues_bucket_[bucket.issue_after] = static_cast<int64_t>(b);
    waits_[bucket.wait_before].push_back(b);
    for (int64_t m : bucket.members) in_bucket_[m] = true;
  }
  const std::string what = fmt::format("entry {}: all-reduce buckets", plan_.name());
  RETURN_IF_ERROR(cuda_.Check(cuda_.StreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking),
                              what + ": cudaStreamCreateWithFlags"));
  for (auto* events : {&ready_, &done_}) {
    for (size_t b = 0; b < plan_.buckets.size(); ++b) {
      cudaEvent_t e = nullptr;
      RETURN_IF_ERROR(cuda_.Check(cuda_.EventCreateWithFlags(&e, cudaEventDisableTiming),
                                  what + ": cudaEventCreateWithFlags"));
      events->push_back(e);
    }
  }
  return Status::Ok();
}

Status EntryExecutor::IssueBucket(size_t b, cudaStream_t stream) {
  const AllReduceBucket& bucket = plan_.buckets[b];
  const std::string what = fmt::format(
      "entry {}: {} bucket {} ({} members, {} bytes)", plan_.name(),
      program::CollectiveOpName(std::get<AllReduceCall>(calls_[bucket.members[0]]).collective), b,
      bucket.members.size(), bucket.bytes);
  RETURN_IF_ERROR(cuda_.Check(cuda_.EventRecord(ready_[b], stream), what + ": cudaEventRecord"));
  RETURN_IF_ERROR(cuda_.Check(cuda_.StreamWaitEvent(comm_stream_, ready_[b], 0),
                              what + ": cudaStreamWaitEvent"));
  Communicator& comm = *resources_.communicator;
  RETURN_IF_ERROR(comm.GroupStart().WithPrefix(what));
  Status issued = Status::Ok();
  for (int64_t m : bucket.members) {
    issued = Observe(static_cast<size_t>(m), comm_stream_);
    if (!issued.ok()) break;
    issued = IssueCollective(std::get<AllReduceCall>(calls_[m]), m, comm_stream_);
    if (!issued.ok()) break;
  }
  Status ended = comm.GroupEnd();  // always close the group
  RETURN_IF_ERROR(issued.WithPrefix(what));
  RETURN_IF_ERROR(ended.WithPrefix(what));
  return cuda_.Check(cuda_.EventRecord(done_[b], comm_stream_), what + ": cudaEventRecord");
}

Status EntryExecutor::IssueCollective(const AllReduceCall& a, size_t i, cudaStream_t stream) {
  Communicator& comm = *resources_.communicator;
  Status s = Status::Ok();
  switch (a.collective) {
    case program::CollectiveOp::kAllReduce:
      s = comm.AllReduce(a.in, a.out, a.count, a.dtype, a.op, stream);
      break;
    case program::CollectiveOp::kReduceScatter:
      s = comm.ReduceScatter(a.in, a.out, a.count, a.dtype, a.op, stream);
      break;
    case program::CollectiveOp::kAllGather:
      s = comm.AllGather(a.in, a.out, a.count, a.dtype, stream);
      break;
  }
  return s.WithPrefix(plan_.thunks[i].Describe());
}

// A collective over the communicator's ranks, whose slices must hold `count`
// x the world size on the sharded side; alone (world size 1) every one is
// the identity: a copy when in and out differ, else nothing.
StatusOr<EntryExecutor::Call> EntryExecutor::TranslateCollective(const Thunk& t) {
  const auto& a = std::get<AllReduceThunk>(t.body);
  const Communicator* comm = resources_.communicator;
  const int64_t world = comm != nullptr ? comm->world_size() : 1;
  const int64_t bytes = a.count * ir::DTypeBytes(a.dtype);
  const ArenaSlice* whole = a.collective == program::CollectiveOp::kReduceScatter ? &a.in
                            : a.collective == program::CollectiveOp::kAllGather   ? &a.out
                                                                                  : nullptr;
  if (whole != nullptr && whole->size != bytes * world) {
    return Error("{}: its {} slice holds {} bytes, not {} elements x {} rank{} of {}", t.Describe(),
                 whole == &a.in ? "in" : "out", whole->size, a.count, world, world == 1 ? "" : "s",
                 ir::DTypeName(a.dtype));
  }
  AllReduceCall call{.in = At(a.in),
                     .out = At(a.out),
                     .count = a.count,
                     .dtype = a.dtype,
                     .op = a.reduce == ir::ReduceKind::kMax ? ReduceOp::kMax : ReduceOp::kSum,
                     .collective = a.collective};
  if (world > 1) return Call(call);
  if (a.in.offset == a.out.offset) return Call(NoOp{});
  return Call(MemcpyCall{.dst = At(a.out), .src = At(a.in), .bytes = static_cast<size_t>(bytes)});
}

StatusOr<EntryExecutor::Call> EntryExecutor::TranslateKernel(const Thunk& t) {
  const auto& k = std::get<KernelThunk>(t.body);
  KernelCall call;
  StatusOr<CUfunction> f = resources_.modules->Find(plan_.name(), t.name);
  if (!f.ok()) return f.status().WithPrefix(t.Describe());
  call.function = *f;
  const int64_t params = resources_.modules->ParamCount(plan_.name(), t.name);
  if (params >= 0 && params != static_cast<int64_t>(k.args.size())) {
    return Error("{}: the plan passes {} pointers, the PTX entry takes {} parameters", t.Describe(),
                 k.args.size(), params);
  }
  for (int i = 0; i < 3; ++i) {
    call.grid[i] = static_cast<unsigned>(k.grid[i]);
    call.block[i] = static_cast<unsigned>(k.block[i]);
  }
  call.dynamic_smem = static_cast<unsigned>(k.dynamic_smem);
  RETURN_IF_ERROR(resources_.modules->PrepareLaunch(
      call.function, k.block[0] * k.block[1] * k.block[2], k.dynamic_smem, t.Describe()));
  for (const ArenaSlice& s : k.args) {
    call.args.push_back(reinterpret_cast<CUdeviceptr>(At(s)));
  }
  // `args` is complete: its elements no longer move (a moved vector keeps its buffer).
  for (CUdeviceptr& a : call.args) call.params.push_back(&a);
  return Call(std::move(call));
}

StatusOr<EntryExecutor::Call> EntryExecutor::TranslateGemm(const Thunk& t) {
  const auto& g = std::get<GemmThunk>(t.body);
  GemmPointers p{.a = At(g.a),
                 .b = At(g.b),
                 .c = At(g.c),
                 .d = At(g.d),
                 .bias = g.bias ? At(*g.bias) : nullptr,
                 .aux = g.aux ? At(*g.aux) : nullptr,
                 .workspace = resources_.workspace,
                 .workspace_bytes = resources_.workspace_bytes};
  if (g.config.workspace_bytes > static_cast<int64_t>(resources_.workspace_bytes)) {
    return Error("{}: wants a {} byte workspace, the runtime has {}", t.Describe(),
                 g.config.workspace_bytes, resources_.workspace_bytes);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<GemmRunner> runner,
                   GemmRunner::Prepare(*lt_, g.config, p, t.Describe()));
  // Tuning chooses the algorithm later (TuneGemms).
  const bool tuned = resources_.autotuner != nullptr;
  Status selected = tuned ? runner->Candidates(resources_.lt_handle, 1).status()
                          : runner->SelectAlgorithm(resources_.lt_handle);
  if (selected.ok()) return Call(std::move(runner));
  // Note [epilogue fallback]: the gemm without its epilogue, and the
  // kernel next to it (its fallback) does the epilogue's work.
  const std::optional<size_t> kernel = FallbackKernel(static_cast<size_t>(t.index));
  if (!runner->refused() || !kernel) return selected;
  ASSIGN_OR_RETURN(runner, PreparePlain(t));
  if (!tuned) RETURN_IF_ERROR(runner->SelectAlgorithm(resources_.lt_handle));
  fallback_of_.insert(*kernel);
  warnings_.push_back(fmt::format(
      "{}: cuBLASLt has no algorithm for {} here [{}]; it runs without the epilogue, and "
      "kernel {} {}",
      t.Describe(), program::GemmEpilogueName(g.config.epilogue), g.config.Summary(),
      plan_.thunks[*kernel].name,
      *kernel < static_cast<size_t>(t.index) ? "computes the bias gradient" : "applies it"));
  return Call(std::move(runner));
}

StatusOr<EntryExecutor::Call> EntryExecutor::Translate(const Thunk& t) {
  switch (t.kind()) {
    case ThunkKind::kKernel:
      return TranslateKernel(t);
    case ThunkKind::kGemm:
      return TranslateGemm(t);
    case ThunkKind::kCopy: {
      const auto& c = std::get<CopyThunk>(t.body);
      if (c.src == c.dst || c.bytes == 0) return Call(NoOp{});
      return Call(
          MemcpyCall{.dst = At(c.dst), .src = At(c.src), .bytes = static_cast<size_t>(c.bytes)});
    }
    case ThunkKind::kAllReduce:
      return TranslateCollective(t);
    case ThunkKind::kUnsupported:
      return Call(Refused{});
    case ThunkKind::kConstant:  // handled in Create (the pool)
      break;
  }
  return Error("{}: cannot be executed", t.Describe());
}

std::optional<size_t> EntryExecutor::FallbackKernel(size_t i) const {
  const auto& g = std::get<GemmThunk>(plan_.thunks[i].body);
  if (!g.fallback_kernel) return std::nullopt;
  return static_cast<size_t>(*g.fallback_kernel);
}

StatusOr<std::unique_ptr<GemmRunner>> EntryExecutor::PreparePlain(const Thunk& t) {
  const GemmThunk plain = program::PlainGemm(std::get<GemmThunk>(t.body));
  GemmPointers p{.a = At(plain.a),
                 .b = At(plain.b),
                 .c = At(plain.c),
                 .d = At(plain.d),
                 .workspace = resources_.workspace,
                 .workspace_bytes = resources_.workspace_bytes};
  return GemmRunner::Prepare(*lt_, plain.config, p,
                             t.Describe() + " (plain, the epilogue's fallback)");
}

Status EntryExecutor::LaunchKernel(const KernelCall& k, const Thunk& t, cudaStream_t stream) {
  CUresult r = cu_->LaunchKernel(k.function, k.grid[0], k.grid[1], k.grid[2], k.block[0],
                                 k.block[1], k.block[2], k.dynamic_smem, stream,
                                 const_cast<void**>(k.params.data()), nullptr);
  if (r == CUDA_SUCCESS) return Status::Ok();
  return Error("{}: cuLaunchKernel(grid {}x{}x{}, block {}x{}x{}, {} bytes dynamic smem): {}",
               t.Describe(), k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2],
               k.dynamic_smem, cu_->ErrorText(r));
}

Status EntryExecutor::TuneGemms() {
  GemmAutotuner& tuner = *resources_.autotuner;
  for (size_t i = 0; i < calls_.size(); ++i) {
    auto* runner = std::get_if<std::unique_ptr<GemmRunner>>(&calls_[i]);
    if (runner == nullptr) continue;
    const Thunk& t = plan_.thunks[i];
    const auto& g = std::get<GemmThunk>(t.body);
    const std::optional<size_t> kernel = FallbackKernel(i);
    const bool dropped = kernel && fallback_of_.contains(*kernel);  // cuBLASLt refused
    std::unique_ptr<GemmRunner> plain;
    if (dropped) {
      plain = std::move(*runner);
    } else if (kernel) {
      ASSIGN_OR_RETURN(plain, PreparePlain(t));
    }
    GemmCandidates c{
        .key = TuningKey(g.config, kernel.has_value()),
        .thunk = fmt::format("{}/{}", plan_.name(), t.name),
        .flops = 2.0 * static_cast<double>(g.config.m) * static_cast<double>(g.config.n) *
                 static_cast<double>(g.config.k) * static_cast<double>(g.config.batch_count),
        .epilogue = dropped ? nullptr : runner->get(),
        .plain = plain.get(),
    };
    if (kernel) {
      const auto& k = std::get<KernelCall>(calls_[*kernel]);
      const Thunk& kt = plan_.thunks[*kernel];
      c.kernel = [this, &k, &kt](cudaStream_t s) { return LaunchKernel(k, kt, s); };
    }
    ASSIGN_OR_RETURN(TunedPath path, tuner.Tune(c, resources_.lt_handle, resources_.stream));
    if (path == TunedPath::kFallback) {
      calls_[i] = std::move(plain);
      fallback_of_.insert(*kernel);
    } else if (kernel) {
      fallback_of_.erase(*kernel);
    }
  }
  return Status::Ok();
}

EntryExecutor::~EntryExecutor() {
  if (observer_ != nullptr) observer_->EntryDestroyed(plan_);
  DestroyGraph();
  for (cudaEvent_t e : ready_) cuda_.EventDestroy(e);
  for (cudaEvent_t e : done_) cuda_.EventDestroy(e);
  if (comm_stream_ != nullptr) cuda_.StreamDestroy(comm_stream_);
  for (cudaEvent_t e : events_) cuda_.EventDestroy(e);
  if (constant_pool_ != nullptr) cuda_.Free(constant_pool_);
}

void EntryExecutor::DestroyGraph() {
  if (graph_exec_ != nullptr) cuda_.GraphExecDestroy(graph_exec_);
  if (graph_ != nullptr) cuda_.GraphDestroy(graph_);
  graph_exec_ = nullptr;
  graph_ = nullptr;
}

Status EntryExecutor::RunThunk(size_t i, cudaStream_t stream) {
  if (i >= calls_.size()) return Error("entry {}: no thunk {}", plan_.name(), i);
  RETURN_IF_ERROR(Observe(i, stream));
  Call& call = calls_[i];
  if (auto* k = std::get_if<KernelCall>(&call)) return LaunchKernel(*k, plan_.thunks[i], stream);
  if (auto* g = std::get_if<std::unique_ptr<GemmRunner>>(&call)) return (*g)->Run(stream);
  if (auto* m = std::get_if<MemcpyCall>(&call)) {
    return cuda_.Check(
        cuda_.MemcpyAsync(m->dst, m->src, m->bytes, cudaMemcpyDeviceToDevice, stream),
        fmt::format("{}: cudaMemcpyAsync({} bytes, device to device)", plan_.thunks[i].Describe(),
                    m->bytes));
  }
  if (auto* a = std::get_if<AllReduceCall>(&call)) return IssueCollective(*a, i, stream);
  if (std::holds_alternative<Refused>(call)) {
    const auto& u = std::get<UnsupportedThunk>(plan_.thunks[i].body);
    return Error("{}: has no kernel ({}: {})", plan_.thunks[i].Describe(), u.what, u.reason);
  }
  return Status::Ok();  // NoOp
}

Status EntryExecutor::Run(cudaStream_t stream) {
  if (!bucketed()) {
    for (size_t i = 0; i < calls_.size(); ++i) RETURN_IF_ERROR(RunThunk(i, stream));
    return Status::Ok();
  }
  // Note [bucketed all-reduce]
  auto wait = [&](size_t i) -> Status {
    for (size_t b : waits_[i]) {
      RETURN_IF_ERROR(cuda_.Check(
          cuda_.StreamWaitEvent(stream, done_[b], 0),
          fmt::format("entry {}: all-reduce bucket {}: cudaStreamWaitEvent", plan_.name(), b)));
    }
    return Status::Ok();
  };
  for (size_t i = 0; i < calls_.size(); ++i) {
    RETURN_IF_ERROR(wait(i));
    if (!in_bucket_[i]) RETURN_IF_ERROR(RunThunk(i, stream));
    if (issues_bucket_[i] >= 0) RETURN_IF_ERROR(IssueBucket(issues_bucket_[i], stream));
  }
  return wait(calls_.size());
}

Status EntryExecutor::RunChecked(cudaStream_t stream) {
  for (size_t i = 0; i < calls_.size(); ++i) {
    RETURN_IF_ERROR(RunThunk(i, stream));
    RETURN_IF_ERROR(cuda_.Check(cuda_.StreamSynchronize(stream),
                                plan_.thunks[i].Describe() + ": cudaStreamSynchronize after it"));
  }
  return Status::Ok();
}

Status EntryExecutor::Capture(cudaStream_t stream) {
  DestroyGraph();
  const std::string what = fmt::format("entry {}: CUDA graph capture", plan_.name());
  RETURN_IF_ERROR(cuda_.Check(cuda_.StreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                              what + ": cudaStreamBeginCapture"));
  Status run = Run(stream);
  cudaGraph_t graph = nullptr;
  cudaError_t end = cuda_.StreamEndCapture(stream, &graph);
  if (!run.ok()) {
    if (graph != nullptr) cuda_.GraphDestroy(graph);
    return run.WithPrefix(what);
  }
  RETURN_IF_ERROR(cuda_.Check(end, what + ": cudaStreamEndCapture"));
  graph_ = graph;
  Status s =
      cuda_.Check(cuda_.GraphInstantiate(&graph_exec_, graph_, 0), what + ": cudaGraphInstantiate");
  if (!s.ok()) {
    graph_exec_ = nullptr;
    DestroyGraph();
  }
  return s;
}

Status EntryExecutor::Launch(cudaStream_t stream) {
  if (graph_exec_ == nullptr) return Error("entry {}: no captured graph to launch", plan_.name());
  return cuda_.Check(cuda_.GraphLaunch(graph_exec_, stream),
                     fmt::format("entry {}: cudaGraphLaunch", plan_.name()));
}

StatusOr<std::vector<ThunkTime>> EntryExecutor::Profile(cudaStream_t stream) {
  while (events_.size() < calls_.size() + 1) {
    cudaEvent_t e = nullptr;
    RETURN_IF_ERROR(cuda_.Check(cuda_.EventCreate(&e), "cudaEventCreate (profiling)"));
    events_.push_back(e);
  }
  for (size_t i = 0; i < calls_.size(); ++i) {
    RETURN_IF_ERROR(cuda_.Check(cuda_.EventRecord(events_[i], stream), "cudaEventRecord"));
    RETURN_IF_ERROR(RunThunk(i, stream));
  }
  RETURN_IF_ERROR(
      cuda_.Check(cuda_.EventRecord(events_[calls_.size()], stream), "cudaEventRecord"));
  RETURN_IF_ERROR(
      cuda_.Check(cuda_.EventSynchronize(events_[calls_.size()]),
                  fmt::format("entry {}: cudaEventSynchronize (profiled run)", plan_.name())));
  std::vector<ThunkTime> times;
  for (size_t i = 0; i < calls_.size(); ++i) {
    float ms = 0;
    RETURN_IF_ERROR(cuda_.Check(cuda_.EventElapsedTime(&ms, events_[i], events_[i + 1]),
                                plan_.thunks[i].Describe() + ": cudaEventElapsedTime"));
    const Thunk& t = plan_.thunks[i];
    times.push_back(
        {std::string(ThunkKindName(t.kind())), t.name, t.meta, ms, std::string(plan_.name())});
  }
  return times;
}

}  // namespace gptc::rt::gpu
