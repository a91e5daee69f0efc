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

#include <span>

#include "compiler/eval/collective.h"
#include "compiler/eval/literal.h"
#include "compiler/ir/module.h"
#include "compiler/support/status.h"

namespace gptc::eval {

enum class Precision { kF32, kF64 };

// Note [collectives]: an all-reduce combines its operand across the
// data-parallel ranks. With `collective` set, the evaluator is one rank: each
// all-reduce hands its value to the collective, in instruction order, and
// every rank must evaluate the same module so the calls pair up. Without it,
// the evaluator simulates `world_size` identical replicas: a sum all-reduce
// multiplies by world_size (1: identity) and max is the identity.
struct EvalOptions {
  Precision precision = Precision::kF32;
  bool round_16bit = true;
  int64_t world_size = 1;  // ignored when `collective` is set
  Collective* collective = nullptr;  // not owned
};

// Evaluates the entry computation of `module` on `args` (one per parameter, in
// parameter order; shapes must match). Errors name the instruction at fault.
StatusOr<Literal> Evaluate(const ir::Module& module, std::span<const Literal> args,
                           const EvalOptions& options = {});

// Evaluates one computation of a module (e.g. a fused computation).
StatusOr<Literal> EvaluateComputation(const ir::Computation& computation,
                                      std::span<const Literal> args,
                                      const EvalOptions& options = {});

}  // namespace gptc::eval

#endif  // GPTC_COMPILER_EVAL_EVALUATOR_H_
