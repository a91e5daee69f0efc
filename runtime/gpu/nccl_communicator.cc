#include "runtime/gpu/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fmt/ranges.h>
#include <glob.h>

#include <cstdlib>
#include <cstring>

namespace gptc::rt::gpu {

namespace {

constexpr char kLibrary[] = "libnccl.so.2";

std::vector<std::string> Glob(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g;
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  return out;
}

template <typename F>
bool Bind(void* handle, const char* symbol, F* out) {
  *out = reinterpret_cast<F>(dlsym(handle, symbol));
  return *out != nullptr;
}

}  // namespace

std::string NcclApi::ErrorText(nccl::Result r) const {
  const char* text = GetErrorString != nullptr ? GetErrorString(r) : nullptr;
  return fmt::format("{} (ncclResult {}; NCCL_DEBUG=WARN prints more)",
                     text != nullptr ? text : "no description", r);
}

std::vector<std::string> NcclCandidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("GPTC_NCCL"); env != nullptr && *env != '\0') {
    out.emplace_back(env);
  }
  out.emplace_back(kLibrary);
  out.emplace_back(std::string("/usr/local/cuda/lib64/") + kLibrary);
  std::vector<std::string> prefixes = {"/usr/lib", "/usr/local/lib", "/opt/conda/lib"};
  for (std::string& p : Glob("/opt/*/lib")) {  // virtual environments under /opt
    if (p != "/opt/conda/lib") prefixes.push_back(std::move(p));
  }
  for (const char* var : {"HOME", "VIRTUAL_ENV", "CONDA_PREFIX"}) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    prefixes.push_back(std::string(v) + (std::string_view(var) == "HOME" ? "/.local/lib" : "/lib"));
  }
  for (const std::string& prefix : prefixes) {
    for (const char* packages : {"site-packages", "dist-packages"}) {
      for (std::string& p :
           Glob(fmt::format("{}/python3*/{}/nvidia/nccl/lib/{}", prefix, packages, kLibrary))) {
        out.push_back(std::move(p));
      }
    }
  }
  return out;
}

StatusOr<NcclApi> LoadNccl(const std::vector<std::string>& candidates) {
  std::vector<std::string> tried;
  for (const std::string& path : candidates) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      tried.push_back(path);
      continue;
    }
    NcclApi api;
    api.path = path;
    const char* missing = nullptr;
    auto bind = [&](const char* symbol, auto* out) {
      if (missing == nullptr && !Bind(handle, symbol, out)) missing = symbol;
    };
    bind("ncclGetUniqueId", &api.GetUniqueId);
    bind("ncclCommInitRank", &api.CommInitRank);
    bind("ncclAllReduce", &api.AllReduce);
    bind("ncclGroupStart", &api.GroupStart);
    bind("ncclGroupEnd", &api.GroupEnd);
    bind("ncclCommDestroy", &api.CommDestroy);
    bind("ncclCommAbort", &api.CommAbort);
    bind("ncclGetErrorString", &api.GetErrorString);
    bind("ncclCommGetAsyncError", &api.CommGetAsyncError);
    if (missing != nullptr) {
      dlclose(handle);
      return Error("{} has no symbol {} (expected NCCL 2.10 or later)", path, missing);
    }
    return api;  // the handle stays open for the process
  }
  return Error(
      "NCCL not found: {} could not be loaded from {} (install pip's nvidia-nccl-cu13 or "
      "the NCCL package, or set GPTC_NCCL=/path/to/{})",
      kLibrary, fmt::join(tried, ", "), kLibrary);
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
  return Error("NCCL all-reduce: dtype {} is not supported (f32, bf16, f16 are)",
               ir::DTypeName(dtype));
}

StatusOr<nccl::RedOp> NcclRedOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return nccl::kSum;
    case ReduceOp::kMax:
      return nccl::kMax;
  }
  return Error("NCCL all-reduce: reduction {} is not supported", static_cast<int>(op));
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const NcclApi& api, int rank, int world,
    const std::array<std::byte, nccl::kUniqueIdBytes>& id) {
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

StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclCommunicator(Rendezvous& rendezvous, int rank,
                                                                   int world, int cuda_device) {
  if (rendezvous.rank() != rank || rendezvous.world_size() != world) {
    return Error("NCCL communicator: rank {} of {} disagrees with the rendezvous' rank {} of {}",
                 rank, world, rendezvous.rank(), rendezvous.world_size());
  }
  ASSIGN_OR_RETURN(const NcclApi* api, GetNccl());
  std::array<std::byte, nccl::kUniqueIdBytes> id{};
  if (rank == 0) {
    nccl::UniqueId uid;
    if (nccl::Result r = api->GetUniqueId(&uid); r != nccl::kSuccess) {
      return Error("rank 0 of {}: ncclGetUniqueId ({}): {}", world, api->path, api->ErrorText(r));
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
  if (cudaError_t e = cudaSetDevice(cuda_device); e != cudaSuccess) {
    return Error("rank {}: cudaSetDevice({}) before ncclCommInitRank: {} ({})", rank, cuda_device,
                 cudaGetErrorName(e), cudaGetErrorString(e));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm,
                   NcclCommunicator::Create(*api, rank, world, id));
  Status barrier = rendezvous.Barrier();
  if (!barrier.ok()) {
    comm->Abort();
    return barrier.WithPrefix(fmt::format("rank {}: barrier after ncclCommInitRank", rank));
  }
  return comm;
}

}  // namespace gptc::rt::gpu
