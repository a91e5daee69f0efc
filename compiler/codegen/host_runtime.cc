#include "compiler/codegen/host_runtime.h"

#include "llvm/IR/Module.h"

namespace gptc::codegen {
namespace {

// Metadata on the loads the rewriter adds itself.
constexpr const char* kInternalMetadata = "gptc.emu.internal";

}  // namespace

llvm::StructType* RuntimeType(llvm::LLVMContext& ctx) {
  // The ABI version, then a function pointer per field.
  std::vector<llvm::Type*> fields(kNumRuntimeFields, llvm::PointerType::get(ctx, 0));
  fields[kAbiVersionField] = llvm::Type::getInt32Ty(ctx);
  return llvm::StructType::get(ctx, fields);
}

void MarkInternal(llvm::Instruction* inst) {
  inst->setMetadata(kInternalMetadata, llvm::MDNode::get(inst->getContext(), {}));
}

bool IsInternal(const llvm::Instruction& inst) {
  return inst.getMetadata(kInternalMetadata) != nullptr;
}

llvm::Value* CallRuntime(llvm::IRBuilder<>& b, llvm::GlobalVariable* runtime, RuntimeField field,
                         llvm::FunctionType* type, llvm::ArrayRef<llvm::Value*> args) {
  llvm::Type* ptr = b.getPtrTy();
  llvm::LoadInst* table = b.CreateLoad(ptr, runtime, "emu.runtime");
  llvm::Value* slot = b.CreateStructGEP(RuntimeType(b.getContext()), table, field);
  llvm::LoadInst* fn = b.CreateLoad(ptr, slot);
  MarkInternal(table);
  MarkInternal(fn);
  return b.CreateCall(type, fn, args);
}

}  // namespace gptc::codegen
