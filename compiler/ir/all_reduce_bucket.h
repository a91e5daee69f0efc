// The bucket of an all-reduce: which NCCL group the runtime issues it in
// (Note [all-reduce buckets] in passes/all_reduce_combiner.h decides them;
// `bucket=K` in the text, after `kind`). Absent until the combiner runs.
//
// Stored in the all-reduce's otherwise unused Attrs::dimensions as {K}, empty
// when absent, so that the attribute costs no field in every instruction's
// Attrs; these two functions are the only readers and writers of that encoding.
#ifndef GPTC_COMPILER_IR_ALL_REDUCE_BUCKET_H_
#define GPTC_COMPILER_IR_ALL_REDUCE_BUCKET_H_

#include <cstdint>
#include <optional>

#include "compiler/ir/instruction.h"

namespace gptc::ir {

// The bucket number of all-reduce `inst` in its computation, if assigned.
inline std::optional<int64_t> AllReduceBucket(const Instruction& inst) {
  const std::vector<int64_t>& d = inst.attrs().dimensions;
  if (inst.opcode() != Opcode::kAllReduce || d.size() != 1) return std::nullopt;
  return d[0];
}

// Records bucket `bucket` on all-reduce `inst` (its attrs hold `bucket` alone).
inline void SetAllReduceBucket(Instruction& inst, int64_t bucket) {
  inst.mutable_attrs().dimensions = {bucket};
}

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_ALL_REDUCE_BUCKET_H_
