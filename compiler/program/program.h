// The train program: what the compiler hands the devices, free of passes,
// frontend, LLVM and CUDA. Its entries (IR modules) with the signature of
// each (the role of every input and output, the donations), the parameter
// specs, and the AdamW hyper-parameters the optimizer was built with. The
// compiler builds it (passes/train_step.h); gptrun's devices run it
// (runtime/), the CPU device by evaluating its modules.
#ifndef GPTC_COMPILER_PROGRAM_PROGRAM_H_
#define GPTC_COMPILER_PROGRAM_PROGRAM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/ir/module.h"
#include "compiler/program/param.h"

namespace gptc::program {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // decoupled; only where DecaysWeight()
  double clip_norm = 1.0;     // global-norm clipping; <= 0 disables it
  bool operator==(const AdamWOptions&) const = default;
};

enum class SlotRole {
  kParam,     // model parameter `index`
  kAdamM,     // first moment of parameter `index`
  kAdamV,     // second moment of parameter `index`
  kGradAcc,   // accumulated gradient of parameter `index`
  kTokens,    // s32[B, T]
  kTargets,   // s32[B, T]
  kData,      // another data input, by name
  kStep,      // f32[] 1-based optimizer step
  kLr,        // f32[] learning rate of this step
  kLoss,      // f32[] mean loss of the (micro-)batch
  kGradNorm,  // f32[] global gradient norm before clipping
  kLogits,    // f32[1, T, padded_vocab] logits of the sampling entry
  kMask,      // s32[B, T] of the score entry: 1 where a target's loss counts, else 0
  kLossSums,  // f32[B] of the score entry: each row's summed loss where the mask is 1
  kTokenCounts,  // f32[B] of the score entry: each row's mask sum
  kMaster,    // this rank's shard of parameter `index`'s f32 weights (ZeRO-1 only)
};
std::string_view SlotRoleName(SlotRole role);  // "param", "adam_m", ...
// The role named `name` (SlotRoleName's inverse), or nullopt.
std::optional<SlotRole> ParseSlotRole(std::string_view name);

// A data input of the traced computation and what it holds (the model
// declares it: Tracer::Input).
struct InputSpec {
  std::string name;
  ir::Shape shape;
  SlotRole role = SlotRole::kData;  // kTokens, kTargets or kData
};

struct Slot {
  SlotRole role;
  int64_t index = -1;  // parameter index for per-parameter roles, else -1
  std::string name;    // the IR parameter name, or the output's role name
  ir::Shape shape;
  bool operator==(const Slot&) const = default;
};

struct EntrySignature {
  std::vector<Slot> inputs;   // in entry-parameter order
  std::vector<Slot> outputs;  // root tuple elements in order
  // (output index, input index): the output replaces that input in place.
  std::vector<std::pair<int64_t, int64_t>> donations;

  // The input with `role` (and parameter `index`), or -1.
  int64_t FindInput(SlotRole role, int64_t index = -1) const;
  int64_t FindOutput(SlotRole role, int64_t index = -1) const;
};

// What an entry does: the devices pick their entries by it, never by name.
enum class EntryRole : uint8_t {
  kTrainStep,   // forward, backward and optimizer in one (grad_accum 1)
  kAccumulate,  // forward and backward, adding into the accumulated gradients
  kApply,       // the optimizer on the accumulated gradients
  kLogits,      // the forward's logits, for sampling
  kEval,        // the forward's loss, for validation
  kScore,       // each row's masked loss sum, for multiple-choice evals
};
inline constexpr EntryRole kEntryRoles[] = {EntryRole::kTrainStep, EntryRole::kAccumulate,
                                            EntryRole::kApply,     EntryRole::kLogits,
                                            EntryRole::kEval,      EntryRole::kScore};
// "train_step", "accumulate", "apply", "logits", "eval", "score": the entry's
// name in the artifact, the reports and the kernels' symbols.
std::string_view EntryRoleName(EntryRole role);
std::optional<EntryRole> ParseEntryRole(std::string_view name);
// Whether entries of `role` run between steps, reading the parameters and
// updating nothing (logits, eval, score): Note [arena guests].
bool RunsBetweenSteps(EntryRole role);

struct TrainEntry {
  EntryRole role;
  std::unique_ptr<ir::Module> module;
  EntrySignature signature;

  std::string_view name() const { return EntryRoleName(role); }
};

// Note [ZeRO-1 shards]: with zero_stage 1 each of the world_size ranks keeps
// the optimizer's state of every parameter for one shard of its elements
// only. A parameter of n elements is flattened, padded with zeros to
// N * s elements, s = ceil(n / N), and rank r owns elements [r*s, (r+1)*s).
// Its adam_m and adam_v slots are f32[s] (that shard of the moments) and a
// kMaster slot f32[s] holds that shard of the f32 weights, which AdamW
// updates; the kParam slot stays whole, every rank's copy rebuilt by an
// all-gather of the updated shards (passes/zero_shard.h). The padding is
// zero in every slot and stays zero. The step's IR needs no rank id: each
// rank's shards are the only thing that differ, and the runtime cuts them
// (ShardOf) when it initializes or imports state.
int64_t ShardElements(int64_t elements, int64_t world_size);  // ceil(elements / world_size)
// The shape of a per-parameter state slot of `role` for a parameter of
// `param` shape: f32[s] for the sharded roles under ZeRO-1, else `param`.
ir::Shape StateSlotShape(SlotRole role, const ir::Shape& param, int64_t zero_stage,
                         int64_t world_size);
// Whether slots of `role` hold one rank's shard under `zero_stage`.
bool IsShardedRole(SlotRole role, int64_t zero_stage);

struct TrainProgram {
  std::vector<ParamSpec> params;
  int64_t grad_accum = 1;
  // Data-parallel ranks the entries all-reduce over (passes/data_parallel.h);
  // the traced batch is one rank's micro-batch.
  int64_t world_size = 1;
  // 0: every rank keeps the whole optimizer state; 1: ZeRO-1 (Note [ZeRO-1
  // shards]), only with world_size > 1.
  int64_t zero_stage = 0;
  AdamWOptions adamw;
  // train_step; or accumulate, apply; then optionally logits, eval and score.
  std::vector<TrainEntry> entries;

  const TrainEntry* Find(EntryRole role) const;
  // Note [arena guests] (compiler/program/plan.h): the entry whose arena
  // `entry` runs in, or null when it has its own.
  const TrainEntry* ArenaHost(const TrainEntry& entry) const;
};

}  // namespace gptc::program

#endif  // GPTC_COMPILER_PROGRAM_PROGRAM_H_
