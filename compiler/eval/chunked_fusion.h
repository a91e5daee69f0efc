// Internal to the evaluator: evaluating a large fusion a slice of rows at a
// time (Note [chunked fusions]).
#ifndef GPTC_COMPILER_EVAL_CHUNKED_FUSION_H_
#define GPTC_COMPILER_EVAL_CHUNKED_FUSION_H_

#include <functional>
#include <optional>
#include <span>

#include "compiler/eval/value.h"
#include "compiler/ir/computation.h"

namespace gptc::eval::internal {

// Note [chunked fusions]: a fusion body holds many values of the fusion's
// full size, and the evaluator materializes each (the cross-entropy gradient
// of a B8 gpt2-tiny step: a dozen [8,64,50304] arrays, the s32 and pred ones
// as doubles, over 200 MB each), where the GPU kernel keeps them in
// registers. Most bodies are separable along the leading dimension of their
// result: every value either has those rows (elementwise ops, broadcasts
// and iotas into them, reductions and transposes that keep them) or does not
// depend on them (scalars, constants). Such a body, when its largest value is
// above EvalOptions::chunk_elements, runs once per slice of rows, on
// operand slices that share their buffers, into the result; the values of
// one slice are then the live set. The result is the same, bit for bit: every
// element is computed by the same operations on the same inputs.
using RunComputationFn =
    std::function<StatusOr<ValuePtr>(const ir::Computation&, std::span<const ValuePtr>)>;

// The fusion's value computed slice by slice with `run`, or nothing when the
// fusion is small or its body is not separable (the caller runs it whole).
std::optional<StatusOr<ValuePtr>> EvalFusionByRows(const Context& ctx,
                                                   const ir::Instruction& fusion,
                                                   std::span<const ValuePtr> args,
                                                   const RunComputationFn& run);

}  // namespace gptc::eval::internal

#endif  // GPTC_COMPILER_EVAL_CHUNKED_FUSION_H_
