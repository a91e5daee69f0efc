#include "runtime/gpu/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fmt/ranges.h>

#include <cstring>

#include "runtime/gpu/backend.h"
#include "runtime/gpu/dynamic_library.h"

namespace gptc::rt::gpu {

namespace {

constexpr char kLibrary[] = "libnccl.so.2";

}  // namespace

std::string NcclApi::ErrorText(nccl::Result r) const {
  const char* text = GetErrorString != nullptr ? GetErrorString(r) : nullptr;
  return fmt::format("{} (ncclResult {}; NCCL_DEBUG=WARN prints more)",
                     text != nullptr ? text : "no description", r);
}

std::vector<std::string> NcclCandidates() {
  return LibraryCandidates("GPTC_NCCL", kLibrary, {"nvidia/nccl/lib"});
}

StatusOr<NcclApi> LoadNccl(const std::vector<std::string>& candidates) {
  NcclApi api;
  std::vector<std::string> tried;
  void* handle = OpenFirst(candidates, &api.path, &tried);
  if (handle == nullptr) {
    return Error(
        "NCCL not found: {} could not be loaded from {} (install pip's nvidia-nccl-cu13 or "
        "the NCCL package, or set GPTC_NCCL=/path/to/{})",
        kLibrary, fmt::join(tried, ", "), kLibrary);
  }
  SymbolBinder bind(handle);
  bind("ncclGetUniqueId", &api.GetUniqueId);
  bind("ncclCommInitRank", &api.CommInitRank);
  bind("ncclAllReduce", &api.AllReduce);
  bind("ncclReduceScatter", &api.ReduceScatter);
  bind("ncclAllGather", &api.AllGather);
  bind("ncclGroupStart", &api.GroupStart);
  bind("ncclGroupEnd", &api.GroupEnd);
  bind("ncclCommDestroy", &api.CommDestroy);
  bind("ncclCommAbort", &api.CommAbort);
  bind("ncclGetErrorString", &api.GetErrorString);
  bind("ncclCommGetAsyncError", &api.CommGetAsyncError);
  if (bind.missing() != nullptr) {
    dlclose(handle);
    return Error("{} has no symbol {} (expected NCCL 2.10 or later)", api.path, bind.missing());
  }
  return api;  // the handle stays open for the process
}

StatusOr<const NcclApi*> GetNccl() {
  static const StatusOr<NcclApi>* api = new StatusOr<NcclApi>(LoadNccl(NcclCandidates()));
  if (!api->ok()) return api->status();
  return &api->value();
}

StatusOr<nccl::DataType> NcclDataType(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF32:
      return nccl::kFloat32;
    case ir::DType::kBF16:
      return nccl::kBfloat16;
    case ir::DType::kF16:
      return nccl::kFloat16;
    default:
      break;
  }
  return Error("NCCL collective: dtype {} is not supported (f32, bf16, f16 are)",
               ir::DTypeName(dtype));
}

StatusOr<nccl::RedOp> NcclRedOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return nccl::kSum;
    case ReduceOp::kMax:
      return nccl::kMax;
  }
  return Error("NCCL collective: reduction {} is not supported", static_cast<int>(op));
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(const NcclApi& api, int rank,
                                                                     int world,
                                                                     const NcclUniqueIdBytes& id) {
  if (world < 1 || rank < 0 || rank >= world) {
    return Error("NCCL communicator: rank {} is not in a world of {}", rank, world);
  }
  nccl::UniqueId uid;
  std::memcpy(uid.internal, id.data(), id.size());
  nccl::Comm comm = nullptr;
  if (nccl::Result r = api.CommInitRank(&comm, world, uid, rank); r != nccl::kSuccess) {
    return Error("rank {} of {}: ncclCommInitRank ({}): {}", rank, world, api.path,
                 api.ErrorText(r));
  }
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(api, comm, rank, world));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) api_.CommDestroy(comm_);
}

Status NcclCommunicator::Check(nccl::Result r, std::string_view call) const {
  if (r == nccl::kSuccess) return Status::Ok();
  return Error("rank {} of {}: {}: {}", rank_, world_, call, api_.ErrorText(r));
}

Status NcclCommunicator::AllReduce(const void* in, void* out, int64_t count, ir::DType dtype,
                                   ReduceOp op, void* stream) {
  if (comm_ == nullptr) return Error("rank {} of {}: ncclAllReduce after Abort", rank_, world_);
  ASSIGN_OR_RETURN(nccl::DataType type, NcclDataType(dtype));
  ASSIGN_OR_RETURN(nccl::RedOp red, NcclRedOp(op));
  return Check(api_.AllReduce(in, out, static_cast<size_t>(count), type, red, comm_, stream),
               fmt::format("ncclAllReduce({} {} elements)", count, ir::DTypeName(dtype)));
}

Status NcclCommunicator::ReduceScatter(const void* in, void* out, int64_t recv_count,
                                       ir::DType dtype, ReduceOp op, void* stream) {
  if (comm_ == nullptr) return Error("rank {} of {}: ncclReduceScatter after Abort", rank_, world_);
  ASSIGN_OR_RETURN(nccl::DataType type, NcclDataType(dtype));
  ASSIGN_OR_RETURN(nccl::RedOp red, NcclRedOp(op));
  return Check(
      api_.ReduceScatter(in, out, static_cast<size_t>(recv_count), type, red, comm_, stream),
      fmt::format("ncclReduceScatter({} {} elements a rank)", recv_count, ir::DTypeName(dtype)));
}

Status NcclCommunicator::AllGather(const void* in, void* out, int64_t send_count, ir::DType dtype,
                                   void* stream) {
  if (comm_ == nullptr) return Error("rank {} of {}: ncclAllGather after Abort", rank_, world_);
  ASSIGN_OR_RETURN(nccl::DataType type, NcclDataType(dtype));
  return Check(
      api_.AllGather(in, out, static_cast<size_t>(send_count), type, comm_, stream),
      fmt::format("ncclAllGather({} {} elements a rank)", send_count, ir::DTypeName(dtype)));
}

Status NcclCommunicator::GroupStart() { return Check(api_.GroupStart(), "ncclGroupStart"); }
Status NcclCommunicator::GroupEnd() { return Check(api_.GroupEnd(), "ncclGroupEnd"); }

void NcclCommunicator::Abort() {
  if (comm_ == nullptr) return;
  api_.CommAbort(comm_);
  comm_ = nullptr;
}

Status NcclCommunicator::AsyncError() const {
  if (comm_ == nullptr)
    return Error("rank {} of {}: the NCCL communicator was aborted", rank_, world_);
  nccl::Result async = nccl::kSuccess;
  RETURN_IF_ERROR(Check(api_.CommGetAsyncError(comm_, &async), "ncclCommGetAsyncError"));
  if (async == nccl::kInProgress) return Status::Ok();
  return Check(async, "NCCL (asynchronous error)");
}

StatusOr<NcclUniqueIdBytes> ShareNcclUniqueId(Rendezvous& rendezvous, const NcclApi& api) {
  const int64_t rank = rendezvous.rank();
  NcclUniqueIdBytes id{};
  if (rank == 0) {
    nccl::UniqueId uid;
    if (nccl::Result r = api.GetUniqueId(&uid); r != nccl::kSuccess) {
      return Error("rank 0 of {}: ncclGetUniqueId ({}): {}", rendezvous.world_size(), api.path,
                   api.ErrorText(r));
    }
    std::memcpy(id.data(), uid.internal, id.size());
  }
  StatusOr<std::vector<std::byte>> blob = rendezvous.Broadcast(
      rank == 0 ? std::span<const std::byte>(id) : std::span<const std::byte>());
  if (!blob.ok())
    return blob.status().WithPrefix(fmt::format("rank {}: NCCL unique id broadcast", rank));
  if (blob->size() != id.size()) {
    return Error("rank {}: the NCCL unique id from rank 0 has {} bytes, not {}", rank, blob->size(),
                 id.size());
  }
  std::memcpy(id.data(), blob->data(), id.size());
  return id;
}

StatusOr<std::unique_ptr<NcclCommunicator>> InitNcclCommunicator(const NcclApi& api,
                                                                 const NcclUniqueIdBytes& id,
                                                                 int rank, int world,
                                                                 int cuda_device) {
  if (cudaError_t e = Cuda().SetDevice(cuda_device); e != cudaSuccess) {
    return Error("rank {}: cudaSetDevice({}) before ncclCommInitRank: {} ({})", rank, cuda_device,
                 cudaGetErrorName(e), cudaGetErrorString(e));
  }
  return NcclCommunicator::Create(api, rank, world, id);
}

StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclCommunicator(Rendezvous& rendezvous, int rank,
                                                                   int world, int cuda_device) {
  if (rendezvous.rank() != rank || rendezvous.world_size() != world) {
    return Error("NCCL communicator: rank {} of {} disagrees with the rendezvous' rank {} of {}",
                 rank, world, rendezvous.rank(), rendezvous.world_size());
  }
  ASSIGN_OR_RETURN(const NcclApi* api, GetNccl());
  ASSIGN_OR_RETURN(NcclUniqueIdBytes id, ShareNcclUniqueId(rendezvous, *api));
  ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm,
                   InitNcclCommunicator(*api, id, rank, world, cuda_device));
  Status barrier = rendezvous.Barrier();
  if (!barrier.ok()) {
    comm->Abort();
    return barrier.WithPrefix(fmt::format("rank {}: barrier after ncclCommInitRank", rank));
  }
  return comm;
}

}  // namespace gptc::rt::gpu
