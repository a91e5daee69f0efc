// The analysis half of the attention emitters (attention_emitter.cc,
// attention_backward_emitter.cc and the tensor-core kernels of
// attention_mma.h build the MLIR from it): the ops of an attention fusion,
// their operands and sizes, how each output leaves the kernel, and whether
// the kernel runs on tensor cores, decided without MLIR so that tests can
// check them (STYLE 17).
//
// Internal to compiler/codegen.
#ifndef GPTC_COMPILER_CODEGEN_ATTENTION_PLAN_H_
#define GPTC_COMPILER_CODEGEN_ATTENTION_PLAN_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "compiler/ir/instruction.h"
#include "compiler/support/status.h"

namespace gptc::codegen {

// How one fusion output is computed from the kernel's results: `root` is the
// index in `roots` of the op it comes from through `chain` (transposes,
// reshapes, converts, copies; first applied first), or -1 when it depends on
// none of them (an independent output, e.g. a bf16 copy of an operand) or
// is packed from several.
struct OutputChain {
  int root = -1;
  std::vector<const ir::Instruction*> chain;
  // Note [packed attention gradient]: an output that is a sum of zero pads
  // tiling it, each over a chain from one root, is written piece by piece:
  // the pieces' chains end at their pads (and `root` is -1).
  std::vector<OutputChain> pieces;
};

// The stores that write output chain `c`: itself, or its pieces.
std::vector<const OutputChain*> StoresOf(const OutputChain& c);

// One OutputChain per output; fails naming an output computed from a root
// by anything but the layout ops above, or a sum of zero pads that overlap
// or leave a gap.
StatusOr<std::vector<OutputChain>> FindOutputChains(
    const ir::Instruction& fusion, const std::vector<const ir::Instruction*>& outputs,
    const std::vector<const ir::Instruction*>& roots);

// The operands of a forward attention fusion (Note [attention forward] in
// attention_emitter.cc).
struct AttentionForward {
  const ir::Instruction* attn = nullptr;  // either may be null, not both
  const ir::Instruction* lse = nullptr;
  const ir::Instruction *q = nullptr, *k = nullptr, *v = nullptr;
  int64_t batch = 0, heads = 0, tq = 0, tk = 0, dim = 0;
  bool causal = false;
  double scale = 1;
  std::vector<const ir::Instruction*> outputs, roots;
  std::vector<OutputChain> chains;
  int64_t first_output = 0;  // kernel argument of outputs[0]
  // Note [bf16 attention]: the dtype the ops round their matmul operands to.
  std::optional<ir::DType> matmul;
  bool tensor_cores = false;  // UseTensorCoreForward
  // The tensor-core products on wgmma (--attention-mma wgmma, set by the
  // emitter; attention_wgmma.h), else on mma.sync.
  bool wgmma = false;
};

// Whether the forward runs on tensor cores: bf16-rounded matmuls (Note [bf16
// attention] in passes/autodiff_attention.h) and a head dim that is a
// multiple of 16 up to 128.
bool UseTensorCoreForward(const AttentionForward& a, ir::DType matmul_dtype);

// The forward of kind=attention fusion `fusion`: an attention op, an
// attention-lse op of the same q and k, or both; an error names the fusion
// and what does not fit.
StatusOr<AttentionForward> PlanAttentionForward(const ir::Instruction& fusion);

// Which attention-grad ops of a backward fusion one of its kernels computes:
// all of them (dq alone, or dk with dv), or, of a fusion holding the three
// (Note [packed attention gradient]), dq or dk with dv.
enum class BackwardPart { kAll, kQueries, kKeys };

// The operands of a backward attention fusion (attention-grad ops sharing
// their operands; Note [flash attention backward] in
// attention_backward_emitter.cc).
struct AttentionBackward {
  std::array<const ir::Instruction*, 3> grads = {nullptr, nullptr, nullptr};  // by wrt
  const ir::Instruction *q = nullptr, *k = nullptr, *v = nullptr, *d_out = nullptr, *lse = nullptr,
                        *delta = nullptr;
  int64_t batch = 0, heads = 0, tq = 0, tk = 0, dim = 0;
  bool causal = false;
  double scale = 1;
  std::vector<const ir::Instruction*> outputs, roots;
  std::vector<OutputChain> chains;
  int64_t first_output = 0;
  bool tensor_cores = false;  // UseTensorCoreBackward
  bool wgmma = false;         // as AttentionForward's

  // dq runs by query rows; dk and dv by key rows.
  bool by_query() const { return grads[0] != nullptr; }
};

// Whether the backward runs on tensor cores: bf16 operands and a head dim
// that is a multiple of 16 up to 64 (beyond it the dk + dv kernel's four
// register tiles would spill).
bool UseTensorCoreBackward(const AttentionBackward& a);

// Part `part` of the backward of kind=attention fusion `fusion` holding
// attention-grad ops; an error names the fusion and what does not fit. The
// outputs are all of the fusion's: the kernel stores those (and the pieces
// of packed ones) whose root is one of its grads.
StatusOr<AttentionBackward> PlanAttentionBackward(const ir::Instruction& fusion,
                                                  BackwardPart part = BackwardPart::kAll);

// Whether an attention backward fusion holds dq and dk or dv: two kernels,
// dk + dv then dq (Note [packed attention gradient]).
bool HasBothBackwardParts(const ir::Instruction& fusion);

// Note [longest-first tiles] (attention_plan.cc): the heads a group of a
// causal kernel's tile order walks together: the most, dividing batch *
// heads, whose k and v (`kv_bytes_per_head`) fit in an L2 budget.
int64_t TileGroupHeads(int64_t batch_heads, int64_t kv_bytes_per_head);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_ATTENTION_PLAN_H_
