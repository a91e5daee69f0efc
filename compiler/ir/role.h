// Role: which part of the train step an instruction belongs to, and which
// transformer layer, as typed facts the passes decide by.
//
// The frontend sets the forward phase and the layer of a block's scope
// (Tracer::LayerScope), autodiff the gradient phase, remat its
// clones', the optimizer the update and optimizer phases, mixed precision
// the parameter casts'. Passes read the role, never the metadata string or
// an instruction's name, which are for people (Note [roles]). In the text
// format a role follows the other attributes:
//   %g = f32[8,64] mul(%a, %b), phase=gradient, layer=3, meta="grad.h.3.mlp"
// Hand-written IR may leave it out (phase none): every pass treats such an
// instruction as forward.
#ifndef GPTC_COMPILER_IR_ROLE_H_
#define GPTC_COMPILER_IR_ROLE_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace gptc::ir {

// Note [roles]
// ~~~~~~~~~~~~
// Remat keeps the block boundaries (the data crossing from one layer to
// another) and recomputes forward values for backward users; fusion keeps
// remat's copies out of forward kernels, groups each parameter's optimizer
// work and the gradient norm's sums, and finds the cross-entropy's
// backward; the reports count kernels per layer; data parallelism finds
// the accumulated gradients. Each reads the role, not metadata prefixes
// (`grad.`, `remat.`, `optimizer.`), the scope string `h.N` or names
// (`remat.X`, `grad_acc.X`): with those, renaming a tracer scope would
// silently change what is recomputed and fused. tests/style/no_string_decisions.sh keeps
// such reads out of the sources, and TrainPipelineTest.MetadataIsForPeopleOnly
// compiles a forward with its metadata blanked to the same step.
//
// The phases have a flow order the verifier checks (PhaseRank): forward and
// the parameter casts, then remat's copies, then the gradients, then the
// optimizer. Fusions mix phases (the cross-entropy kernel computes the loss
// and dlogits), so a fusion takes its hero's role, and the edges into and
// out of fusions and their tuple elements are not checked.

enum class Phase : uint8_t {
  kNone,       // not given (hand-written IR): read as forward
  kForward,    // the model's forward
  kParamCast,  // a parameter's cast to the compute dtype (mixed precision)
  kRemat,      // a forward value the backward recomputes (passes/remat.h)
  kGradient,   // the backward (autodiff), and the all-reduce of its gradients
  kUpdate,     // one parameter's optimizer work: its moments, update, gradient sums
  kOptimizer,  // the optimizer's values shared by all parameters: step, lr, norm, clip
};
std::string_view PhaseName(Phase p);  // "none", "forward", "param_cast", ...
std::optional<Phase> ParsePhase(std::string_view s);

// Phases in the order values flow: an instruction reads only values of its
// own rank or lower (forward and its casts 0, remat 1, gradient 2, the
// optimizer 3); the verifier checks it. None has no rank.
std::optional<int> PhaseRank(Phase p);

struct Role {
  Phase phase = Phase::kNone;
  int32_t layer = -1;  // the transformer block, -1: none (embeddings, head, optimizer scalars)

  bool backward() const { return phase == Phase::kGradient || phase == Phase::kRemat; }
  bool optimizer() const { return phase == Phase::kUpdate || phase == Phase::kOptimizer; }
  bool operator==(const Role&) const = default;
};

// The largest layer index a role can hold (Instruction stores it in 16 bits).
inline constexpr int32_t kMaxLayer = 32767;

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_ROLE_H_
