#include "compiler/codegen/lowering.h"

#include <map>
#include <memory>
#include <mutex>

#include "compiler/codegen/host_lowering.h"
#include "compiler/codegen/kernel_emitter.h"
#include "compiler/codegen/wgmma_asm.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Linker/Linker.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Transforms/IPO/Internalize.h"
#include "llvm/Transforms/Utils/Cloning.h"
#include "llvm/Transforms/Vectorize/LoadStoreVectorizer.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

namespace gptc::codegen {
namespace {

constexpr const char* kTriple = "nvptx64-nvidia-cuda";
constexpr const char* kPtxFeatures = "+ptx85";  // PTX ISA 8.5: LLVM 19's newest, ptxas 12.4+

void InitializeNvptx() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

// libdevice's bitcode, read once per path.
StatusOr<llvm::MemoryBufferRef> Libdevice(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<llvm::MemoryBuffer>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& buffer = cache[path];
  if (!buffer) {
    auto file = llvm::MemoryBuffer::getFile(path);
    if (!file) return Error("libdevice {}: {}", path, file.getError().message());
    buffer = std::move(*file);
  }
  return buffer->getMemBufferRef();
}

// Collects MLIR error diagnostics into one line.
class DiagnosticCollector {
 public:
  explicit DiagnosticCollector(mlir::MLIRContext& ctx)
      : handler_(&ctx, [this](mlir::Diagnostic& d) {
          if (d.getSeverity() == mlir::DiagnosticSeverity::Error && message_.empty()) {
            message_ = d.str();
          }
          return mlir::success();
        }) {}
  const std::string& message() const { return message_; }

 private:
  std::string message_;
  mlir::ScopedDiagnosticHandler handler_;
};

std::string Print(mlir::Operation* op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->print(os);
  return text;
}

// The warpgroup instructions (wgmma_asm.h) are .aligned: no pass may move
// one into or out of control flow, as none may a barrier (LLVM has no
// intrinsics for them, whose attributes would say so).
void MarkWarpgroupAsmConvergent(llvm::Module& module) {
  for (llvm::Function& f : module) {
    for (llvm::Instruction& inst : llvm::instructions(f)) {
      auto* call = llvm::dyn_cast<llvm::CallInst>(&inst);
      if (call == nullptr || !call->isInlineAsm()) continue;
      const auto* a = llvm::cast<llvm::InlineAsm>(call->getCalledOperand());
      if (RecognizeWarpgroupAsm(a->getAsmString(), a->getConstraintString())) {
        call->addFnAttr(llvm::Attribute::Convergent);
      }
    }
  }
}

StatusOr<std::string> CompileLlvmModule(llvm::Module& module, const std::string& kernel_name,
                                        const CodegenOptions& options, std::string* llvm_ir,
                                        std::optional<HostKernel>* host) {
  InitializeNvptx();
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kTriple, error);
  if (target == nullptr) return Error("NVPTX target: {}", error);
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      kTriple, options.target, kPtxFeatures, llvm::TargetOptions(), llvm::Reloc::Static,
      std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (machine == nullptr) return Error("NVPTX target: no target machine for {}", options.target);
  module.setTargetTriple(kTriple);
  module.setDataLayout(machine->createDataLayout());

  ASSIGN_OR_RETURN(llvm::MemoryBufferRef bitcode, Libdevice(options.libdevice_path));
  auto libdevice = llvm::getLazyBitcodeModule(bitcode, module.getContext());
  if (!libdevice) {
    return Error("libdevice {}: {}", options.libdevice_path, llvm::toString(libdevice.takeError()));
  }
  (*libdevice)->setTargetTriple(kTriple);
  (*libdevice)->setDataLayout(module.getDataLayout());
  if (llvm::Linker::linkModules(module, std::move(*libdevice), llvm::Linker::LinkOnlyNeeded)) {
    return Error("libdevice {}: linking failed", options.libdevice_path);
  }
  MarkWarpgroupAsmConvergent(module);
  llvm::internalizeModule(module,
                          [&](const llvm::GlobalValue& gv) { return gv.getName() == kernel_name; });
  // libdevice asks __nvvm_reflect("__CUDA_FTZ"): keep denormals (as nvcc's default).
  module.addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", uint32_t{0});
  if (llvm_ir != nullptr) {
    llvm::raw_string_ostream os(*llvm_ir);
    module.print(os, nullptr);
  }

  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder builder(machine.get());
  builder.registerModuleAnalyses(mam);
  builder.registerCGSCCAnalyses(cgam);
  builder.registerFunctionAnalyses(fam);
  builder.registerLoopAnalyses(lam);
  builder.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager passes =
      builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  passes.run(module, mam);
  if (host != nullptr) {
    // Note [host kernels]: the module as the NVPTX backend receives it,
    // with the neighbouring loads and stores merged as that backend's IR
    // passes merge them first (with its cost model), so that the emulator
    // sees the PTX's memory instructions (Note [emulated memory counters]
    // in runtime/emu/grid_runner.h).
    std::unique_ptr<llvm::Module> copy = llvm::CloneModule(module);
    llvm::FunctionPassManager merge;
    merge.addPass(llvm::LoadStoreVectorizerPass());
    for (llvm::Function& f : *copy) {
      if (!f.isDeclaration()) merge.run(f, fam);
    }
    ASSIGN_OR_RETURN(*host,
                     CompileForHost(*copy, kernel_name, options.host_symbol_prefix + kernel_name));
  }

  llvm::SmallString<0> ptx;
  llvm::raw_svector_ostream os(ptx);
  llvm::legacy::PassManager codegen;
  if (machine->addPassesToEmitFile(codegen, os, nullptr, llvm::CodeGenFileType::AssemblyFile)) {
    return Error("NVPTX target cannot emit PTX");
  }
  codegen.run(module);
  return std::string(ptx.str());
}

}  // namespace

std::unique_ptr<KernelEmitter> MakeEmitter(EmitterKind kind, AttentionMma attention_mma) {
  switch (kind) {
    case EmitterKind::kLoop:
      return MakeLoopEmitter();
    case EmitterKind::kRowReduction:
      return MakeRowReductionEmitter();
    case EmitterKind::kColumnReduction:
      return MakeColumnReductionEmitter();
    case EmitterKind::kColumnReductionPartials:
      return MakeColumnReductionPartialsEmitter();
    case EmitterKind::kColumnReductionFinal:
      return MakeColumnReductionFinalEmitter();
    case EmitterKind::kGather:
      return MakeGatherEmitter();
    case EmitterKind::kScatterAddInit:
      return MakeScatterAddInitEmitter();
    case EmitterKind::kScatterAdd:
      return MakeScatterAddEmitter();
    case EmitterKind::kAttention:
      return MakeAttentionEmitter(attention_mma);
    case EmitterKind::kAttentionBackward:
      return MakeAttentionBackwardEmitter(/*keys=*/false, attention_mma);
    case EmitterKind::kAttentionBackwardKeys:
      return MakeAttentionBackwardEmitter(/*keys=*/true, attention_mma);
    case EmitterKind::kMixedReductionRows:
      return MakeMixedReductionRowsEmitter();
    case EmitterKind::kMixedReductionColumns:
      return MakeMixedReductionColumnsEmitter();
    default:
      return nullptr;
  }
}

namespace {

// A context with every dialect the emitters use, their LLVM IR translations
// loaded, and no threads (kernels compile on CompileFusions' threads).
std::unique_ptr<mlir::MLIRContext> MakeContext() {
  mlir::DialectRegistry registry;
  registry.insert<mlir::arith::ArithDialect, mlir::cf::ControlFlowDialect, mlir::func::FuncDialect,
                  mlir::gpu::GPUDialect, mlir::LLVM::LLVMDialect, mlir::math::MathDialect,
                  mlir::memref::MemRefDialect, mlir::NVVM::NVVMDialect, mlir::scf::SCFDialect>();
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerGPUDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
  mlir::registerNVVMDialectTranslation(registry);
  auto ctx = std::make_unique<mlir::MLIRContext>(registry, mlir::MLIRContext::Threading::DISABLED);
  ctx->loadAllAvailableDialects();
  return ctx;
}

// Verifies `module` and lowers kernel `kernel_name` of its `gpu_module` to
// PTX (and the host, with options.emit_host) into `lowered`.
Status LowerGpuModule(mlir::MLIRContext& ctx, mlir::ModuleOp module,
                      mlir::gpu::GPUModuleOp gpu_module, const std::string& kernel_name,
                      const std::string& subject, const CodegenOptions& options,
                      const DiagnosticCollector& diagnostics, LoweredKernel& lowered) {
  if (mlir::failed(mlir::verify(module))) {
    return Error("{}: emitted invalid MLIR: {}", subject, diagnostics.message());
  }
  mlir::PassManager pm(&ctx);
  pm.addPass(mlir::createConvertSCFToCFPass());
  mlir::ConvertGpuOpsToNVVMOpsOptions nvvm_options;
  nvvm_options.indexBitwidth = 32;
  pm.addNestedPass<mlir::gpu::GPUModuleOp>(mlir::createConvertGpuOpsToNVVMOps(nvvm_options));
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
  if (mlir::failed(pm.run(module))) {
    return Error("{}: lowering to NVVM failed: {}", subject, diagnostics.message());
  }

  llvm::LLVMContext llvm_ctx;
  std::unique_ptr<llvm::Module> llvm_module =
      mlir::translateModuleToLLVMIR(gpu_module, llvm_ctx, kernel_name);
  if (llvm_module == nullptr) {
    return Error("{}: translation to LLVM IR failed: {}", subject, diagnostics.message());
  }
  StatusOr<std::string> ptx = CompileLlvmModule(*llvm_module, kernel_name, options,
                                                options.keep_llvm ? &lowered.llvm_ir : nullptr,
                                                options.emit_host ? &lowered.host : nullptr);
  if (!ptx.ok()) return ptx.status().WithPrefix(subject);
  lowered.ptx = std::move(*ptx);
  return Status::Ok();
}

}  // namespace

StatusOr<LoweredKernel> EmitAndLower(const ir::Instruction& fusion, EmitterKind kind,
                                     const std::string& kernel_name,
                                     const CodegenOptions& options) {
  const std::string subject = fmt::format("kernel {} (%{})", kernel_name, fusion.name());
  std::unique_ptr<KernelEmitter> emitter = MakeEmitter(kind, options.attention_mma);
  if (emitter == nullptr) return Error("{}: emitter not implemented yet", subject);

  std::unique_ptr<mlir::MLIRContext> ctx = MakeContext();
  DiagnosticCollector diagnostics(*ctx);
  mlir::OpBuilder b(ctx.get());
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(b.getUnknownLoc());
  (*module)->setAttr(mlir::gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());
  b.setInsertionPointToEnd(module->getBody());
  auto gpu_module = b.create<mlir::gpu::GPUModuleOp>(b.getUnknownLoc(), "kernels");

  LoweredKernel lowered;
  StatusOr<KernelSpec> spec = emitter->Emit(fusion, kernel_name, gpu_module);
  if (!spec.ok()) return spec.status().WithPrefix(fmt::format("kernel {}", kernel_name));
  lowered.spec = std::move(*spec);
  if (options.keep_mlir) lowered.mlir = Print(*module);
  RETURN_IF_ERROR(LowerGpuModule(*ctx, *module, gpu_module, kernel_name, subject, options,
                                 diagnostics, lowered));
  return lowered;
}

StatusOr<LoweredKernel> LowerMlirText(const std::string& mlir_text, const std::string& kernel_name,
                                      const CodegenOptions& options) {
  const std::string subject = fmt::format("kernel {}", kernel_name);
  std::unique_ptr<mlir::MLIRContext> ctx = MakeContext();
  DiagnosticCollector diagnostics(*ctx);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(mlir_text, ctx.get());
  if (!module) return Error("{}: cannot parse its MLIR: {}", subject, diagnostics.message());
  mlir::gpu::GPUModuleOp gpu_module;
  module->walk([&](mlir::gpu::GPUModuleOp m) {
    if (m.lookupSymbol(kernel_name) != nullptr) gpu_module = m;
  });
  if (!gpu_module) return Error("{}: no gpu.module holds it", subject);
  LoweredKernel lowered;
  lowered.spec.name = kernel_name;
  if (options.keep_mlir) lowered.mlir = Print(*module);
  RETURN_IF_ERROR(LowerGpuModule(*ctx, *module, gpu_module, kernel_name, subject, options,
                                 diagnostics, lowered));
  return lowered;
}

}  // namespace gptc::codegen
