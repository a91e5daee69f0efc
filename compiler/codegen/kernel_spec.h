// KernelSpec: everything a runtime needs to launch one generated kernel.
//
// Note [kernel ABI]: every generated kernel takes only pointers, in this
// order: one per fusion operand (operand order), then one per fusion result
// (the tuple elements of a multi-output fusion, in tuple order). Buffers are
// dense row-major arrays of the IR shape; `pred` is one byte per element.
// Shapes are static, so element counts, grid and block are constants baked
// into the kernel: there are no scalar parameters. Each pointer must be
// aligned to its `min_alignment` (buffer assignment gives 256 bytes).
//
// Note [multi-kernel instructions]: an instruction may compile to several
// kernels, all with the same `fusion` and ABI, to be launched in the order
// CompileFusions lists them. A scatter-add: NAME_init copies operand 0 into
// the result, then NAME adds the updates (gather_emitter.cc); NAME_init
// (`copies_operand`) is not launched when the result is written over operand
// 0 (Note [in-place temporaries] in compiler/analysis/buffer_assignment.h). A reduction
// fusion mixing row and column reductions (layer-norm backward): NAME_rows
// writes the row-part results, then NAME the column-part ones (Note [mixed
// row and column reductions] in codegen.h); each writes only its results.
// A column reduction over many rows (the grad norm, the layer-norm gain and
// bias gradients): NAME_partials writes chunk totals to scratch, then NAME
// sums them and writes the results (Note [split column reductions] in
// column_reduction_plan.h); for a mixed fusion after its NAME_rows.
//
// This header has no LLVM/MLIR dependency so the runtime can include it.
#ifndef GPTC_COMPILER_CODEGEN_KERNEL_SPEC_H_
#define GPTC_COMPILER_CODEGEN_KERNEL_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/ir/opcode.h"
#include "compiler/ir/shape.h"

namespace gptc::codegen {

// sm_90 limits every kernel must respect.
inline constexpr int64_t kMaxThreadsPerBlock = 1024;
inline constexpr int64_t kMaxSharedBytesPerBlock = 227 * 1024;
inline constexpr int64_t kMaxRegistersPerThread = 255;

struct Dim3 {
  int64_t x = 1, y = 1, z = 1;
  int64_t product() const { return x * y * z; }
  bool operator==(const Dim3&) const = default;
};

struct KernelParam {
  // kScratch: memory the kernels of one instruction share (Note [split
  // column reductions] in column_reduction_plan.h), `shape` bytes past the
  // arena's buffers; always the last parameter.
  enum class Role : uint8_t { kOperand, kResult, kScratch };
  Role role = Role::kOperand;
  int64_t index = 0;           // operand number, or tuple index of the result (0 if not a tuple)
  ir::Shape shape;             // array shape of the buffer
  int64_t min_alignment = 16;  // bytes
};

struct KernelSpec {
  std::string name;    // PTX `.entry` name (a valid identifier, unique per module)
  std::string fusion;  // the fusion (or gather / scatter-add) instruction's name in the entry
  ir::FusionKind kind = ir::FusionKind::kLoop;
  Dim3 grid;
  Dim3 block;
  int64_t static_shared_bytes = 0;   // declared in the kernel
  int64_t dynamic_shared_bytes = 0;  // to pass at launch
  std::vector<KernelParam> params;   // see Note [kernel ABI]
  // Note [epilogue fallback] (compiler/program/plan.h): a kernel of gemm
  // fusion `fusion`, launched only when its epilogue is refused: the bias
  // gradient (before the gemm), or the epilogue applied to the plain gemm's
  // result in scratch (after it). Params index that gemm fusion's operands
  // and results.
  enum class GemmFallback : uint8_t { kNone, kBiasGradient, kEpilogue };
  GemmFallback gemm_fallback = GemmFallback::kNone;
  // Note [multi-kernel instructions]: the kernel only copies operand 0 to the
  // result (a scatter-add's NAME_init); the plan leaves it out when they are
  // one buffer.
  bool copies_operand = false;
};

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_KERNEL_SPEC_H_
