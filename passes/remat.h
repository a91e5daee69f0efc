// Rematerialization: which forward values the backward keeps, and which it
// recomputes.
//
// Input: a train step, i.e. the output of autodiff (+ dce, optionally +
// optimizer). Forward values are the entry's instructions whose role
// (compiler/ir/role.h) is forward, a parameter cast or none; a forward value
// is *saved* when a backward instruction (phase gradient or remat) uses it, so it stays live from
// the forward into the backward. Each policy names the forward values it may keep (parameters and
// data inputs always; values the root or the optimizer read are always kept too); every other saved
// value is recomputed: its producer chain, up to kept values, is cloned right before the first
// backward instruction that needs it, and the backward uses the clone. Clones have phase remat and
// the layer of their original; they are named `remat.NAME` with metadata `remat.META`, for people:
//   %a = f32[8] exp(%x)                          %a = f32[8] exp(%x)
//   %y = f32[8] dot(%a, %w), ...                 %y = f32[8] dot(%a, %w), ...
//   ...                                   =>     ...
//   %grad.a = f32[8] mul(%grad.y, %a)            %remat.a = f32[8] exp(%x)
//                                                %grad.a = f32[8] mul(%grad.y, %remat.a)
// Policies (cheapest recomputation first):
//   kNone   keep every saved value except the cheap ones below;
//   kDots   keep the block boundaries (below) plus the outputs of dot and of the
//           composites (attention, softmax-cross-entropy); recompute the
//           elementwise and layout ops between them (layer norms, GELU, bias
//           adds, converts, reshapes). Keeping the block boundaries matters:
//           without them the residual stream would be recomputed from the
//           embeddings at the start of the backward and held throughout.
//   kWide   keep what none keeps except the values wider than the block's
//           residual stream (more elements than the values crossing into or
//           out of the block): the MLP's hidden activations and the fused
//           q/k/v projection, recomputed from their one gemm each. Saves most
//           of what block saves for the cost of two gemms, not a block.
//   kBlock  keep only the transformer block boundaries: the data values
//           that cross from one layer (the role's) to another, i.e. each
//           block's input and output (the residual stream); everything
//           inside a block, and the head after the last block, is recomputed;
//   kAuto   chosen by the compile driver, not this pass: a plan per block
//           for a memory budget (tools/gptc/remat_planner.h).
// A plan gives each transformer block its own policy (RematOptions::layers);
// the values outside the blocks (embeddings, the head) follow the last
// block's, as under a uniform policy they follow the model's. A block
// boundary is kept where the block on either side is not under none.
// Under every policy, a saved elementwise value computed from one other
// saved value of its shape and no more bytes (the GELU's tanh and x*x from
// the pre-activation), and perhaps broadcasts of much smaller values (a layer
// norm's x-hat from x - mean and rstd), is recomputed: the backward reads the
// one value instead of several (Note [cheap recomputation] in remat.cc).
// The kept sets nest (block within dots and within wide, both within none),
// so on transformer train steps the saved bytes fall from none to block.
// Results are bit-identical: clones compute the same values from the same
// inputs.
//
// Run after autodiff and dce (the backward must exist) and mixed-precision
// (saved bf16 values are then recomputed from bf16 inputs), before fusion,
// schedule and buffer assignment. CSE after remat undoes it (the clones are
// equal to their originals): do not run CSE or simplify after this pass.
#ifndef GPTC_PASSES_REMAT_H_
#define GPTC_PASSES_REMAT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/pass/pass.h"
#include "compiler/support/text.h"

namespace gptc::passes {

enum class RematPolicy { kNone, kDots, kWide, kBlock, kAuto };
std::string_view RematPolicyName(RematPolicy policy);  // "none", "dots", "wide", "block", "auto"
// The `--remat` spellings above, or nullopt.
std::optional<RematPolicy> ParseRematPolicy(std::string_view name);

struct RematOptions {
  RematPolicy policy = RematPolicy::kNone;
  // Non-empty: the policy of each transformer block (none, dots, wide, block),
  // as many as the model has, instead of `policy`.
  std::vector<RematPolicy> layers;
};

// A per-block plan as text, one range per run of equal policies from block 0
// up: "block:0-20,none:21-47" (a single block is "dots:5").
std::string FormatRematPlan(const std::vector<RematPolicy>& layers);
// The text above back to a plan: every block from 0 to the last named once,
// with none, dots, wide or block; errors name the range at fault.
StatusOr<std::vector<RematPolicy>> ParseRematPlan(std::string_view text);
// Options of `gptc-opt --pass=remat{policy=none|dots|wide|block}` or
// `remat{plan=PLAN}` (no options: policy dots); errors name the key or value
// at fault.
StatusOr<RematOptions> ParseRematPassOptions(const std::map<std::string, std::string>& options);

// "20GiB", "512MiB", "1.5GB", "1000000" (bytes) -> bytes; for --memory-budget.
StatusOr<int64_t> ParseByteSize(std::string_view text);

// Bytes of forward values (parameters excluded) that a backward instruction
// uses, i.e. the activations kept alive from the forward into the backward.
int64_t SavedActivationBytes(const ir::Module& module);

class Remat : public pass::Pass {
 public:
  explicit Remat(RematOptions options = {}) : options_(options) {}
  std::string_view Name() const override { return "remat"; }
  StatusOr<bool> Run(ir::Module& module) override;

 private:
  RematOptions options_;
};

}  // namespace gptc::passes

#endif  // GPTC_PASSES_REMAT_H_
