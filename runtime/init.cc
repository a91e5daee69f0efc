#include "runtime/init.h"

#include <cmath>
#include <numbers>

namespace gptc::rt {

double StandardNormal(uint64_t seed, uint64_t param_index, uint64_t element) {
  const uint64_t key = SplitMix64(SplitMix64(SplitMix64(seed) ^ param_index) ^ (element >> 1));
  const uint64_t bits2 = SplitMix64(key);
  constexpr double kTwoToMinus53 = 1.0 / 9007199254740992.0;
  const double u1 = static_cast<double>((key >> 11) + 1) * kTwoToMinus53;  // (0, 1]
  const double u2 = static_cast<double>(bits2 >> 11) * kTwoToMinus53;      // [0, 1)
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * std::numbers::pi * u2;
  return radius * ((element & 1) ? std::sin(angle) : std::cos(angle));
}

float InitValue(const program::InitRule& rule, uint64_t seed, uint64_t param_index,
                uint64_t element) {
  switch (rule.kind) {
    case program::InitRule::Kind::kZeros: return 0.0f;
    case program::InitRule::Kind::kOnes: return 1.0f;
    case program::InitRule::Kind::kNormal:
      return static_cast<float>(rule.std * StandardNormal(seed, param_index, element));
  }
  return 0.0f;
}

std::vector<float> InitParameter(const program::ParamSpec& spec, uint64_t seed,
                                 uint64_t param_index) {
  std::vector<float> values(static_cast<size_t>(spec.shape.num_elements()));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = InitValue(spec.init, seed, param_index, i);
  }
  return values;
}

}  // namespace gptc::rt
