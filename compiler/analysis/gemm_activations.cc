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

constexpr std::array<OneOpActivation, 0> kOneOpActivations = {};

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
