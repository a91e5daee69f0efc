// Collective: how the reference evaluator runs the collectives (all-reduce,
// reduce-scatter, all-gather) as one rank of a data-parallel group (Note
// [collectives] in evaluator.h). The runtime implements it
// (runtime/communicator.h: ranks as threads, or processes over TCP); this
// header stays free of any runtime dependency.
#ifndef GPTC_COMPILER_EVAL_COLLECTIVE_H_
#define GPTC_COMPILER_EVAL_COLLECTIVE_H_

#include <cstdint>
#include <span>

#include "compiler/ir/instruction.h"
#include "compiler/support/status.h"

namespace gptc::eval {

// Every rank calls the same operations with the same kinds and lengths, in
// the same order; a rank whose call differs fails the group. Results are
// bit-identical on every rank: each element is combined in rank order,
// ((x0 + x1) + x2) + ..., in the element type.
class Collective {
 public:
  virtual ~Collective() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  // Replaces `data` on every rank by the elementwise sum (or max) over ranks.
  virtual Status AllReduce(ir::ReduceKind kind, std::span<float> data) = 0;
  virtual Status AllReduce(ir::ReduceKind kind, std::span<double> data) = 0;
  // Writes into `out` this rank's shard of the elementwise sum (or max) over
  // ranks of `in`: with n = in.size() and N = world_size(), n divisible by
  // N and out.size() == n/N, elements [rank*n/N, (rank+1)*n/N). Each is the
  // element AllReduce would give, bit for bit.
  virtual Status ReduceScatter(ir::ReduceKind kind, std::span<const float> in,
                               std::span<float> out) = 0;
  virtual Status ReduceScatter(ir::ReduceKind kind, std::span<const double> in,
                               std::span<double> out) = 0;
  // Writes into `out` (N * in.size() elements) every rank's `in`, in rank
  // order: rank r's lands at [r*m, (r+1)*m) with m = in.size().
  virtual Status AllGather(std::span<const float> in, std::span<float> out) = 0;
  virtual Status AllGather(std::span<const double> in, std::span<double> out) = 0;
};

}  // namespace gptc::eval

#endif  // GPTC_COMPILER_EVAL_COLLECTIVE_H_
