// AllReduceCombiner: decides which collectives (all-reduce, reduce-scatter,
// all-gather) the runtime issues together, as one NCCL group, and records it
// on each as `bucket=K`.
//
// Note [all-reduce buckets]: the IR has one all-reduce per gradient
// (passes/data_parallel.h; under ZeRO-1 one reduce-scatter per gradient and
// one all-gather per updated weight shard), placed by the schedule right
// after the kernel that finishes its operand (passes/schedule.h), in the
// order the backward finishes them. Issuing each alone would pay NCCL's
// launch latency once per tensor; issuing all at the end would overlap
// nothing with the backward. This pass groups them as PyTorch DDP does, over
// the scheduled order: consecutive collectives of one opcode share a bucket
// while its operands' bytes stay within the cap (`bucket-mib`, 25 MiB by
// default, DDP's; a larger tensor is a bucket of its own; `first-bucket-mib`
// gives the first bucket a cap of its own, as DDP's 1 MiB, so that
// communication starts sooner) and while no
// member's result is read before the bucket's last member (a bucket is
// issued there, so a reader in between would wait for communication that
// has not started: that reader closes the bucket); a collective of another
// opcode closes it too. Readers are the instructions that launch work
// (analysis::IsKernel), looked through tuples, get-tuple-elements and
// reshapes. Buckets are numbered from 0 in instruction order, one numbering
// over the three opcodes (the plan's bucket list is indexed by it), each a
// run of consecutive collectives of one opcode (the verifier checks it):
//   %a1 = f32[1024] all-reduce(%g1), kind=sum    %a1 = ... kind=sum, bucket=0
//   %a2 = f32[1024] all-reduce(%g2), kind=sum => %a2 = ... kind=sum, bucket=0
//   %u = f32[1024] neg(%a1)                      %u = f32[1024] neg(%a1)
//   %a3 = f32[1024] all-reduce(%g3), kind=sum    %a3 = ... kind=sum, bucket=1
//   %s = f32[8] reduce-scatter(%g4), ...         %s = ..., replicas=2, bucket=2
// The plan (compiler/artifact/plan.h) turns each bucket into an NCCL group
// issued on the communication stream after its last member's thunk and
// waited for before the first thunk that reads a member's result; it decides
// nothing itself. Buffer assignment keeps every member's buffers reserved
// until its result's last reader (Note [in-place all-reduce] in
// compiler/analysis/buffer_assignment.h), so running a bucket late and
// concurrently with later kernels is safe. Keeping the tensors separate in
// the IR (a bucket is an attribute, not a concatenation) leaves the
// evaluator, buffer assignment and fusion unchanged.
//
// Runs last, after the schedule (the grouping depends on the order);
// nothing may reorder the instructions after it. Reassigns every bucket, so
// running it twice changes nothing.
#ifndef GPTC_PASSES_ALL_REDUCE_COMBINER_H_
#define GPTC_PASSES_ALL_REDUCE_COMBINER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ir/computation.h"
#include "compiler/pass/pass.h"

namespace gptc::passes {

// PyTorch DDP's default bucket cap.
inline constexpr int64_t kDefaultAllReduceBucketBytes = int64_t{25} << 20;  // 25 MiB

struct AllReduceCombinerOptions {
  int64_t bucket_bytes = kDefaultAllReduceBucketBytes;  // > 0
  // The first bucket's cap; 0: bucket_bytes, like the others.
  int64_t first_bucket_bytes = 0;
};

// Options from `gptc-opt --pass=all-reduce-combiner{bucket-mib=N
// first-bucket-mib=M}` (positive integers); errors name the key or value at
// fault.
StatusOr<AllReduceCombinerOptions> ParseAllReduceCombinerOptions(
    const std::map<std::string, std::string>& options);

// The collectives of `computation` grouped by Note [all-reduce buckets]
// with `options`' caps: each bucket's members in instruction order.
std::vector<std::vector<ir::Instruction*>> GroupCollectives(
    const ir::Computation& computation, const AllReduceCombinerOptions& options);

class AllReduceCombiner : public pass::Pass {
 public:
  explicit AllReduceCombiner(AllReduceCombinerOptions options = {}) : options_(options) {}
  std::string_view Name() const override { return "all-reduce-combiner"; }
  StatusOr<bool> Run(ir::Module& module) override;

 private:
  AllReduceCombinerOptions options_;
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_ALL_REDUCE_COMBINER_H_
