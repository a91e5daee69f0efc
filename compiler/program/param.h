// What a traced module expects from its caller: the model parameters (with
// the rule that initializes them) and the data inputs, in entry-parameter order.
#ifndef GPTC_COMPILER_PROGRAM_PARAM_H_
#define GPTC_COMPILER_PROGRAM_PARAM_H_

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir/shape.h"
#include "compiler/support/status.h"

namespace gptc::program {

// How a parameter starts training. GPT-2 uses normal(0, 0.02) for matrices and
// embeddings (scaled by 1/sqrt(2 * layers) on the residual output projections),
// zeros for biases and ones for layer-norm gains.
struct InitRule {
  enum class Kind { kNormal, kZeros, kOnes };
  Kind kind = Kind::kZeros;
  double std = 0.0;  // kNormal only

  static InitRule Normal(double std) { return {Kind::kNormal, std}; }
  static InitRule Zeros() { return {Kind::kZeros, 0.0}; }
  static InitRule Ones() { return {Kind::kOnes, 0.0}; }
  bool operator==(const InitRule&) const = default;
};

// A model parameter, named as in Hugging Face checkpoints ("h.0.attn.c_attn.weight").
struct ParamSpec {
  std::string name;
  ir::Shape shape;  // dtype included
  InitRule init;
  bool operator==(const ParamSpec&) const = default;
};

// The artifact's params section (docs/ARTIFACT.md), written by the compiler
// and read by the program loader and gptc inspect: {"params": [{"name",
// "shape", "dtype": "f32", "init": {"kind": "normal"|"zeros"|"ones", "std"}}]}.
// FromJson's errors name the parameter and the field.
nlohmann::json ToJson(const InitRule& rule);
StatusOr<InitRule> InitRuleFromJson(const nlohmann::json& j, std::string_view where);
nlohmann::json ParamsSectionJson(const std::vector<ParamSpec>& params);
StatusOr<std::vector<ParamSpec>> ParamsSectionFromJson(const nlohmann::json& section);

}  // namespace gptc::program

#endif  // GPTC_COMPILER_PROGRAM_PARAM_H_
