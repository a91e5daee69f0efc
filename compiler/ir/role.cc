#include "compiler/ir/role.h"

#include <array>
#include <utility>

namespace gptc::ir {

namespace {

constexpr std::array<std::pair<Phase, std::string_view>, 7> kPhaseNames = {{
    {Phase::kNone, "none"},
    {Phase::kForward, "forward"},
    {Phase::kParamCast, "param_cast"},
    {Phase::kRemat, "remat"},
    {Phase::kGradient, "gradient"},
    {Phase::kUpdate, "update"},
    {Phase::kOptimizer, "optimizer"},
}};

}  // namespace

std::string_view PhaseName(Phase p) {
  for (const auto& [phase, name] : kPhaseNames) {
    if (phase == p) return name;
  }
  return "?";
}

std::optional<Phase> ParsePhase(std::string_view s) {
  for (const auto& [phase, name] : kPhaseNames) {
    if (name == s && phase != Phase::kNone) return phase;
  }
  return std::nullopt;
}

std::optional<int> PhaseRank(Phase p) {
  switch (p) {
    case Phase::kNone:
      return std::nullopt;
    case Phase::kForward:
    case Phase::kParamCast:
      return 0;
    case Phase::kRemat:
      return 1;
    case Phase::kGradient:
      return 2;
    case Phase::kUpdate:
    case Phase::kOptimizer:
      return 3;
  }
  return std::nullopt;
}

}  // namespace gptc::ir
