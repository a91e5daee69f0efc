#include "runtime/gpu/communicator.h"

namespace gptc::rt::gpu {

Status Communicator::ReduceScatter(const void*, void*, int64_t, ir::DType, ReduceOp, void*) {
  return Error("this communicator (rank {} of {}) has no reduce-scatter", rank(), world_size());
}

Status Communicator::AllGather(const void*, void*, int64_t, ir::DType, void*) {
  return Error("this communicator (rank {} of {}) has no all-gather", rank(), world_size());
}

Status CheckCommunicatorWorld(int64_t compiled_world, const Communicator* communicator,
                              std::string_view where) {
  const int64_t have = communicator != nullptr ? communicator->world_size() : 1;
  if (compiled_world == have) return Status::Ok();
  if (communicator == nullptr) {
    return Error(
        "{}: compiled for --dp {}: run {} ranks (mpirun/torchrun env) so that the GPU device "
        "gets an NCCL communicator, or recompile without --dp; alone, its all-reduces would "
        "be identities and it would train on gradients divided by {}",
        where, compiled_world, compiled_world, compiled_world);
  }
  return Error("{}: compiled for --dp {}, but the communicator has {} ranks", where, compiled_world,
               have);
}

}  // namespace gptc::rt::gpu
