// The train step as a program: the modules a runner calls each step and the
// machine-readable signature of each entry (see docs/TRAIN_STEP.md).
//
// Not a pass: BuildTrainProgram runs the pipeline
//   autodiff -> dce -> [data-parallel] -> optimizer -> [data-parallel (apply)] -> dce
// on a traced forward module (params..., data... -> f32[] loss) and returns
//   grad_accum == 1: one module, entry `train_step`
//   grad_accum  > 1: two modules, `accumulate` (once per micro-batch) and
//                    `apply` (once per step), named MODEL.accumulate / MODEL.apply
// Each entry's signature names the role of every input and output and the
// donations (Note [donated buffers] in passes/optimizer.h).
#ifndef GPTC_PASSES_TRAIN_STEP_H_
#define GPTC_PASSES_TRAIN_STEP_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/analysis/buffer_assignment.h"
#include "compiler/ir/module.h"
#include "compiler/pass/pipeline.h"
#include "compiler/program/program.h"
#include "passes/all_reduce_combiner.h"
#include "passes/mixed_precision.h"
#include "passes/optimizer.h"
#include "passes/remat.h"

namespace gptc::passes {

// The program's types live in the contract library (compiler/program/).
using program::EntryRole;
using program::EntrySignature;
using program::InputSpec;
using program::ParseSlotRole;
using program::Slot;
using program::SlotRole;
using program::SlotRoleName;
using program::TrainEntry;
using program::TrainProgram;

struct TrainStepOptions {
  AdamWOptions adamw;
  int64_t grad_accum = 1;
  // > 1: gradients and loss are averaged over this many data-parallel ranks
  // (passes/data_parallel.h: before the optimizer in train_step, loss only in
  // accumulate, the accumulators in apply).
  int64_t world_size = 1;
  // 1: ZeRO-1 (Note [ZeRO-1] in passes/zero_shard.h), with world_size > 1.
  int64_t zero_stage = 0;
  // ZeRO-1: the gradients' dtype in the reduce-scatter, f32 or bf16 (Note
  // [bf16 gradient communication] in passes/zero_shard.h).
  ir::DType grad_comm = ir::DType::kF32;
  // Runs on the forward graph before autodiff (see mixed_precision.h).
  MixedPrecisionOptions precision{PrecisionPolicy::kF32};
  // After the optimizer: simplify -> cse -> dce -> remat -> fusion -> schedule
  // on every entry. Off, the entries stay unfused (what the CPU tests compare).
  bool optimize = false;
  RematOptions remat;  // a policy or a per-block plan; auto is the driver's to resolve
  // The all-reduce buckets' cap (Note [all-reduce buckets] in
  // passes/all_reduce_combiner.h), for world_size > 1.
  int64_t all_reduce_bucket_bytes = kDefaultAllReduceBucketBytes;
  int64_t first_bucket_bytes = 0;           // the first bucket's cap; 0: as the others
  pass::PipelineOptions pipeline;           // verify_each, disabled passes
  std::shared_ptr<pass::DumpWriter> dumps;  // may be null: no dumps
};

// Builds the train step from the traced forward module whose parameters
// are `params` then `inputs` (frontend Note [entry signature]); the inputs'
// roles (tokens, targets) become the signature's.
StatusOr<TrainProgram> BuildTrainProgram(std::unique_ptr<ir::Module> forward,
                                         std::vector<program::ParamSpec> params,
                                         const std::vector<program::InputSpec>& inputs,
                                         const TrainStepOptions& options);

// Adds the sampling entry `logits` to `program` from a traced module
// "params..., tokens s32[1, T] -> logits f32[1, T, V]" whose parameters are
// exactly program.params (names and shapes), then `inputs` (the tracer's
// data inputs; one, of role tokens). Runs mixed precision (as
// `options.precision`), simplify -> cse -> dce and, when options.optimize,
// fusion -> schedule. Signature: inputs param[0..P-1], tokens; output logits.
// The sampler reads the logits at the last real position and masks the padded
// vocabulary.
Status AddLogitsEntry(TrainProgram& program, std::unique_ptr<ir::Module> logits,
                      const std::vector<program::InputSpec>& inputs,
                      const TrainStepOptions& options);

// Adds the validation entry `eval` to `program` from the traced forward
// "params..., tokens s32[B, T], targets s32[B, T] -> loss f32[]" (what
// BuildTrainProgram differentiates, with its `inputs`: tokens and targets,
// found by role), with the same passes as the logits entry. Signature:
// inputs param[0..P-1] and the data inputs in the module's order; output
// loss. One run gives the mean loss of a batch on the device, where
// validating through `logits` would run each row alone and copy its [T, V]
// logits to the host.
Status AddEvalEntry(TrainProgram& program, std::unique_ptr<ir::Module> forward,
                    const std::vector<program::InputSpec>& inputs,
                    const TrainStepOptions& options);

// Note [score window]
// The score entry scores one completion a row, and completions are short
// (HellaSwag's examples take a few dozen tokens), so rows of the train
// step's seq would be mostly padding. gptc compile --score-seq W traces it
// with rows of W tokens instead, as many as the train step's batch * seq
// tokens make: the same work a pass, more examples in it, and an arena of
// about the train forward's size (it runs in the train step's arena as a
// guest). The runtime accepts any [rows, W] with W <= seq and rows * W <=
// batch * seq; W defaults to seq.
//
// Adds the scoring entry `score` from the traced module "params..., tokens
// s32[B, T], targets s32[B, T], mask s32[B, T] -> (f32[B], f32[B])"
// (models::TraceGpt2Score; `inputs` found by role), with the same passes as
// the logits entry. Signature: inputs param[0..P-1] and the data inputs in
// the module's order; outputs loss_sums and token_counts. Multiple-choice
// evals (runtime/eval_score.h) run it: one row a completion.
Status AddScoreEntry(TrainProgram& program, std::unique_ptr<ir::Module> score,
                     const std::vector<program::InputSpec>& inputs,
                     const TrainStepOptions& options);

// Checks that `module`'s entry has `sig`'s inputs (names and shapes, in
// order) and a root tuple of its outputs' shapes; errors name the first
// difference.
Status CheckSignature(const ir::Module& module, const EntrySignature& sig);

// One line per slot ("in 3 adam_m[0] %adam_m.wte.weight f32[50304,64]"), for
// dumps and `gptc compile` output.
std::string DescribeSignature(const EntrySignature& signature);

}  // namespace gptc::passes

#endif  // GPTC_PASSES_TRAIN_STEP_H_
