// The optimizer pass: turns the autodiff output into a train step that
// updates the parameters with AdamW (Loshchilov & Hutter), as GPT-2/GPT-3
// were trained.
//
// Input: the entry returns (loss, grad_p0, grad_p1, ...), one gradient per
// float parameter in parameter order (what autodiff produces; run dce after
// autodiff and before this pass). Float parameters are the trainable ones;
// the other parameters (tokens, targets) are data and keep their order.
// With P trainable parameters and data inputs D..., the three modes give
// (see docs/TRAIN_STEP.md for the full contract):
//
//   kStep        params[P], adam_m[P], adam_v[P], D..., step f32[], lr f32[]
//                -> (loss, grad_norm, new params[P], new m[P], new v[P])
//   kAccumulate  params[P], grad_acc[P], D...
//                -> (loss, grad_acc + grads [P])
//   kApply       params[P], adam_m[P], adam_v[P], grad_acc[P], step, lr
//                -> (grad_norm, new params[P], new m[P], new v[P])
//                with grads = grad_acc / grad_accum; the forward and backward
//                are dropped (a new entry `apply` replaces the old one).
//
// The update, all in f32, for each parameter p with gradient g:
//   norm  = sqrt(sum over all parameters of sum(g * g))    (pre-clip; an output)
//   g     = g * min(1, clip_norm / (norm + 1e-6))           (clip_norm <= 0: no clipping)
//   m'    = beta1 * m + (1 - beta1) * g
//   v'    = beta2 * v + (1 - beta2) * g * g
//   p'    = p * (1 - lr * wd) - lr / (1 - beta1^step) * m' / (sqrt(v' / (1 - beta2^step)) + eps)
// where wd = weight_decay for parameters of rank >= 2 (matrices and the
// wte/wpe embeddings) and 0 for rank-1 ones (biases, layer-norm gains).
// `step` is the 1-based step counter for the bias correction and `lr` the
// learning rate of this step: both are runtime inputs, so schedules live in
// the runner. New parameters are named `adam_m.NAME`, `adam_v.NAME`,
// `grad_acc.NAME`, `step`, `lr`; update instructions `adamw.NAME.*` with
// metadata `optimizer.NAME` (`optimizer` for the shared scalars).
//
// Note [donated buffers]: every new params/m/v/grad_acc output has the shape
// of the input it replaces; the runner (and buffer assignment) updates those
// inputs in place. passes/train_step.h records the output -> input map.
//
// Fails with "optimizer: ..." naming the entry when the module is not an
// autodiff output (running it twice fails the same way).
#ifndef GPTC_PASSES_OPTIMIZER_H_
#define GPTC_PASSES_OPTIMIZER_H_

#include <cstdint>
#include <map>
#include <string>

#include "compiler/ir/shape.h"
#include "compiler/pass/pass.h"
#include "compiler/program/program.h"

namespace gptc::passes {

using program::AdamWOptions;  // compiler/program/program.h

enum class OptimizerMode { kStep, kAccumulate, kApply };

struct OptimizerOptions {
  AdamWOptions adamw;
  OptimizerMode mode = OptimizerMode::kStep;
  int64_t grad_accum = 1;  // kApply divides the accumulated gradients by this
  // > 1: ZeRO-1 over this many data-parallel ranks (Note [ZeRO-1] in
  // passes/zero_shard.h): kStep and kApply reduce-scatter the gradients
  // themselves (data parallelism all-reduces only the loss), keep the
  // moments and the master weights as shards (SlotRole kMaster) and
  // all-gather the updated parameters. kAccumulate ignores it.
  int64_t zero_world = 1;
  // ZeRO-1: the gradients' dtype on the wire, f32 or bf16 (Note [bf16
  // gradient communication] in passes/zero_shard.h).
  ir::DType grad_comm = ir::DType::kF32;
  // The roles of the entry's data inputs (its non-float parameters), in
  // parameter order, as the frontend declared them (InputSpec); empty: all
  // kData.
  std::vector<program::SlotRole> data_roles;
};

// Options from `gptc-opt --pass=optimizer{zero=N grad-comm=f32|bf16}` (N >=
// 1: ZeRO-1 over N ranks when > 1); errors name the key or value at fault.
StatusOr<OptimizerOptions> ParseOptimizerOptions(const std::map<std::string, std::string>& options);

// Whether weight decay applies to a parameter of this shape: rank >= 2
// (matrices, embeddings) decays; biases and layer-norm parameters do not.
inline bool DecaysWeight(const ir::Shape& shape) { return shape.rank() >= 2; }

// Note [optimizer signature]: the pass names the role of every entry input
// and output as it creates them (parameters, moments, accumulators, data,
// step and lr in; loss, grad norm and the updated state out, each update
// donated onto the input it replaces). BuildTrainProgram takes the entry's
// signature from here and checks it against the module the pipeline ends
// with (CheckSignature in train_step.h).
class Optimizer : public pass::Pass {
 public:
  explicit Optimizer(OptimizerOptions options = {}) : options_(options) {}
  std::string_view Name() const override { return "optimizer"; }
  StatusOr<bool> Run(ir::Module& module) override;
  // The signature of the entry the last Run built.
  const program::EntrySignature& signature() const { return signature_; }

 private:
  OptimizerOptions options_;
  program::EntrySignature signature_;
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_OPTIMIZER_H_
