#include "tools/gptrun/distributed.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "runtime/rendezvous.h"
#if GPTC_HAVE_GPU
#include "runtime/gpu/device.h"
#include "runtime/gpu/nccl_communicator.h"
#endif

namespace gptc::tools {

namespace {

#if GPTC_HAVE_GPU
// The watchdog found a dead or hung peer: every rank has been told. The main
// thread is blocked in a CUDA wait behind NCCL kernels that will never end,
// so this process cannot unwind; it exits (the driver tears the context
// down), as PyTorch's NCCL watchdog does.
void ExitOnFailure(const Status& why) {
  std::fprintf(stderr, "gptrun: %s\n", why.message().c_str());
  std::fflush(nullptr);
  std::_Exit(1);
}

// Whether this rank has its GPU (the one of its local rank). Checked before
// the rendezvous: a rank that cannot run says so at once, instead of after
// waiting up to GPTC_DIST_TIMEOUT for ranks that may never come.
Status CheckRankGpu(const rt::LaunchEnv& env) {
  if (Status s = rt::gpu::CheckGpuAvailable(); !s.ok()) return s.WithPrefix(env.ToString());
  const int devices = rt::gpu::CountDevices();
  if (env.local_rank >= devices) {
    return Error(
        "{}: no GPU for this rank: this node has {} GPU{}, so local rank {} has none "
        "(run one rank per GPU)",
        env.ToString(), devices, devices == 1 ? "" : "s", env.local_rank);
  }
  return Status::Ok();
}

// One rank per GPU, the GPU of its local rank; NCCL over the rendezvous.
// Failures before the watchdog holds the connections abort the rendezvous
// here; after, the watchdog (the caller's fail path) tells the others.
Status JoinNccl(Distributed& dist, std::unique_ptr<rt::Rendezvous> rdv) {
  const rt::LaunchEnv& env = dist.env;
  auto abort = [&](const Status& s) {
    rdv->Abort(s);  // the other ranks stop waiting for this one
    return s;
  };
  dist.gpu = static_cast<int>(env.local_rank);
  StatusOr<const rt::gpu::NcclApi*> api = rt::gpu::GetNccl();
  if (!api.ok()) return abort(api.status().WithPrefix(fmt::format("rank {}", env.rank)));
  StatusOr<rt::gpu::NcclUniqueIdBytes> id = rt::gpu::ShareNcclUniqueId(*rdv, **api);
  if (!id.ok()) return abort(id.status());
  // NCCL init waits for every rank: the watchdog bounds it and hears a rank
  // that fails meanwhile.
  dist.watchdog->Watch(std::move(rdv));
  dist.watchdog->Begin("NCCL init");
  StatusOr<std::unique_ptr<rt::gpu::NcclCommunicator>> nccl = rt::gpu::InitNcclCommunicator(
      **api, *id, static_cast<int>(env.rank), static_cast<int>(env.world_size), dist.gpu);
  dist.watchdog->End();
  if (!nccl.ok()) return nccl.status();
  rt::gpu::NcclCommunicator* probe = nccl->get();
  dist.gpu_comm = std::move(nccl).value();
  dist.watchdog->SetProbe([probe] { return probe->AsyncError(); });
  return Status::Ok();
}
#endif

}  // namespace

void Distributed::Abort(const Status& why) const {
  // The watchdog first: once it returns, its thread no longer probes the
  // NCCL communicator, which ncclCommAbort then ends (so that destroying it
  // does not wait for collectives that will never complete).
  if (watchdog != nullptr) watchdog->Abort(why);
  if (gpu_comm != nullptr) gpu_comm->Abort();
  if (comm != nullptr) comm->Abort(why);
}

void Distributed::BeginStep(int64_t step) const {
  if (watchdog != nullptr) watchdog->Begin(fmt::format("step {}", step));
}

void Distributed::EndStep() const {
  if (watchdog != nullptr) watchdog->End();
}

Status Distributed::Finish() const {
  return watchdog == nullptr ? Status::Ok() : watchdog->Finish();
}

StatusOr<Distributed> JoinDistributed(int64_t compiled_world, const std::string& artifact,
                                      const std::string& device, int gpu_flag,
                                      rt::AgreedFields agreed) {
  Distributed dist;
  ASSIGN_OR_RETURN(dist.env, rt::ReadLaunchEnv());
  RETURN_IF_ERROR(rt::CheckWorldSize(dist.env, compiled_world, artifact));
  dist.gpu = gpu_flag < 0 ? 0 : gpu_flag;
  if (dist.env.world_size == 1) return dist;
  if (device == "gpu" && gpu_flag >= 0) {
    return Error(
        "--gpu {}: with data parallelism each rank takes the GPU of its local rank "
        "({}); choose GPUs with CUDA_VISIBLE_DEVICES instead",
        gpu_flag, dist.env.ToString());
  }
  rt::RendezvousOptions options = rt::RendezvousOptionsFrom(dist.env);
  options.agreed = std::move(agreed);
  // Note [waiting lines] in runtime/rendezvous.h: what the join waits for, on stderr.
  options.progress = [](const std::string& line) {
    std::fprintf(stderr, "gptrun: %s\n", line.c_str());
  };
  if (device == "gpu") {
#if GPTC_HAVE_GPU
    Status gpu = CheckRankGpu(dist.env);
#else
    Status gpu =
        Error("--device gpu: this gptrun was built without the CUDA toolkit (no GPU device)");
#endif
    if (!gpu.ok()) {
      // The ranks already waiting (or rank 0's peers connecting within a
      // second) end with this message instead of at the timeout.
      rt::Rendezvous::AbortBeforeJoin(options, gpu);
      return gpu;
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<rt::Rendezvous> rendezvous, rt::Rendezvous::Join(options));
  // The emulated device's all-reduces run on the host too (runtime/emu/).
  if (device == "cpu" || device == "emu") {
    dist.comm = rt::MakeTcpCommunicator(std::move(rendezvous), dist.env.timeout);
    return dist;
  }
#if GPTC_HAVE_GPU
  dist.watchdog = std::make_unique<rt::Watchdog>(
      rt::Watchdog::Options{.rank = dist.env.rank, .timeout = dist.env.timeout}, ExitOnFailure);
  if (Status s = JoinNccl(dist, std::move(rendezvous)); !s.ok()) {
    dist.Abort(s);
    return s;
  }
  return dist;
#else
  return Error("--device gpu: this gptrun was built without the CUDA toolkit (no GPU device)");
#endif
}

rt::MicroBatch RankSlice(const rt::MicroBatch& global, const rt::LaunchEnv& env, int64_t rows,
                         int64_t seq) {
  const rt::RowRange r = rt::RankRows(env, rows);
  const auto first = static_cast<std::ptrdiff_t>(r.begin * seq);
  const auto last = static_cast<std::ptrdiff_t>((r.begin + r.count) * seq);
  rt::MicroBatch mine;
  mine.tokens.assign(global.tokens.begin() + first, global.tokens.begin() + last);
  mine.targets.assign(global.targets.begin() + first, global.targets.begin() + last);
  return mine;
}

}  // namespace gptc::tools
