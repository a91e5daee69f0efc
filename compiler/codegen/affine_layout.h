// Note [affine layouts]: where the elements of a value lie in a row-major
// buffer it reaches through layout ops, as an affine map of its index:
//   offset + sum_i index[i] * strides[i]   (in elements of the buffer)
// An attention operand [B, H, T, D] read out of a [B, T, 3C] projection
// (transpose, reshape, slice), or a result written to [B, T, C] (transpose,
// reshape, convert), is such a map with strides[3] = 1: the kernels then move
// whole rows of d 4 or 16 bytes at a time instead of computing every
// element's index through the chain.
//
// The analysis is exact, not sampled: it follows the dims of the value
// through each op as runs of its own dims. A transpose permutes the runs, a
// reshape regroups the flattened sequence (every new dim must be a product of
// consecutive dims: merges only, no split of a dim), a slice at the buffer
// keeps the shape's strides in the larger buffer and adds its starts; any
// other op, or a reshape that would split a dim, gives no layout.
//
// Internal to compiler/codegen; no MLIR.
#ifndef GPTC_COMPILER_CODEGEN_AFFINE_LAYOUT_H_
#define GPTC_COMPILER_CODEGEN_AFFINE_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "compiler/ir/instruction.h"

namespace gptc::codegen {

struct AffineLayout {
  const ir::Instruction* buffer = nullptr;  // the value whose row-major elements these are
  std::vector<int64_t> strides;             // per dim of the value
  int64_t offset = 0;
  bool operator==(const AffineLayout&) const = default;
};

// `root` stored as the last of `chain` (root's users, first applied first:
// transposes, reshapes, converts, copies, and at the end at most one pad, a
// box of the padded buffer: an OutputChain's or a packed output's piece).
std::optional<AffineLayout> LayoutOfResult(const ir::Instruction& root,
                                           const std::vector<const ir::Instruction*>& chain);

// `op` as read from the parameter under it through transposes, reshapes,
// converts, copies and at most one slice right over the parameter: the
// parameter is the buffer (converts pass: the caller checks its dtype).
std::optional<AffineLayout> LayoutOfOperand(const ir::Instruction& op);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_AFFINE_LAYOUT_H_
