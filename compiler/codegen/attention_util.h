// Helpers shared by the attention emitters (forward, backward): outputs that
// leave a kernel through layout chains, and warp sums.
#ifndef GPTC_COMPILER_CODEGEN_ATTENTION_UTIL_H_
#define GPTC_COMPILER_CODEGEN_ATTENTION_UTIL_H_

#include <vector>

#include "compiler/codegen/fused_emitter.h"
#include "compiler/ir/computation.h"
#include "compiler/support/status.h"
#include "mlir/IR/Builders.h"

namespace gptc::codegen {

// How one fusion output is computed from the kernel's results: `root` is the
// index in `roots` of the op it comes from through `chain` (transposes,
// reshapes, converts, copies; first applied first), or -1 when it depends on
// none of them (an independent output, e.g. a bf16 copy of an operand).
struct OutputChain {
  int root = -1;
  std::vector<const ir::Instruction*> chain;
};

// One OutputChain per output; fails naming an output computed from a root
// by anything but the layout ops above.
StatusOr<std::vector<OutputChain>> FindOutputChains(
    const ir::Instruction& fusion, const std::vector<const ir::Instruction*>& outputs,
    const std::vector<const ir::Instruction*>& roots);

// Stores `value` (f32), the element [multi] of `root`, where `chain` maps it
// in output `ptr` (of dtype `out_dtype`), converting along the chain.
void StoreThroughChain(FusedEmitter& emitter, mlir::OpBuilder& b, mlir::Location loc,
                       mlir::Value value, const ir::Instruction& root, const OutputChain& chain,
                       std::vector<mlir::Value> multi, mlir::Value ptr, ir::DType out_dtype);

// The sum of `v` over the 32 lanes of a warp, in every lane (butterfly).
mlir::Value WarpSum(mlir::OpBuilder& b, mlir::Location loc, mlir::Value v);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_ATTENTION_UTIL_H_
