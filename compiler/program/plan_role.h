// What each thunk and buffer of a plan is for, as typed records (Note [plan
// roles]): the compiler decides them once, where it knows them
// (compiler/artifact/thunk_roles.h), and writes them into the plan; the
// readers (gptc report, gptc inspect) only read them. Both ends go through
// the codec below; plans written before the records existed have none, and
// their readers say "unknown".
#ifndef GPTC_COMPILER_PROGRAM_PLAN_ROLE_H_
#define GPTC_COMPILER_PROGRAM_PLAN_ROLE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "compiler/ir/role.h"
#include "compiler/support/status.h"

namespace gptc::program {

// Note [plan roles]
// ~~~~~~~~~~~~~~~~~
// A thunk's role is its instruction's (ir::Role: the phase and the
// transformer block, a fusion's its hero's, Note [roles] in
// compiler/ir/role.h) and the part of the model it belongs to: the
// embedding (before the blocks in data flow, and the gradients that flow
// out of the blocks' backward), a block, the head (after the blocks, and
// the gradients that flow into the blocks' backward), the optimizer, the
// parameter casts. A buffer's category is what it holds: the entry's slot
// when it is one (parameters, AdamW moments, accumulated gradients, the
// batch and the step's scalars), else what its defining instruction's
// phase makes of it. Written as {"role": {"phase", "layer", "group"}} on a
// thunk and "category" on a buffer.

// The part of the model a thunk belongs to.
enum class ThunkGroup {
  kOther,      // none of the parts (hand-written IR without blocks)
  kEmbedding,  // token and position embeddings, forward and gradient
  kBlock,      // transformer block `layer`
  kHead,       // final layer norm, lm_head, loss
  kOptimizer,  // the optimizer's update of every parameter, its norm and scalars
  kParamCast,  // the casts of the master weights to the compute dtype
};
std::string_view ThunkGroupName(ThunkGroup g);  // "other", "embedding", "block", ...

struct ThunkRole {
  ir::Phase phase = ir::Phase::kNone;
  int32_t layer = -1;  // the block of a kBlock thunk; -1 for the other groups
  ThunkGroup group = ThunkGroup::kOther;
  bool operator==(const ThunkRole&) const = default;
};

// What a buffer of the arena holds.
enum class BufferCategory {
  kParameter,       // a model parameter, or its copy in the compute dtype
  kOptimizerState,  // an AdamW moment, or a value of the optimizer's update
  kGradient,        // a gradient (the backward's values, accumulated gradients)
  kActivation,      // a value of the forward (or its recomputation)
  kData,            // the batch, the step's scalars, the logits
};
inline constexpr int kBufferCategories = 5;
std::string_view BufferCategoryName(BufferCategory c);  // "parameter", "optimizer_state", ...

nlohmann::json ToJson(const ThunkRole& r);
StatusOr<ThunkRole> ThunkRoleFromJson(const nlohmann::json& j, std::string_view where);
// j[key] as a category, or nullopt when j has no `key`.
StatusOr<std::optional<BufferCategory>> OptionalBufferCategory(const nlohmann::json& j,
                                                               std::string_view key,
                                                               std::string_view where);

}  // namespace gptc::program

#endif  // GPTC_COMPILER_PROGRAM_PLAN_ROLE_H_
