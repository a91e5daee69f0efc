// GemmEpilogue: what a kind=gemm fusion computes after its dot, as the fusion
// pass decided it (Note [gemm epilogue records] in
// compiler/analysis/gemm_epilogue.h).
//
// The record names the fusion's own operands and outputs (the root, or its
// tuple elements) by number, so that the later stages (the cuBLASLt plan,
// the fallback kernels) read the decision instead of matching the fused
// computation again. In the text format it follows the fusion's kind:
//   %f = (bf16[8,64], bf16[8,64]) fusion(%x, %w, %b), kind=gemm,
//        epilogue={d=1, bias=2, activation=gelu, aux_out=0}, calls=%fused.fc
#ifndef GPTC_COMPILER_IR_GEMM_EPILOGUE_H_
#define GPTC_COMPILER_IR_GEMM_EPILOGUE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "compiler/support/status.h"

namespace gptc::ir {

class Instruction;

// How an activation uses a matrix of D's dims beside D: not at all; it may
// write its input, the pre-activation, for the backward (aux_out); it is a
// backward and reads that pre-activation (aux_in).
enum class ActivationAux : uint8_t { kNone, kMayWrite, kReads };

// The activations a gemm epilogue applies (after the bias, before any
// residual): X(enumerator, text name, aux). gelu: the tanh GELU; gelu_grad:
// the result times GELU'(aux_in); relu: max(result, 0). Which cuBLASLt
// epilogue runs each is the plan's table (Note [gemm epilogue table] in
// compiler/program/plan.h).
#define GPTC_GEMM_ACTIVATIONS(X)    \
  X(kNone, "none", kNone)           \
  X(kGelu, "gelu", kMayWrite)       \
  X(kGeluGrad, "gelu_grad", kReads) \
  X(kRelu, "relu", kNone)

enum class GemmActivation : uint8_t {
#define GPTC_GEMM_ACTIVATION_ENUM(e, name, aux) e,
  GPTC_GEMM_ACTIVATIONS(GPTC_GEMM_ACTIVATION_ENUM)
#undef GPTC_GEMM_ACTIVATION_ENUM
};
std::string_view GemmActivationName(GemmActivation a);  // "none", "gelu", "gelu_grad"
std::optional<GemmActivation> ParseGemmActivation(std::string_view s);
ActivationAux GemmActivationAux(GemmActivation a);

struct GemmEpilogue {
  int64_t d = 0;          // output: the result D
  int64_t bias = -1;      // operand: a vector added along D's last dim
  int64_t residual = -1;  // operand: a tensor of D's shape added to it
  GemmActivation activation = GemmActivation::kNone;
  int64_t aux_out = -1;        // gelu: the output holding the pre-activation
  int64_t aux_in = -1;         // gelu_grad: the operand holding it
  int64_t bias_grad_out = -1;  // output: the column sum of ...
  int64_t bias_grad_of = -1;   // ... this operand, one of the two the dot reads
  bool transposed = false;     // D is the 2-D transpose of the dot's result
  bool operator==(const GemmEpilogue&) const = default;
};

// `{d=0, bias=2, ...}`: the fields that differ from their defaults, d always.
std::string GemmEpilogueToString(const GemmEpilogue& e);

// Whether `fusion`'s record fits it: numbers in range, the bias a vector of
// D's last dim, residual and aux of D's dims, the bias gradient a vector,
// fields that go together. The fused computation is not matched again.
Status CheckGemmEpilogue(const Instruction& fusion);

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_GEMM_EPILOGUE_H_
