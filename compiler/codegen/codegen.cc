#include "compiler/codegen/codegen.h"

#include <cctype>
#include <set>

#include "compiler/codegen/lowering.h"

namespace gptc::codegen {
namespace {

// "fusion.3" -> "fusion_3": PTX identifiers are [A-Za-z_][A-Za-z0-9_]*.
std::string SanitizeName(const std::string& name) {
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "k_" + out;
  return out;
}

// Why an emitter that exists cannot take `fusion` yet, or "" if it can.
std::string UnsupportedReason(const ir::Instruction& fusion) {
  ir::FusionKind kind = fusion.attrs().fusion_kind;
  if (kind == ir::FusionKind::kLoop) return "";
  if (kind == ir::FusionKind::kReduction) {
    for (const auto& inst : fusion.called_computation()->instructions()) {
      if (inst->opcode() != ir::Opcode::kReduce) continue;
      int64_t rank = inst->operand(0)->shape().rank();
      if (inst->attrs().dimensions != std::vector<int64_t>{rank - 1}) {
        return "column / full reductions have no emitter yet";
      }
    }
    return "";
  }
  return fmt::format("fusion kind {} has no emitter yet", ir::FusionKindName(kind));
}

}  // namespace

bool HasEmitter(ir::FusionKind kind) {
  return kind == ir::FusionKind::kLoop || kind == ir::FusionKind::kReduction;
}

Status CheckTarget(std::string_view target) {
  if (target == "sm_90a" || target == "sm_90" || target == "sm_80") return Status::Ok();
  return Error("target {}: expected sm_90a, sm_90 or sm_80", target);
}

StatusOr<CompiledKernel> CompileFusion(const ir::Instruction& fusion, std::string kernel_name,
                                       const CodegenOptions& options) {
  RETURN_IF_ERROR(CheckTarget(options.target));
  ASSIGN_OR_RETURN(LoweredKernel lowered, EmitAndLower(fusion, kernel_name, options));
  CompiledKernel kernel;
  kernel.spec = std::move(lowered.spec);
  kernel.ptx = std::move(lowered.ptx);
  kernel.mlir = std::move(lowered.mlir);
  kernel.llvm_ir = std::move(lowered.llvm_ir);
  const KernelSpec& spec = kernel.spec;
  if (spec.block.product() > kMaxThreadsPerBlock) {
    return Error("kernel {}: block of {} threads exceeds {}", spec.name, spec.block.product(),
                 kMaxThreadsPerBlock);
  }
  if (spec.static_shared_bytes + spec.dynamic_shared_bytes > kMaxSharedBytesPerBlock) {
    return Error("kernel {}: {} bytes of shared memory exceed {}", spec.name,
                 spec.static_shared_bytes + spec.dynamic_shared_bytes, kMaxSharedBytesPerBlock);
  }
  if (!options.run_ptxas) return kernel;
  std::optional<std::string> ptxas = FindPtxas(options.ptxas_path);
  if (!ptxas) {
    if (options.require_ptxas) return Error("kernel {}: ptxas not found", spec.name);
    return kernel;
  }
  ASSIGN_OR_RETURN(PtxasInfo info, RunPtxas(*ptxas, kernel.ptx, spec.name, options.target));
  kernel.ptxas = std::move(info);
  return kernel;
}

StatusOr<CompiledKernels> CompileFusions(const ir::Module& module, const CodegenOptions& options) {
  RETURN_IF_ERROR(CheckTarget(options.target));
  if (module.entry() == nullptr) return Error("module {}: no entry computation", module.name());
  CompiledKernels result;
  std::set<std::string> names;
  for (const auto& inst : module.entry()->instructions()) {
    if (inst->opcode() != ir::Opcode::kFusion) continue;
    std::string reason = UnsupportedReason(*inst);
    if (!reason.empty()) {
      result.skipped.push_back({inst->name(), inst->attrs().fusion_kind, reason});
      continue;
    }
    std::string name = SanitizeName(inst->name());
    for (int i = 1; names.count(name); ++i)
      name = fmt::format("{}_{}", SanitizeName(inst->name()), i);
    names.insert(name);
    ASSIGN_OR_RETURN(CompiledKernel kernel, CompileFusion(*inst, name, options));
    result.kernels.push_back(std::move(kernel));
  }
  return result;
}

}  // namespace gptc::codegen
