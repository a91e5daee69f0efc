// The CPU reference device: trains with a TrainProgram by running its
// modules with the reference evaluator, step after step.
//
//   CpuTrainer trainer(&program, /*seed=*/0);
//   for (int64_t s = 1; s <= steps; ++s) {
//     StatusOr<StepResult> r = trainer.Step(micro_batches, schedule.At(s));
//   }
//
// The trainer owns the state (parameters, Adam moments, gradient
// accumulators) as host literals; each donated output replaces its input
// (Note [donated buffers] in passes/optimizer.h), so nothing is copied.
// Slow but exact: it is the ground truth the GPU runtime is checked against.
#ifndef GPTC_RUNTIME_CPU_DEVICE_H_
#define GPTC_RUNTIME_CPU_DEVICE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "compiler/eval/collective.h"
#include "compiler/eval/evaluator.h"
#include "compiler/eval/literal.h"
#include "compiler/program/program.h"
#include "compiler/support/status.h"
#include "runtime/trainer.h"

namespace gptc::rt {

// A small learnable corpus for demos and tests: a fixed cycle of
// `cycle_length` token ids spread over [0, vocab), each row starting at a
// different place; every token determines the next, so the loss can fall
// towards 0. `index` varies the starting places from batch to batch.
MicroBatch PatternBatch(int64_t batch, int64_t seq, int64_t vocab, int64_t index,
                        int64_t cycle_length = 23);

class CpuTrainer : public Trainer {
 public:
  // Initializes the parameters from the program's ParamSpecs (runtime/init.h,
  // `seed`) and zeros the optimizer state. `program` must outlive the trainer.
  CpuTrainer(const program::TrainProgram* program, uint64_t seed);

  // One optimizer step over grad_accum micro-batches (exactly that many).
  StatusOr<StepResult> Step(std::span<const MicroBatch> micro_batches, double lr) override;

  // Runs an entry that updates no state (the sampling entry `logits`) on the
  // current parameters and `batch`'s tokens; returns its outputs in order.
  StatusOr<std::vector<eval::Literal>> Evaluate(const program::TrainEntry& entry,
                                                const MicroBatch& batch) override;

  // Through the collective (set_collective), in f64; without one, nothing.
  Status SumOverRanks(std::span<double> values) override;

  std::string DeviceDescription() const override { return "cpu (reference evaluator)"; }
  std::string DeviceName() const override { return "cpu"; }
  int64_t steps_done() const override { return steps_done_; }
  StatusOr<TrainerState> ExportState() override;
  Status ImportState(const TrainerState& state) override;
  // Parameter i (program->params order) as an f32 literal.
  const eval::Literal& param(int64_t i) const { return params_[i]; }
  eval::Literal& mutable_param(int64_t i) { return params_[i]; }
  // AdamW moments of parameter i and the step count, for checkpoints (runtime/checkpoint.h).
  const eval::Literal& adam_m(int64_t i) const { return adam_m_[i]; }
  const eval::Literal& adam_v(int64_t i) const { return adam_v_[i]; }
  eval::Literal& mutable_adam_m(int64_t i) { return adam_m_[i]; }
  eval::Literal& mutable_adam_v(int64_t i) { return adam_v_[i]; }
  void set_steps_done(int64_t steps) { steps_done_ = steps; }
  // Data parallelism: the entries' collectives combine with the other ranks
  // through `collective` (runtime/communicator.h); null, the default, runs
  // them as a single rank. Not owned; set it before the first Step. A ZeRO-1
  // program needs it: it cuts this rank's shards of the master weights from
  // the parameters (Note [ZeRO-1 shards]), and ExportState then gathers the
  // moments' shards from every rank, so every rank must call it together.
  void set_collective(eval::Collective* collective);

 private:
  // The literal of `slot` in the state, or nullptr for per-call inputs.
  eval::Literal* StateFor(const program::Slot& slot);
  // Runs `entry` with the state plus per-call inputs, writes donated outputs
  // back, and returns the non-donated outputs by role.
  StatusOr<std::vector<eval::Literal>> Run(const program::TrainEntry& entry,
                                           const MicroBatch* batch, double step, double lr);

  // ZeRO-1: the ranks of the program's collectives are set (set_collective);
  // the error says why not.
  Status CheckShardedRanks() const;
  // ZeRO-1: the moments of parameter i, whole, gathered from every rank.
  StatusOr<std::vector<float>> GatherShards(const eval::Literal& shard, int64_t i);

  const program::TrainProgram* program_;
  // With ZeRO-1, adam_m_ and adam_v_ hold this rank's shards and master_
  // its shards of the f32 weights (empty otherwise).
  std::vector<eval::Literal> params_, adam_m_, adam_v_, grad_acc_, master_;
  int64_t steps_done_ = 0;
  eval::Collective* collective_ = nullptr;
  // Note [evaluation workspace]: buffers and literals reused step after step.
  std::unique_ptr<eval::Workspace> workspace_ = std::make_unique<eval::Workspace>();
  // A step gives its state up to the workspace (eval::EvaluateRecycling):
  // after one that failed, the state is gone and this says why.
  Status lost_;
};

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_CPU_DEVICE_H_
