// The bucket of a collective (all-reduce, reduce-scatter, all-gather): which
// NCCL group the runtime issues it in (Note [all-reduce buckets] in
// passes/all_reduce_combiner.h decides them; `bucket=K` in the text, last
// among its attributes). One numbering serves all three opcodes; a bucket
// holds collectives of one opcode. Absent until the combiner runs.
#ifndef GPTC_COMPILER_IR_ALL_REDUCE_BUCKET_H_
#define GPTC_COMPILER_IR_ALL_REDUCE_BUCKET_H_

#include <cstdint>
#include <optional>

#include "compiler/ir/instruction.h"

namespace gptc::ir {

// The bucket number of collective `inst` in its computation, if assigned;
// nullopt for any other instruction.
inline std::optional<int64_t> CollectiveBucket(const Instruction& inst) {
  if (!IsCollective(inst.opcode())) return std::nullopt;
  return inst.attrs().bucket;
}

// Records bucket `bucket` on collective `inst`.
inline void SetCollectiveBucket(Instruction& inst, int64_t bucket) {
  inst.mutable_attrs().bucket = bucket;
}

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_ALL_REDUCE_BUCKET_H_
