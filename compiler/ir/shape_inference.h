// Shape inference: the typing rules of every opcode, in one place.
//
// The builder uses it to compute result shapes, the verifier to check stated
// shapes. Messages describe the problem without naming the instruction; the
// caller prefixes its name.
#ifndef GPTC_COMPILER_IR_SHAPE_INFERENCE_H_
#define GPTC_COMPILER_IR_SHAPE_INFERENCE_H_

#include <span>

#include "compiler/ir/instruction.h"
#include "compiler/support/status.h"

namespace gptc::ir {

// Returns the result shape of `opcode` over operands of `operand_shapes`.
//
// `declared` is the shape the instruction states. It supplies what operands
// do not determine: the whole shape of parameter, constant and iota, the
// result dims of reshape and broadcast, and the result dtype of convert, and
// of dot and reduce (which may accumulate a 16-bit float input into f32).
// `called` is the computation a fusion or composite op calls.
StatusOr<Shape> InferShape(Opcode opcode, std::span<const Shape> operand_shapes,
                           const Attrs& attrs, const Computation* called, const Shape& declared);

// Checks that constant `values` are exact in `dtype` (integral, in range,
// representable in the float format).
Status CheckLiteralValues(DType dtype, std::span<const double> values);

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_SHAPE_INFERENCE_H_
