// NcclCommunicator: the Communicator of a multi-GPU data-parallel run, over
// NCCL. libnccl is never linked: it is dlopen'ed on first use from a search
// list (NcclCandidates), so binaries still start on machines without it, as
// with cuBLASLt (cublaslt_api.h). The NCCL ABI this file needs (the handful
// of functions, ncclUniqueId, the result/dtype/op enums) is declared here,
// so nccl.h is not needed to build; tests check it against nccl.h where one
// is installed.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Rendezvous> rdv, Rendezvous::Join(opts));
//   gpu_options.device = env.local_rank;
//   ASSIGN_OR_RETURN(auto comm, gpu::CreateNcclCommunicator(*rdv, rank, world,
//                                                           gpu_options.device));
//   gpu_options.communicator = comm.get();  // outlives the GpuTrainer
//
// On a failure after the communicator exists, call Abort() (every rank
// blocked in a collective otherwise waits forever) and Rendezvous::Abort.
//
// CUDA-free header (streams are void*).
#ifndef GPTC_RUNTIME_GPU_NCCL_COMMUNICATOR_H_
#define GPTC_RUNTIME_GPU_NCCL_COMMUNICATOR_H_

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "runtime/gpu/communicator.h"
#include "runtime/rendezvous.h"

namespace gptc::rt::gpu {

// The NCCL ABI (nccl.h, stable since NCCL 2.0; bf16 from 2.10).
namespace nccl {
using Result = int;    // ncclResult_t: 0 is ncclSuccess
using DataType = int;  // ncclDataType_t
using RedOp = int;     // ncclRedOp_t
using Comm = struct ncclComm*;
inline constexpr Result kSuccess = 0;
inline constexpr Result kInProgress = 7;
inline constexpr DataType kFloat16 = 6;
inline constexpr DataType kFloat32 = 7;
inline constexpr DataType kBfloat16 = 9;
inline constexpr RedOp kSum = 0;
inline constexpr RedOp kMax = 2;
inline constexpr size_t kUniqueIdBytes = 128;
struct UniqueId {
  char internal[kUniqueIdBytes];
};
}  // namespace nccl

// Entry points of a loaded libnccl.
struct NcclApi {
  std::string path;  // the library that was loaded
  nccl::Result (*GetUniqueId)(nccl::UniqueId*) = nullptr;
  nccl::Result (*CommInitRank)(nccl::Comm*, int, nccl::UniqueId, int) = nullptr;
  nccl::Result (*AllReduce)(const void*, void*, size_t, nccl::DataType, nccl::RedOp, nccl::Comm,
                            void* /*cudaStream_t*/) = nullptr;
  nccl::Result (*ReduceScatter)(const void*, void*, size_t, nccl::DataType, nccl::RedOp, nccl::Comm,
                                void* /*cudaStream_t*/) = nullptr;
  nccl::Result (*AllGather)(const void*, void*, size_t, nccl::DataType, nccl::Comm,
                            void* /*cudaStream_t*/) = nullptr;
  nccl::Result (*GroupStart)() = nullptr;
  nccl::Result (*GroupEnd)() = nullptr;
  nccl::Result (*CommDestroy)(nccl::Comm) = nullptr;
  nccl::Result (*CommAbort)(nccl::Comm) = nullptr;
  const char* (*GetErrorString)(nccl::Result) = nullptr;
  nccl::Result (*CommGetAsyncError)(nccl::Comm, nccl::Result*) = nullptr;

  // "ncclAllReduce: unhandled system error (run with NCCL_DEBUG=WARN for details)".
  std::string ErrorText(nccl::Result r) const;
};

// Where libnccl.so.2 is looked for, in order: $GPTC_NCCL, the loader's
// search path, /usr/local/cuda/lib64, then pip's nvidia-nccl-cu* under the
// site-packages of /usr/lib, /usr/local/lib, /opt/*/lib, ~/.local/lib,
// $VIRTUAL_ENV and $CONDA_PREFIX (only those that exist, except the first three).
std::vector<std::string> NcclCandidates();
// The first candidate that loads with every entry point. Error: one line
// listing every path tried, or naming the missing symbol.
StatusOr<NcclApi> LoadNccl(const std::vector<std::string>& candidates);
// LoadNccl(NcclCandidates()), once per process.
StatusOr<const NcclApi*> GetNccl();

// The NCCL enums of a dtype and reduction (f32, bf16, f16; sum, max). The
// error names the dtype or op.
StatusOr<nccl::DataType> NcclDataType(ir::DType dtype);
StatusOr<nccl::RedOp> NcclRedOp(ReduceOp op);

// The unique id of a communicator, as the rendezvous carries it.
using NcclUniqueIdBytes = std::array<std::byte, nccl::kUniqueIdBytes>;

class NcclCommunicator : public Communicator {
 public:
  // ncclCommInitRank on the current CUDA device (blocks until every rank has
  // called it with the same id).
  static StatusOr<std::unique_ptr<NcclCommunicator>> Create(const NcclApi& api, int rank, int world,
                                                            const NcclUniqueIdBytes& id);
  // ncclCommDestroy (unless aborted).
  ~NcclCommunicator() override;

  int world_size() const override { return world_; }
  int rank() const override { return rank_; }
  Status AllReduce(const void* in, void* out, int64_t count, ir::DType dtype, ReduceOp op,
                   void* stream) override;
  Status ReduceScatter(const void* in, void* out, int64_t recv_count, ir::DType dtype, ReduceOp op,
                       void* stream) override;
  Status AllGather(const void* in, void* out, int64_t send_count, ir::DType dtype,
                   void* stream) override;
  Status GroupStart() override;
  Status GroupEnd() override;
  // ncclCommAbort: ends every pending collective of this rank, for failure paths.
  void Abort() override;
  // ncclCommGetAsyncError: an error raised while collectives ran (e.g. a peer died).
  Status AsyncError() const;

 private:
  NcclCommunicator(const NcclApi& api, nccl::Comm comm, int rank, int world)
      : api_(api), comm_(comm), rank_(rank), world_(world) {}
  Status Check(nccl::Result r, std::string_view call) const;

  const NcclApi& api_;
  nccl::Comm comm_;
  int rank_, world_;
};

// Rank 0 makes the unique id (ncclGetUniqueId) and broadcasts it over the
// rendezvous; every rank returns it.
StatusOr<NcclUniqueIdBytes> ShareNcclUniqueId(Rendezvous& rendezvous, const NcclApi& api);
// Selects `cuda_device` (cudaSetDevice: the same ordinal as
// GpuOptions::device, usually the local rank) and creates this rank's
// communicator there (blocks until every rank has called it).
StatusOr<std::unique_ptr<NcclCommunicator>> InitNcclCommunicator(const NcclApi& api,
                                                                 const NcclUniqueIdBytes& id,
                                                                 int rank, int world,
                                                                 int cuda_device);
// ShareNcclUniqueId, InitNcclCommunicator, then a barrier. `rank`/`world`
// must match the rendezvous'. Errors name the rank and the step (aborting the
// rendezvous is the caller's choice). gptrun calls the two steps itself, so
// that its watchdog holds the connections while NCCL init waits.
StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclCommunicator(Rendezvous& rendezvous, int rank,
                                                                   int world, int cuda_device);

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_NCCL_COMMUNICATOR_H_
