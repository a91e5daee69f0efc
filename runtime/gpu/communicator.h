// The collective operations a data-parallel train step needs, for the
// executor's `all_reduce` thunks (all-reduce, reduce-scatter, all-gather). The executor works
// without one (world size 1: an all-reduce is the identity, a copy when its buffers differ); a
// multi-GPU runner (NCCL) implements this interface and passes it in.
// CUDA-free: streams are passed as `void*` (a cudaStream_t).
#ifndef GPTC_RUNTIME_GPU_COMMUNICATOR_H_
#define GPTC_RUNTIME_GPU_COMMUNICATOR_H_

#include <cstdint>
#include <string_view>

#include "compiler/ir/shape.h"
#include "compiler/support/status.h"

namespace gptc::rt::gpu {

enum class ReduceOp { kSum, kMax };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int world_size() const = 0;
  virtual int rank() const = 0;
  // Enqueues on `stream` the all-reduce of `count` elements of `dtype` from
  // `in` (device memory) into `out` (may equal `in`) over every rank. Must be
  // capturable into a CUDA graph (NCCL's are, from NCCL 2.9).
  virtual Status AllReduce(const void* in, void* out, int64_t count, ir::DType dtype, ReduceOp op,
                           void* stream) = 0;
  // Enqueues the reduce-scatter of `in` (`recv_count` x world_size()
  // elements) into `out` (`recv_count`, this rank's shard of the rank-order
  // sum or max: ncclReduceScatter). `in` and `out` do not overlap. Default:
  // an error naming the communicator's lack of it.
  virtual Status ReduceScatter(const void* in, void* out, int64_t recv_count, ir::DType dtype,
                               ReduceOp op, void* stream);
  // Enqueues the all-gather of `in` (`send_count` elements) into `out`
  // (`send_count` x world_size(), every rank's in rank order: ncclAllGather).
  // `in` and `out` do not overlap. Default: an error, as ReduceScatter's.
  virtual Status AllGather(const void* in, void* out, int64_t send_count, ir::DType dtype,
                           void* stream);
  // Brackets the collectives of one bucket so that they go out as one
  // operation (ncclGroupStart/End). Default: nothing.
  virtual Status GroupStart() { return Status::Ok(); }
  virtual Status GroupEnd() { return Status::Ok(); }
  // Ends pending collectives on a failure path so that peers do not hang.
  virtual void Abort() {}
};

// Refuses to run an artifact compiled for `compiled_world` ranks (--dp N)
// without a communicator of that world size: its all-reduces would be
// identities and each rank would train alone on gradients divided by N.
// `where` names the artifact.
Status CheckCommunicatorWorld(int64_t compiled_world, const Communicator* communicator,
                              std::string_view where);

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_COMMUNICATOR_H_
