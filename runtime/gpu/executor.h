// The executor of one entry's thunk plan on a CUDA stream.
//
// Create translates every thunk once into a ready call over the entry's
// arena (device pointers = arena + slice offset):
//   kernel      cuLaunchKernel, params = the args' pointers (Note [kernel ABI])
//   gemm        a GemmRunner (descriptors and algorithm chosen at load)
//   copy        cudaMemcpyAsync device to device
//   constant    cudaMemcpyAsync from a pool uploaded once at load (on
//               resources.stream): the
//               constant's slice is reused by other values once it is dead
//               (Note [liveness]), so it is rewritten at its place every run
//   all_reduce  the Communicator's all-reduce, reduce-scatter or
//               all-gather (the thunk's `collective`); without one (world
//               size 1) a copy when in and out differ, else nothing. With a
//               communicator of world size > 1 and a plan with buckets, Run
//               issues each bucket as one group on a communication stream
//               (Note [bucketed all-reduce]); RunThunk, RunChecked and
//               Profile issue each collective alone on the given stream.
//   unsupported refused: Create fails naming every such thunk
// Every call is capturable, so a run can be recorded into a CUDA graph and
// replayed. The executor writes no inputs: the caller fills the input slots
// (parameters, tokens, step, lr) before a run and reads the outputs after.
//
// Internal to runtime/gpu (CUDA headers).
#ifndef GPTC_RUNTIME_GPU_EXECUTOR_H_
#define GPTC_RUNTIME_GPU_EXECUTOR_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "runtime/gpu/autotune.h"
#include "runtime/gpu/backend.h"
#include "runtime/gpu/communicator.h"
#include "runtime/gpu/cublaslt_api.h"
#include "runtime/gpu/cuda_api.h"
#include "runtime/gpu/gemm.h"
#include "runtime/gpu/kernel_modules.h"
#include "runtime/gpu/plan_reader.h"
#include "runtime/gpu/profile.h"

namespace gptc::rt::gpu {

// What the executors of a device share.
struct ExecutorResources {
  // The CUDA it runs on (Note [CUDA backends]): its runtime, driver and
  // cuBLASLt are this backend's; null: the installed one.
  const Backend* backend = nullptr;
  // Where Create uploads the constant pool: the stream the executor will run
  // on (a copy on the legacy default stream would race a non-blocking one).
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt_handle = nullptr;  // made with the backend's cuBLASLt
  KernelModules* modules = nullptr;
  Communicator* communicator = nullptr;  // null: world size 1
  void* workspace = nullptr;             // cuBLASLt's, shared (one stream)
  size_t workspace_bytes = 0;
  // Chooses each gemm's algorithm, and whether it runs with its epilogue
  // (Note [autotune paths]); null: the heuristic's first answer.
  GemmAutotuner* autotuner = nullptr;
};

struct ExecutorOptions {
  // Tests of single kernels: accept `unsupported` thunks, which then fail when run.
  bool allow_unsupported = false;
};

class EntryExecutor {
 public:
  // `arena` holds plan.arena_size bytes of device memory and outlives the
  // executor. Errors name the thunk (Thunk::Describe) and the call.
  static StatusOr<std::unique_ptr<EntryExecutor>> Create(const ExecutorResources& resources,
                                                         EntryPlan plan, char* arena,
                                                         const ExecutorOptions& options = {});
  ~EntryExecutor();
  EntryExecutor(const EntryExecutor&) = delete;
  EntryExecutor& operator=(const EntryExecutor&) = delete;

  const EntryPlan& plan() const { return plan_; }
  char* arena() const { return arena_; }
  char* At(const ArenaSlice& s) const { return arena_ + s.offset; }

  // Enqueues every thunk in order (all-reduce buckets: Note [bucketed all-reduce]).
  Status Run(cudaStream_t stream);
  // Whether Run issues all-reduces in buckets on the communication stream.
  bool bucketed() const { return comm_stream_ != nullptr; }
  // Enqueues thunk `i` alone.
  Status RunThunk(size_t i, cudaStream_t stream);
  // Runs every thunk and synchronizes after each, so that an asynchronous
  // fault is reported with the thunk that caused it (slow; for debugging).
  Status RunChecked(cudaStream_t stream);

  // Records Run into a CUDA graph (replacing any previous one); nothing runs.
  Status Capture(cudaStream_t stream);
  bool has_graph() const { return graph_exec_ != nullptr; }
  // Replays the captured graph.
  Status Launch(cudaStream_t stream);

  // Runs every thunk between CUDA events, waits, and returns one timing per
  // thunk (in plan order).
  StatusOr<std::vector<ThunkTime>> Profile(cudaStream_t stream);

  // Note [epilogue fallback] (compiler/program/plan.h): when cuBLASLt's
  // heuristic finds no algorithm for a gemm's epilogue on this GPU, the gemm
  // runs without it (program::PlainGemm) and the fallback kernel its thunk
  // names runs too (it shows in --profile as a thunk of its own); so they
  // do when autotuning finds the pair faster (Note [autotune paths]);
  // otherwise the kernel is skipped. One line per gemm that fell back, for
  // the caller to print.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  struct KernelCall {
    CUfunction function = nullptr;
    unsigned grid[3] = {1, 1, 1};
    unsigned block[3] = {1, 1, 1};
    unsigned dynamic_smem = 0;
    std::vector<CUdeviceptr> args;  // the values
    std::vector<void*> params;      // pointers to `args` elements, for cuLaunchKernel
  };
  struct MemcpyCall {
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
  };
  struct AllReduceCall {
    const void* in = nullptr;
    void* out = nullptr;
    int64_t count = 0;  // program::AllReduceThunk's: NCCL's count
    ir::DType dtype = ir::DType::kF32;
    ReduceOp op = ReduceOp::kSum;
    program::CollectiveOp collective = program::CollectiveOp::kAllReduce;
  };
  struct NoOp {};
  struct Refused {};  // an unsupported thunk (ExecutorOptions::allow_unsupported)
  using Call = std::variant<KernelCall, std::unique_ptr<GemmRunner>, MemcpyCall, AllReduceCall,
                            NoOp, Refused>;

  EntryExecutor(const ExecutorResources& resources, EntryPlan plan, char* arena)
      : resources_(resources),
        backend_(resources.backend != nullptr ? *resources.backend : ActiveBackend()),
        cuda_(*backend_.runtime),
        plan_(std::move(plan)),
        arena_(arena) {}
  StatusOr<Call> Translate(const Thunk& thunk);
  // Its kernel and gemm cases: the kernel's function and launch; the gemm's
  // runner, or (Note [epilogue fallback]) the plain gemm beside its kernel.
  StatusOr<Call> TranslateKernel(const Thunk& t);
  StatusOr<Call> TranslateGemm(const Thunk& t);
  StatusOr<Call> TranslateCollective(const Thunk& t);
  // Enqueues collective `a` of thunk `i` on `stream` through the communicator.
  Status IssueCollective(const AllReduceCall& a, size_t i, cudaStream_t stream);
  // Note [epilogue fallback]: the fallback kernel gemm thunk `i` names, if any.
  std::optional<size_t> FallbackKernel(size_t i) const;
  // Gemm thunk `t` without its epilogue (no algorithm chosen yet).
  StatusOr<std::unique_ptr<GemmRunner>> PreparePlain(const Thunk& t);
  Status LaunchKernel(const KernelCall& k, const Thunk& t, cudaStream_t stream);
  // Note [autotune paths]: each gemm's algorithm and path, from the autotuner.
  Status TuneGemms();
  Status PrepareBuckets();
  // Tells the backend's observer (Note [CUDA backends]) that thunk `i` follows on `stream`.
  Status Observe(size_t i, cudaStream_t stream);
  Status IssueBucket(size_t b, cudaStream_t stream);
  void DestroyGraph();

  ExecutorResources resources_;
  const Backend& backend_;
  const RuntimeApi& cuda_;           // backend_'s
  const DriverApi* cu_ = nullptr;    // backend_'s, found in Create
  const CublasLtApi* lt_ = nullptr;  // backend_'s, found in Create
  EntryPlan plan_;
  char* arena_;
  std::vector<Call> calls_;            // parallel to plan_.thunks
  std::set<size_t> fallback_of_;       // fallback kernels whose gemm dropped its epilogue
  std::vector<std::string> warnings_;  // Note [epilogue fallback]
  ThunkObserver* observer_ = nullptr;
  void* constant_pool_ = nullptr;
  std::vector<std::string> constant_bytes_;  // the constant thunks' bytes, in thunk order
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
  std::vector<cudaEvent_t> events_;  // profiling: one before each thunk, one after the last

  // Note [bucketed all-reduce]
  // After thunk `issue_after` of bucket b, Run records ready_[b] on the
  // compute stream, makes comm_stream_ wait for it, enqueues the bucket's
  // collectives between Communicator::GroupStart/GroupEnd on comm_stream_ and
  // records done_[b] there; before thunk `wait_before` (or at the end of the
  // run) the compute stream waits for done_[b]. Every bucket is waited for
  // before Run returns, so comm_stream_ joins back to the compute stream and
  // the whole run stays capturable into one CUDA graph. The buffers a
  // collective touches (operand and result) stay reserved until
  // `wait_before` (Note [in-place all-reduce] in
  // compiler/analysis/buffer_assignment.h).
  cudaStream_t comm_stream_ = nullptr;      // null: no buckets
  std::vector<cudaEvent_t> ready_, done_;   // per bucket
  std::vector<int64_t> issues_bucket_;      // per thunk: the bucket issued after it, or -1
  std::vector<std::vector<size_t>> waits_;  // per thunk and the end: buckets to wait for
  std::vector<bool> in_bucket_;             // per thunk: a collective Run issues in a bucket
};

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_EXECUTOR_H_
