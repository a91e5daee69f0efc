// The reference evaluator: runs any verified module on the CPU.
//
// It is the semantic ground truth of the IR: passes are tested by evaluating
// before and after, and GPU kernels against it. Two precisions:
//   kF32: every f32 value is rounded to f32 after each instruction, as the GPU would;
//   kF64: f32 values are kept in double (for finite-difference gradient checks).
// In both, bf16 and f16 results are rounded to their format on store (when
// round_16bit is set), so mixed-precision modules are compared honestly.
// Composite ops (attention, softmax-cross-entropy) evaluate through their
// decomposition; fusion evaluates its fused computation.
#ifndef GPTC_COMPILER_EVAL_EVALUATOR_H_
#define GPTC_COMPILER_EVAL_EVALUATOR_H_

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "compiler/eval/collective.h"
#include "compiler/eval/literal.h"
#include "compiler/ir/module.h"
#include "compiler/support/status.h"

namespace gptc::eval {

enum class Precision { kF32, kF64 };

namespace internal {
class BufferPool;
}

// Note [evaluation workspace]: one evaluation allocates a buffer per value;
// at GPT-2 sizes those are megabytes, and touching fresh pages costs more
// than the elementwise op that fills them. A caller that evaluates again and
// again (the CPU trainer, step after step) keeps a Workspace: the buffers of
// dropped values stay in its pool for the next call, and result literals are
// built in the storage of literals it hands back with Recycle (the state a
// step replaced), so after the first call a step touches no fresh memory.
class Workspace {
 public:
  Workspace();
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // Keeps `literal`'s storage (arrays and tuple elements) for a later result.
  void Recycle(Literal literal);
  // A vector of `size` values, recycled when one of that size was kept
  // (contents unspecified), else new.
  std::vector<double> TakeValues(size_t size);

  const std::shared_ptr<internal::BufferPool>& pool() const { return pool_; }

 private:
  std::shared_ptr<internal::BufferPool> pool_;
  std::map<size_t, std::vector<std::vector<double>>> recycled_;
  size_t recycled_bytes_ = 0;
};

// Note [collectives]: an all-reduce combines its operand across the
// data-parallel ranks; a reduce-scatter gives this rank its 1/N shard of
// that combination, an all-gather concatenates every rank's operand in rank
// order. With `collective` set, the evaluator is one rank: each collective
// hands its value to the collective, in instruction order, and every rank
// must evaluate the same module so the calls pair up. Without it, the
// evaluator simulates `world_size` identical replicas: a sum all-reduce
// multiplies by world_size (1: identity) and max is the identity. A
// reduce-scatter or all-gather's `replicas=N` must equal the group's size
// (the collective's, else world_size); with no collective only N = 1 runs
// (the identity), since one simulated replica has no rank to shard for.
// Values travel in their storage (Note [storage] in value.h): a bf16 array
// as its floats (or doubles), already bf16 values, rounded to bf16 again
// after a reduction, so every rank holds the same bits.
struct EvalOptions {
  Precision precision = Precision::kF32;
  bool round_16bit = true;
  int64_t world_size = 1;  // ignored when `collective` is set
  Collective* collective = nullptr;  // not owned
  Workspace* workspace = nullptr;    // not owned; null: a fresh one per call
  // A fusion whose largest value has more elements runs a slice of its rows
  // at a time when its body allows (Note [chunked fusions] in
  // chunked_fusion.h), slices of about this many; 0: never. 2^18: 2 MiB
  // arrays of doubles, which stay in cache.
  int64_t chunk_elements = int64_t{1} << 18;
};

// Evaluates the entry computation of `module` on `args` (one per parameter, in
// parameter order; shapes must match). Errors name the instruction at fault.
StatusOr<Literal> Evaluate(const ir::Module& module, std::span<const Literal> args,
                           const EvalOptions& options = {});

// Evaluates one computation of a module (e.g. a fused computation).
StatusOr<Literal> EvaluateComputation(const ir::Computation& computation,
                                      std::span<const Literal> args,
                                      const EvalOptions& options = {});

// Evaluate for a caller that gives up the arguments marked in `recycle` (the
// CPU trainer's state, which the results replace): once converted for the
// evaluation, their storage goes to options.workspace (required), in which
// the results are built, so the old and the new state are never both held
// as literals. Those arguments are left empty, also when evaluation fails.
StatusOr<Literal> EvaluateRecycling(const ir::Module& module, std::span<Literal> args,
                                    const std::vector<bool>& recycle, const EvalOptions& options);

}  // namespace gptc::eval

#endif  // GPTC_COMPILER_EVAL_EVALUATOR_H_
