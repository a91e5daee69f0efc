#include "compiler/program/rank_state.h"

#include <fmt/format.h>

#include "compiler/program/program.h"
#include "compiler/support/text.h"

namespace gptc::program {

RankState RankStateOf(const std::vector<ParamSpec>& params, int64_t grad_accum, int64_t world_size,
                      int64_t zero_stage) {
  RankState s;
  const bool zero = zero_stage >= 1 && world_size > 1;
  for (const ParamSpec& p : params) {
    // The slots' own shapes (Note [ZeRO-1 shards]); the optimizer reads the
    // gradient as the moments are laid out.
    auto bytes = [&](SlotRole role) {
      return StateSlotShape(role, p.shape, zero ? 1 : 0, world_size).byte_size();
    };
    s.parameters += bytes(SlotRole::kParam);
    s.gradients += bytes(SlotRole::kAdamM);
    if (grad_accum > 1) s.accumulators += bytes(SlotRole::kGradAcc);
    s.moments += bytes(SlotRole::kAdamM) + bytes(SlotRole::kAdamV);
    if (zero) s.master += bytes(SlotRole::kMaster);
  }
  return s;
}

std::string RenderRankState(const std::vector<ParamSpec>& params, int64_t grad_accum,
                            int64_t world_size, int64_t zero_stage) {
  const RankState here = RankStateOf(params, grad_accum, world_size, zero_stage);
  const bool compare = zero_stage >= 1;
  const RankState plain = RankStateOf(params, grad_accum, world_size, 0);
  std::string out =
      fmt::format("== per-rank state: {} rank{}{}\n", world_size, world_size == 1 ? "" : "s",
                  compare ? fmt::format(", --zero {} beside --zero 0", zero_stage) : "");
  auto row = [&](std::string_view what, int64_t a, int64_t b) {
    out += fmt::format("  {:<13} {:>12}", what, FormatBytes(a));
    if (compare) out += fmt::format("  {:>12}", FormatBytes(b));
    out += "\n";
  };
  row("parameters", here.parameters, plain.parameters);
  row("gradients", here.gradients, plain.gradients);
  if (grad_accum > 1) row("accumulators", here.accumulators, plain.accumulators);
  row("moments", here.moments, plain.moments);
  if (compare) row("master", here.master, plain.master);
  row("total", here.total(), plain.total());
  if (compare) {
    out += fmt::format(
        "  ZeRO-1 keeps {:.1f}% of the state (the backward's whole gradients "
        "live until their reduce-scatter: the arena below counts them)\n",
        100.0 * static_cast<double>(here.total()) / static_cast<double>(plain.total()));
  }
  return out;
}

}  // namespace gptc::program
