// The device-agnostic trainer: what gptrun's train loop needs from a device.
//
//   std::unique_ptr<Trainer> t = ...;  // CpuTrainer, or gpu::GpuTrainer
//   StatusOr<StepResult> r = t->Step(micro_batches, lr);
//
// A trainer owns the training state (parameters, AdamW moments) wherever its
// device keeps it, initializes it from the program's ParamSpecs with the
// counter-based rules of runtime/init.h (so every device starts from the same
// weights for the same seed), and exports/imports it as host values for
// checkpoints.
#ifndef GPTC_RUNTIME_TRAINER_H_
#define GPTC_RUNTIME_TRAINER_H_

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "compiler/eval/literal.h"
#include "compiler/support/status.h"
#include "compiler/program/program.h"

namespace gptc::rt {

// One micro-batch: tokens and next-token targets, s32[B, T] row-major; the
// score entry also reads `mask` (s32[B, T], 1 where a target's loss counts,
// else 0), which the other entries ignore.
struct MicroBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
  std::vector<int32_t> mask;
};

struct StepResult {
  double loss = 0;       // mean over the micro-batches
  double grad_norm = 0;  // global norm before clipping
};

// The state a checkpoint holds, on the host; vectors parallel to program->params.
struct TrainerState {
  int64_t steps_done = 0;
  std::vector<std::vector<float>> values, adam_m, adam_v;
};

// Whether [first, first + count) lies in output `output` of `entry`; the error names them.
inline Status CheckSliceRange(const program::TrainEntry& entry, int64_t output, int64_t first,
                              int64_t count) {
  if (output < 0 || output >= static_cast<int64_t>(entry.signature.outputs.size())) {
    return Error("{}: no output {}", entry.name(), output);
  }
  const int64_t n = entry.signature.outputs[output].shape.num_elements();
  if (first < 0 || count < 0 || first + count > n) {
    return Error("{}: elements [{}, {}) of output {} ({} elements)", entry.name(), first,
                 first + count, output, n);
  }
  return Status::Ok();
}

class Trainer {
 public:
  virtual ~Trainer() = default;

  // Where the trainer runs, for the log's first line ("cpu (reference evaluator)",
  // "gpu 0 (NVIDIA H100 80GB HBM3, sm_90, 79.2 GiB free)").
  virtual std::string DeviceDescription() const = 0;
  // The device's name ("NVIDIA H100 80GB HBM3"; "cpu"), e.g. for KnownPeakTflops.
  virtual std::string DeviceName() const = 0;

  // One optimizer step over grad_accum micro-batches (exactly that many).
  virtual StatusOr<StepResult> Step(std::span<const MicroBatch> micro_batches, double lr) = 0;

  // Runs an entry that updates no state (the sampling entry `logits`) on the
  // current parameters and `batch`'s tokens; returns its outputs in order.
  virtual StatusOr<std::vector<eval::Literal>> Evaluate(const program::TrainEntry& entry,
                                                        const MicroBatch& batch) = 0;

  // Elements [first, first + count) of output `output` of Evaluate (row-major
  // flattened). The default evaluates everything and slices; the GPU copies
  // only the slice to the host.
  virtual StatusOr<std::vector<double>> EvaluateSlice(const program::TrainEntry& entry,
                                                      const MicroBatch& batch, int64_t output,
                                                      int64_t first, int64_t count) {
    RETURN_IF_ERROR(CheckSliceRange(entry, output, first, count));
    ASSIGN_OR_RETURN(std::vector<eval::Literal> out, Evaluate(entry, batch));
    std::vector<double>& v = out[output].values;
    if (first == 0 && count == static_cast<int64_t>(v.size())) return std::move(v);
    return std::vector<double>(v.begin() + first, v.begin() + first + count);
  }

  // Sums `values` elementwise over the data-parallel ranks, in place, and
  // returns once every rank's sum is back on the host; every rank calls it
  // with the same length, at the same point of its run. A trainer of one
  // rank leaves them as they are. For a few small counts (examples scored,
  // answers right: runtime/eval_score.h, split across the ranks): a device
  // may add in f32, exact for integers up to 2^24.
  virtual Status SumOverRanks(std::span<double> values) = 0;

  virtual int64_t steps_done() const = 0;

  // The parameters, moments and step count as host values (f32), and back.
  // Import checks the shapes against the program's parameters.
  virtual StatusOr<TrainerState> ExportState() = 0;
  virtual Status ImportState(const TrainerState& state) = 0;

  // What a device says of itself in gptrun's log; empty where it has nothing
  // to say (the CPU device). Lines about its load ("loaded: arenas ...").
  virtual std::string LoadSummary() const { return ""; }
  // After the run: the --profile table when `profiled`, and what else the
  // device did (the emulator: what it checked).
  virtual std::string RunReport(bool /*profiled*/) const { return ""; }
  // The profile as JSON (gpu::GpuTrainer::ProfileJson).
  virtual std::string ProfileJson() const { return ""; }
};

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_TRAINER_H_
