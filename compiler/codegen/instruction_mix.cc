#include "compiler/codegen/instruction_mix.h"

#include <optional>
#include <string_view>
#include <utility>

#include "compiler/codegen/wgmma_asm.h"
#include "llvm/Analysis/ValueTracking.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/BasicBlock.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/IntrinsicInst.h"

namespace gptc::codegen {
namespace {

namespace emu = program::emu;

// Elements of a vector type (1 for a scalar): a <2 x float> fadd is two
// instructions in PTX.
uint32_t Lanes(const llvm::Type* type) {
  if (const auto* v = llvm::dyn_cast<llvm::FixedVectorType>(type)) return v->getNumElements();
  return 1;
}

// A memory access's class, or none for the thread's own stack (local
// variables become registers or local memory, not a global request).
std::optional<emu::InstructionClass> AccessClass(const llvm::Value* pointer) {
  const unsigned space = pointer->getType()->getPointerAddressSpace();
  if (space == 3) return emu::kSharedMemoryClass;
  if (space == 5 || llvm::isa<llvm::AllocaInst>(llvm::getUnderlyingObject(pointer, 0))) {
    return std::nullopt;
  }
  return emu::kGlobalMemoryClass;
}

// Note [IEEE division sequences]: an f32 division or square root that must
// round correctly (no `arcp`/`afn` flag: div.rn.f32, sqrt.rn.f32 in PTX) is
// not one machine instruction: ptxas expands it to a reciprocal (or
// reciprocal square root) estimate on the special-function unit, Newton
// refinements as fused multiply-adds, a range check and its branch to a slow
// path for denormal and huge operands; eight instructions on the fast path
// (cuobjdump -sass of a kernel shows them). Counted as one, the
// cross-entropy kernel, which divided every logit by its row's sum, counted
// a sixth fewer instructions than it issues. The slow path is not counted:
// the step's operands do not take it.
constexpr uint32_t kIeeeSequence = 8;

// Whether `inst` is one of those sequences.
bool IsIeeeSequence(const llvm::Instruction& inst) {
  if (!inst.getType()->getScalarType()->isFloatTy()) return false;
  if (inst.getOpcode() == llvm::Instruction::FDiv) {
    return !inst.hasAllowReciprocal() && !inst.hasApproxFunc();
  }
  const auto* call = llvm::dyn_cast<llvm::IntrinsicInst>(&inst);
  return call != nullptr && call->getIntrinsicID() == llvm::Intrinsic::sqrt &&
         !inst.hasApproxFunc();
}

// The class of a call, by its callee: NVVM intrinsics by their family, the
// generic LLVM intrinsics by their type; bookkeeping intrinsics count nothing.
std::optional<emu::InstructionClass> CallClass(const llvm::CallInst& call) {
  if (call.isInlineAsm()) {
    const auto* a = llvm::cast<llvm::InlineAsm>(call.getCalledOperand());
    const std::optional<WarpgroupAsm> wg =
        RecognizeWarpgroupAsm(a->getAsmString(), a->getConstraintString());
    if (!wg) return emu::kFloatClass;  // libdevice's rcp.approx
    if (wg->kind == WarpgroupAsm::Kind::kWgmma) return emu::kMmaClass;
    // Note [wgmma registers]: the register fence selects no instruction.
    if (wg->kind == WarpgroupAsm::Kind::kRegisterFence) return std::nullopt;
    return emu::kControlClass;
  }
  const llvm::Function* callee = call.getCalledFunction();
  if (callee == nullptr || !callee->isIntrinsic()) return emu::kControlClass;
  const std::string_view name(callee->getName().data(), callee->getName().size());
  auto starts = [&](std::string_view prefix) { return name.starts_with(prefix); };
  if (starts("llvm.lifetime.") || starts("llvm.assume") || starts("llvm.dbg.") ||
      starts("llvm.experimental.noalias") || starts("llvm.invariant.")) {
    return std::nullopt;
  }
  if (starts("llvm.nvvm.barrier") || starts("llvm.nvvm.bar.")) return emu::kBarrierClass;
  if (starts("llvm.nvvm.shfl.")) return emu::kShuffleClass;
  if (starts("llvm.nvvm.mma.")) return emu::kMmaClass;
  if (starts("llvm.nvvm.ldmatrix.")) return emu::kSharedMemoryClass;
  if (starts("llvm.nvvm.cp.async.commit") || starts("llvm.nvvm.cp.async.wait")) {
    return emu::kControlClass;
  }
  if (starts("llvm.nvvm.cp.async.")) return emu::kGlobalMemoryClass;
  if (starts("llvm.nvvm.read.ptx.sreg.")) return emu::kIntegerClass;
  const llvm::Type* type = call.getType();
  if (type->isVoidTy() && call.arg_size() > 0) type = call.getArgOperand(0)->getType();
  return type->getScalarType()->isFloatingPointTy() ? emu::kFloatClass : emu::kIntegerClass;
}

// Note [emulated instruction counters]: the class of `inst` and how many
// machine instructions it stands for (0: none).
std::pair<emu::InstructionClass, uint32_t> ClassOf(const llvm::Instruction& inst) {
  using llvm::Instruction;
  constexpr std::pair<emu::InstructionClass, uint32_t> kNothing{emu::kIntegerClass, 0};
  const llvm::Value* pointer = llvm::getLoadStorePointerOperand(&inst);
  if (const auto* rmw = llvm::dyn_cast<llvm::AtomicRMWInst>(&inst)) {
    pointer = rmw->getPointerOperand();
  } else if (const auto* cas = llvm::dyn_cast<llvm::AtomicCmpXchgInst>(&inst)) {
    pointer = cas->getPointerOperand();
  }
  if (pointer != nullptr) {
    std::optional<emu::InstructionClass> c = AccessClass(pointer);
    return c ? std::pair{*c, 1u} : kNothing;
  }
  if (IsIeeeSequence(inst)) return {emu::kFloatClass, kIeeeSequence * Lanes(inst.getType())};
  if (const auto* call = llvm::dyn_cast<llvm::CallInst>(&inst)) {
    std::optional<emu::InstructionClass> c = CallClass(*call);
    return c ? std::pair{*c, 1u} : kNothing;
  }
  if (const auto* gep = llvm::dyn_cast<llvm::GetElementPtrInst>(&inst)) {
    return {emu::kIntegerClass, gep->hasAllConstantIndices() ? 0u : 1u};
  }
  switch (inst.getOpcode()) {
    case Instruction::PHI:
    case Instruction::BitCast:
    case Instruction::AddrSpaceCast:
    case Instruction::PtrToInt:
    case Instruction::IntToPtr:
    case Instruction::Alloca:
    case Instruction::Freeze:
    case Instruction::Unreachable:
    case Instruction::ExtractValue:
    case Instruction::InsertValue:
    case Instruction::ExtractElement:
    case Instruction::InsertElement:
    case Instruction::ShuffleVector:
      return kNothing;
    case Instruction::Br:
    case Instruction::Switch:
    case Instruction::Ret:
      return {emu::kControlClass, 1};
    default:
      break;
  }
  const llvm::Type* type = inst.getType();
  const uint32_t lanes = Lanes(type);
  if (llvm::isa<llvm::FCmpInst>(&inst) || llvm::isa<llvm::FPTruncInst>(&inst) ||
      llvm::isa<llvm::FPExtInst>(&inst) || llvm::isa<llvm::FPToSIInst>(&inst) ||
      llvm::isa<llvm::FPToUIInst>(&inst) || llvm::isa<llvm::SIToFPInst>(&inst) ||
      llvm::isa<llvm::UIToFPInst>(&inst)) {
    return {emu::kFloatClass, Lanes(inst.getOperand(0)->getType())};
  }
  return {type->getScalarType()->isFloatingPointTy() ? emu::kFloatClass : emu::kIntegerClass,
          lanes};
}

}  // namespace

InstructionMix BlockMix(const llvm::BasicBlock& block) {
  InstructionMix mix{};
  for (const llvm::Instruction& inst : block) {
    const auto [kind, count] = ClassOf(inst);
    mix[kind] += count;
  }
  return mix;
}

}  // namespace gptc::codegen
