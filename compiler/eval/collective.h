// Collective: how the reference evaluator runs an all-reduce as one rank of
// a data-parallel group (Note [collectives] in evaluator.h). The runtime
// implements it (runtime/communicator.h: ranks as threads, or processes over
// TCP); this header stays free of any runtime dependency.
#ifndef GPTC_COMPILER_EVAL_COLLECTIVE_H_
#define GPTC_COMPILER_EVAL_COLLECTIVE_H_

#include <cstdint>
#include <span>

#include "compiler/ir/instruction.h"
#include "compiler/support/status.h"

namespace gptc::eval {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  // Replaces `data` on every rank by the elementwise sum (or max) over ranks.
  // Every rank calls with the same kind and length, in the same order. The
  // result is bit-identical on every rank: each element is combined in rank
  // order, ((x0 + x1) + x2) + ..., in the element type.
  virtual Status AllReduce(ir::ReduceKind kind, std::span<float> data) = 0;
  virtual Status AllReduce(ir::ReduceKind kind, std::span<double> data) = 0;
};

}  // namespace gptc::eval

#endif  // GPTC_COMPILER_EVAL_COLLECTIVE_H_
