// The precision a step was compiled at (`gptc compile --precision`), as the
// manifest records it: the policy the mixed-precision pass applies
// (passes/mixed_precision.h) and what readers of an artifact (gptc simulate,
// the HTML report's scaling view) take the compute dtype from. Data only,
// so that gptrun's report reads it without linking a pass.
#ifndef GPTC_COMPILER_PROGRAM_PRECISION_H_
#define GPTC_COMPILER_PROGRAM_PRECISION_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace gptc::program {

enum class PrecisionPolicy {
  kF32,   // everything f32: the pass changes nothing
  kBF16,  // bf16 dot operands, f32 accumulation, f32 master weights (the default)
};
std::string_view PrecisionPolicyName(PrecisionPolicy policy);  // "f32", "bf16"
// "f32" / "bf16" (as `--precision` takes them), or nullopt.
std::optional<PrecisionPolicy> ParsePrecisionPolicy(std::string_view name);

// The bytes of one parameter value in the dtype the step computes with: 4
// (f32), or 2 (the bf16 copies of the f32 masters).
int64_t ComputeDtypeBytes(PrecisionPolicy policy);

}  // namespace gptc::program

#endif  // GPTC_COMPILER_PROGRAM_PRECISION_H_
