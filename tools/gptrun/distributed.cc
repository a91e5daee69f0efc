#include "tools/gptrun/distributed.h"

#include <utility>

#include "runtime/rendezvous.h"

namespace gptc::tools {

StatusOr<Distributed> JoinDistributed(int64_t compiled_world, const std::string& artifact,
                                      const std::string& device) {
  Distributed dist;
  ASSIGN_OR_RETURN(dist.env, rt::ReadLaunchEnv());
  RETURN_IF_ERROR(rt::CheckWorldSize(dist.env, compiled_world, artifact));
  if (dist.env.world_size == 1) return dist;
  if (device != "cpu") {
    // Without NCCL the all-reduces would be identities: each rank would train
    // on its own gradients divided by N.
    return Error("{}: data parallelism on the GPU needs the NCCL communicator, which gptrun "
                 "does not wire up yet; run the ranks with --device cpu (small models)",
                 dist.env.ToString());
  }
  ASSIGN_OR_RETURN(std::unique_ptr<rt::Rendezvous> rendezvous,
                   rt::Rendezvous::Join(rt::RendezvousOptionsFrom(dist.env)));
  dist.comm = rt::MakeTcpCommunicator(std::move(rendezvous), dist.env.timeout);
  return dist;
}

Status AttachCommunicator(const Distributed& dist, rt::Trainer& trainer) {
  if (dist.comm == nullptr) return Status::Ok();
  auto* cpu = dynamic_cast<rt::CpuTrainer*>(&trainer);
  if (cpu == nullptr) return Error("data parallelism: this device has no communicator hook");
  cpu->set_collective(dist.comm.get());
  return Status::Ok();
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
