// The bucket of an all-reduce: which NCCL group the runtime issues it in
// (Note [all-reduce buckets] in passes/all_reduce_combiner.h decides them;
// `bucket=K` in the text, after `kind`). Absent until the combiner runs.
#ifndef GPTC_COMPILER_IR_ALL_REDUCE_BUCKET_H_
#define GPTC_COMPILER_IR_ALL_REDUCE_BUCKET_H_

#include <cstdint>
#include <optional>

#include "compiler/ir/instruction.h"

namespace gptc::ir {

// The bucket number of all-reduce `inst` in its computation, if assigned.
inline std::optional<int64_t> AllReduceBucket(const Instruction& inst) {
  if (inst.opcode() != Opcode::kAllReduce) return std::nullopt;
  return inst.attrs().bucket;
}

// Records bucket `bucket` on all-reduce `inst`.
inline void SetAllReduceBucket(Instruction& inst, int64_t bucket) {
  inst.mutable_attrs().bucket = bucket;
}

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_ALL_REDUCE_BUCKET_H_
