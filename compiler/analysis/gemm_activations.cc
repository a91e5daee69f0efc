#include "compiler/analysis/gemm_activations.h"

#include <array>

#include "compiler/ir/patterns.h"

namespace gptc::analysis {

namespace {

using ir::GemmActivation;
using ir::Instruction;
using ir::Opcode;

struct OneOpActivation {
  GemmActivation activation;
  // Whether `op` computes the activation of `x` (x one of its operands).
  bool (*matches)(const Instruction& op, const Instruction* x);
};

// max(x, 0), in either order. (cuBLASLt's RELU_AUX keeps a bit mask, not
// the pre-activation, so ReLU takes no aux.)
bool IsRelu(const Instruction& op, const Instruction* x) {
  if (op.opcode() != Opcode::kMax) return false;
  const Instruction* other = op.operand(0) == x   ? op.operand(1)
                            : op.operand(1) == x ? op.operand(0)
                                                 : nullptr;
  return other != nullptr && other != x && ir::IsSplat(other, 0.0);
}

constexpr std::array<OneOpActivation, 1> kOneOpActivations = {{
    {GemmActivation::kRelu, &IsRelu},
}};

}  // namespace

std::optional<GemmActivation> MatchOneOpActivation(const Instruction& op, const Instruction* x) {
  if (!ir::IsElementwise(op.opcode()) || op.shape().dims() != x->shape().dims()) {
    return std::nullopt;
  }
  for (const OneOpActivation& a : kOneOpActivations) {
    if (a.matches(op, x)) return a.activation;
  }
  return std::nullopt;
}

}  // namespace gptc::analysis
