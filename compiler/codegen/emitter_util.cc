// emitter_util.h's helpers that build no MLIR (those that do are in
// fused_emitter.cc).
#include "compiler/codegen/emitter_util.h"

namespace gptc::codegen {

using ir::Opcode;

std::vector<const ir::Instruction*> FusionOutputs(const ir::Computation& fused) {
  const ir::Instruction* root = fused.root();
  if (root->opcode() != Opcode::kTuple) return {root};
  return std::vector<const ir::Instruction*>(root->operands().begin(), root->operands().end());
}

StatusOr<const ir::Computation*> FusedComputation(const ir::Instruction& fusion) {
  if (fusion.opcode() != Opcode::kFusion || fusion.called_computation() == nullptr) {
    return Error("%{}: not a fusion instruction", fusion.name());
  }
  const ir::Computation* fused = fusion.called_computation();
  std::vector<ir::Instruction*> params = fused->parameters();
  if (static_cast<int64_t>(params.size()) != fusion.operand_count()) {
    return Error("%{}: fused computation %{} has {} parameters for {} operands", fusion.name(),
                 fused->name(), params.size(), fusion.operand_count());
  }
  for (ir::Instruction* p : params) {
    if (p == nullptr || p->shape().is_tuple()) {
      return Error("%{}: fused computation %{} has a missing or tuple-shaped parameter",
                   fusion.name(), fused->name());
    }
  }
  return fused;
}

KernelSpec MakeKernelSpec(const ir::Instruction& fusion, const std::string& name,
                          ir::FusionKind kind, int64_t grid, int64_t block, int64_t shared_floats) {
  KernelSpec spec;
  spec.name = name;
  spec.fusion = fusion.name();
  spec.kind = kind;
  spec.grid = {grid, 1, 1};
  spec.block = {block, 1, 1};
  spec.static_shared_bytes = shared_floats * 4;
  spec.params = KernelParams(fusion, 1);
  for (KernelParam& p : spec.params) p.min_alignment = StorageBytes(p.shape.dtype());
  return spec;
}

std::vector<KernelParam> KernelParams(const ir::Instruction& fusion, int64_t alignment) {
  std::vector<KernelParam> params;
  for (int64_t i = 0; i < fusion.operand_count(); ++i) {
    params.push_back({KernelParam::Role::kOperand, i, fusion.operand(i)->shape(), alignment});
  }
  const ir::Shape& result = fusion.shape();
  if (result.is_tuple()) {
    for (size_t i = 0; i < result.tuple_elements().size(); ++i) {
      params.push_back({KernelParam::Role::kResult, static_cast<int64_t>(i),
                        result.tuple_elements()[i], alignment});
    }
  } else {
    params.push_back({KernelParam::Role::kResult, 0, result, alignment});
  }
  return params;
}

}  // namespace gptc::codegen
