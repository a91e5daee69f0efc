#include "compiler/program/precision.h"

namespace gptc::program {

std::string_view PrecisionPolicyName(PrecisionPolicy policy) {
  switch (policy) {
    case PrecisionPolicy::kF32:
      return "f32";
    case PrecisionPolicy::kBF16:
      return "bf16";
  }
  return "?";
}

std::optional<PrecisionPolicy> ParsePrecisionPolicy(std::string_view name) {
  if (name == "f32") return PrecisionPolicy::kF32;
  if (name == "bf16") return PrecisionPolicy::kBF16;
  return std::nullopt;
}

int64_t ComputeDtypeBytes(PrecisionPolicy policy) {
  return policy == PrecisionPolicy::kF32 ? 4 : 2;
}

}  // namespace gptc::program
