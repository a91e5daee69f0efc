// Instruction patterns the passes and the emitters both recognize, so that
// what a fusion rule accepts is what the kernel that runs it accepts.
#ifndef GPTC_COMPILER_IR_PATTERNS_H_
#define GPTC_COMPILER_IR_PATTERNS_H_

#include <map>
#include <optional>
#include <set>
#include <vector>

#include "compiler/ir/computation.h"
#include "compiler/ir/instruction.h"

namespace gptc::ir {

// A convert to a wider type than its operand's (bf16 -> f32): exact.
bool IsWideningConvert(const Instruction* inst);
// A convert to a narrower type than its operand's (f32 -> bf16): a rounding.
bool IsNarrowingConvert(const Instruction* inst);

// The one user of `inst`, or null when it has none or several (a fusion
// rule's view through free ops is the planner's own, fusion_planner.h).
const Instruction* SoleUser(const Instruction* inst);

// Output `i` of a fusion (a tuple-shaped one has several): its shape, and
// the value of the fused computation that holds it (the root or the root
// tuple's element `i`).
const Shape& FusionOutputShape(const Instruction& fusion, int64_t i);
const Instruction* FusionOutput(const Instruction& fusion, int64_t i);

// A reduce over the last dim alone of an input of rank >= 2.
bool IsRowReduce(const Instruction& inst);

// Every element of `inst` is `v`: a constant, or a broadcast of one (the
// "broadcast of a scalar" the frontend and autodiff emit for literals).
bool IsSplat(const Instruction* inst, double v);
// The value of every element of `inst` when it is such a splat.
std::optional<double> SplatValue(const Instruction* inst);

// Decomposition parameters -> the operands of the composite that calls the
// decomposition (softmax-cross-entropy, which the emitters inline).
using CompositeBindings = std::map<const Instruction*, const Instruction*>;
// Adds the bindings of every such composite of `c`, and of the composites in
// their decompositions.
void BindComposites(const Computation& c, CompositeBindings& bindings);

// Note [packed attention gradient] (passes/attention_fusion.cc): `out` as a sum
// of pads of zero whose boxes tile it (pairwise disjoint, covering every
// element), i.e. a concatenation: its pads, or nothing when it is not one.
// `adds` (when given) receives the adds of the sum.
std::vector<const Instruction*> ZeroPadTiles(const Instruction* out,
                                             std::vector<const Instruction*>* adds = nullptr);

// Whether `inst` depends, transitively, on one of `targets`: through its
// operands, through `bindings` (a decomposition parameter depends on the
// operand it stands for) and, for an inlined composite, through its
// decomposition's root. `memo` caches the answers for one `targets`.
bool DependsOnAny(const Instruction* inst, const std::set<const Instruction*>& targets,
                  std::map<const Instruction*, bool>& memo,
                  const CompositeBindings* bindings = nullptr);

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_PATTERNS_H_
