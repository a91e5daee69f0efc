#include "compiler/codegen/affine_layout.h"

#include <algorithm>

namespace gptc::codegen {
namespace {

// Note [affine layouts]: each dim of the current value as the run of root
// dims it merges, most significant first; root dims of size 1 are in no run
// (their index is always 0).
using Runs = std::vector<std::vector<int>>;

Runs RootRuns(const ir::Shape& root) {
  Runs runs(root.rank());
  for (int64_t i = 0; i < root.rank(); ++i) {
    if (root.dim(i) != 1) runs[i].push_back(static_cast<int>(i));
  }
  return runs;
}

// A reshape to `dims`: the same root dims in the same order, cut into the new
// dims; false when a new dim is not a product of consecutive ones.
bool Regroup(Runs& runs, const ir::Shape& root, const std::vector<int64_t>& dims) {
  std::vector<int> flat;
  for (const auto& run : runs) flat.insert(flat.end(), run.begin(), run.end());
  Runs out;
  size_t at = 0;
  for (int64_t n : dims) {
    std::vector<int> run;
    int64_t product = 1;
    while (product < n && at < flat.size()) {
      product *= root.dim(flat[at]);
      run.push_back(flat[at++]);
    }
    if (product != n) return false;
    out.push_back(std::move(run));
  }
  if (at != flat.size()) return false;
  runs = std::move(out);
  return true;
}

// A transpose: dim k of the result is dim perm[k] of its operand.
Runs Permuted(const Runs& runs, const std::vector<int64_t>& perm) {
  Runs out;
  for (int64_t p : perm) out.push_back(runs[p]);
  return out;
}

Runs InversePermuted(const Runs& runs, const std::vector<int64_t>& perm) {
  Runs out(runs.size());
  for (size_t k = 0; k < perm.size(); ++k) out[perm[k]] = runs[k];
  return out;
}

// The layout of runs `runs` over the dims of `shape`, a box at `starts` of
// the row-major `buffer` (shape itself when it is not a slice).
std::optional<AffineLayout> Layout(const Runs& runs, const ir::Shape& root, const ir::Shape& shape,
                                   const ir::Instruction* buffer,
                                   const std::vector<int64_t>& starts) {
  const ir::Shape& full = buffer->shape();
  if (full.rank() != shape.rank() || static_cast<int64_t>(runs.size()) != shape.rank()) {
    return std::nullopt;
  }
  AffineLayout layout;
  layout.buffer = buffer;
  layout.strides.assign(root.rank(), 0);
  int64_t pitch = 1;
  for (int64_t k = shape.rank() - 1; k >= 0; --k) {
    int64_t stride = pitch;
    for (auto r = runs[k].rbegin(); r != runs[k].rend(); ++r) {
      layout.strides[*r] = stride;
      stride *= root.dim(*r);
    }
    if (!starts.empty()) layout.offset += starts[k] * pitch;
    pitch *= full.dim(k);
  }
  return layout;
}

bool IsLayoutOp(ir::Opcode o) {
  return o == ir::Opcode::kTranspose || o == ir::Opcode::kReshape || o == ir::Opcode::kConvert ||
         o == ir::Opcode::kCopy;
}

}  // namespace

std::optional<AffineLayout> LayoutOfResult(const ir::Instruction& root,
                                           const std::vector<const ir::Instruction*>& chain) {
  if (root.shape().is_tuple()) return std::nullopt;
  Runs runs = RootRuns(root.shape());
  const ir::Instruction* last = &root;
  for (size_t i = 0; i < chain.size(); ++i) {
    const ir::Instruction* x = chain[i];
    if (x->opcode() == ir::Opcode::kPad) {
      // Only at the end: the value is a box of the padded buffer at its low edge.
      if (i + 1 != chain.size()) return std::nullopt;
      return Layout(runs, root.shape(), last->shape(), x, x->attrs().pad_low);
    }
    if (!IsLayoutOp(x->opcode()) || x->shape().is_tuple()) return std::nullopt;
    if (x->opcode() == ir::Opcode::kTranspose) runs = Permuted(runs, x->attrs().dimensions);
    if (x->opcode() == ir::Opcode::kReshape && !Regroup(runs, root.shape(), x->shape().dims())) {
      return std::nullopt;
    }
    last = x;
  }
  return Layout(runs, root.shape(), last->shape(), last, {});
}

std::optional<AffineLayout> LayoutOfOperand(const ir::Instruction& op) {
  if (op.shape().is_tuple()) return std::nullopt;
  Runs runs = RootRuns(op.shape());
  const ir::Instruction* x = &op;
  for (;;) {
    const ir::Opcode o = x->opcode();
    if (o == ir::Opcode::kParameter) return Layout(runs, op.shape(), x->shape(), x, {});
    if (o == ir::Opcode::kSlice) {
      const ir::Instruction* buffer = x->operand(0);
      const ir::SliceSpec& slice = x->attrs().slice;
      if (buffer->opcode() != ir::Opcode::kParameter ||
          std::any_of(slice.strides.begin(), slice.strides.end(),
                      [](int64_t s) { return s != 1; })) {
        return std::nullopt;
      }
      return Layout(runs, op.shape(), x->shape(), buffer, slice.starts);
    }
    if (!IsLayoutOp(o)) return std::nullopt;
    const ir::Instruction* under = x->operand(0);
    if (o == ir::Opcode::kTranspose) runs = InversePermuted(runs, x->attrs().dimensions);
    if (o == ir::Opcode::kReshape && !Regroup(runs, op.shape(), under->shape().dims())) {
      return std::nullopt;
    }
    x = under;
  }
}

}  // namespace gptc::codegen
