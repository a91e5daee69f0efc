#include "compiler/codegen/host_warpgroup.h"

#include <algorithm>
#include <set>
#include <vector>

#include "compiler/codegen/host_runtime.h"
#include "compiler/program/emu_abi.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Module.h"

namespace gptc::codegen {
namespace {

namespace emu = program::emu;

using llvm::IRBuilder;
using llvm::Type;
using llvm::Value;

// The warpgroup asm `call` is, or none.
std::optional<WarpgroupAsm> Recognize(const llvm::CallInst& call) {
  if (!call.isInlineAsm()) return std::nullopt;
  const auto* a = llvm::cast<llvm::InlineAsm>(call.getCalledOperand());
  return RecognizeWarpgroupAsm(a->getAsmString(), a->getConstraintString());
}

// The 32-bit words of `v` (any first-class type), for a check of each.
Status Words(IRBuilder<>& b, Value* v, std::vector<Value*>& out) {
  Type* t = v->getType();
  if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(t)) {
    for (unsigned i = 0; i < vt->getNumElements(); ++i) {
      RETURN_IF_ERROR(Words(b, b.CreateExtractElement(v, i), out));
    }
    return Status::Ok();
  }
  if (t->isStructTy() || t->isArrayTy()) {
    const unsigned n = t->isStructTy() ? t->getStructNumElements()
                                       : static_cast<unsigned>(t->getArrayNumElements());
    for (unsigned i = 0; i < n; ++i) RETURN_IF_ERROR(Words(b, b.CreateExtractValue(v, {i}), out));
    return Status::Ok();
  }
  if (t->isPointerTy()) v = b.CreatePtrToInt(v, b.getInt64Ty()), t = v->getType();
  const unsigned bits = t->getPrimitiveSizeInBits();
  if (bits == 0 || (bits > 32 && bits % 32 != 0)) {
    return Error("host code: a wgmma accumulator reaches a value of {} bits, which has no check",
                 bits);
  }
  Value* x = b.CreateBitCast(v, b.getIntNTy(bits));
  if (bits < 32) {
    out.push_back(b.CreateZExt(x, b.getInt32Ty()));
    return Status::Ok();
  }
  for (unsigned at = 0; at < bits; at += 32) {
    out.push_back(b.CreateTrunc(b.CreateLShr(x, at), b.getInt32Ty()));
  }
  return Status::Ok();
}

}  // namespace

HostWarpgroup::HostWarpgroup(llvm::Module& m, llvm::GlobalVariable* runtime)
    : m_(m), runtime_(runtime), scratch_words_(emu::kWgmmaMaxOperands) {
  for (llvm::Function& f : m) {
    for (llvm::Instruction& inst : llvm::instructions(f)) {
      auto* call = llvm::dyn_cast<llvm::CallInst>(&inst);
      if (call == nullptr) continue;
      if (std::optional<WarpgroupAsm> wg = Recognize(*call);
          wg && wg->kind == WarpgroupAsm::Kind::kRegisterFence) {
        scratch_words_ = std::max(scratch_words_, static_cast<uint32_t>(wg->count));
      }
    }
  }
}

std::pair<Value*, Value*> HostWarpgroup::Scratch(llvm::Function* f) {
  auto [it, inserted] = scratch_.try_emplace(f);
  if (inserted) {
    IRBuilder<> entry(&*f->getEntryBlock().getFirstInsertionPt());
    Type* i32 = entry.getInt32Ty();
    it->second = {entry.CreateAlloca(llvm::ArrayType::get(i32, scratch_words_)),
                  entry.CreateAlloca(llvm::ArrayType::get(i32, 128))};
  }
  return it->second;
}

// Note [wgmma registers]: from every wgmma's result, through the
// instructions that only move values, to the instructions that take them;
// those other than a wgmma's C and a register fence get a check before.
Status HostWarpgroup::GuardAccumulators() {
  std::vector<Value*> work;
  for (llvm::Function& f : m_) {
    for (llvm::Instruction& inst : llvm::instructions(f)) {
      auto* call = llvm::dyn_cast<llvm::CallInst>(&inst);
      std::optional<WarpgroupAsm> wg = call != nullptr ? Recognize(*call) : std::nullopt;
      if (wg && wg->kind == WarpgroupAsm::Kind::kWgmma) work.push_back(call);
    }
  }
  std::set<Value*> seen(work.begin(), work.end());
  std::vector<std::pair<llvm::Instruction*, unsigned>> reads;
  while (!work.empty()) {
    Value* v = work.back();
    work.pop_back();
    for (llvm::Use& use : v->uses()) {
      auto* user = llvm::cast<llvm::Instruction>(use.getUser());
      const unsigned at = use.getOperandNo();
      bool moves = llvm::isa<llvm::PHINode, llvm::ExtractValueInst, llvm::InsertValueInst,
                             llvm::BitCastInst, llvm::FreezeInst, llvm::ShuffleVectorInst>(user);
      moves = moves || (llvm::isa<llvm::SelectInst>(user) && at > 0) ||
              (llvm::isa<llvm::ExtractElementInst>(user) && at == 0) ||
              (llvm::isa<llvm::InsertElementInst>(user) && at < 2);
      if (moves) {
        if (seen.insert(user).second) work.push_back(user);
        continue;
      }
      if (auto* call = llvm::dyn_cast<llvm::CallInst>(user)) {
        if (std::optional<WarpgroupAsm> wg = Recognize(*call)) {
          const unsigned c_at = (wg->wgmma.register_a ? emu::kWgmmaARegs : 1) + 2;
          if (wg->kind == WarpgroupAsm::Kind::kRegisterFence ||
              (wg->kind == WarpgroupAsm::Kind::kWgmma && at >= c_at)) {
            continue;
          }
        }
      }
      reads.push_back({user, at});
    }
  }
  auto* type = llvm::FunctionType::get(
      Type::getVoidTy(m_.getContext()),
      {Type::getInt32Ty(m_.getContext()), Type::getInt32Ty(m_.getContext())}, false);
  for (auto [user, at] : reads) {
    IRBuilder<> b(user);
    std::vector<Value*> words;
    RETURN_IF_ERROR(Words(b, user->getOperand(at), words));
    const uint32_t site = static_cast<uint32_t>(reads_++);
    for (Value* w : words) CallRuntime(b, runtime_, kWgmmaReadField, type, {w, b.getInt32(site)});
  }
  return Status::Ok();
}

StatusOr<Value*> HostWarpgroup::Emulate(llvm::CallInst& call, const WarpgroupAsm& wg) {
  using Kind = WarpgroupAsm::Kind;
  IRBuilder<> b(&call);
  Type* i32 = b.getInt32Ty();
  auto [in, out] = Scratch(call.getFunction());
  auto* warpgroup =
      llvm::FunctionType::get(b.getVoidTy(), {i32, i32, b.getPtrTy(), i32, i32}, false);
  static const std::map<Kind, emu::WarpgroupKind> kKinds = {
      {Kind::kFence, emu::kWgmmaFence},
      {Kind::kCommit, emu::kWgmmaCommit},
      {Kind::kWait, emu::kWgmmaWait},
      {Kind::kFenceProxyAsync, emu::kFenceProxyAsync}};
  if (auto it = kKinds.find(wg.kind); it != kKinds.end()) {
    CallRuntime(b, runtime_, kWarpgroupField, warpgroup,
                {b.getInt32(it->second), b.getInt32(wg.kind == Kind::kWait ? wg.count : 0),
                 llvm::ConstantPointerNull::get(b.getPtrTy()), b.getInt32(0),
                 b.getInt32(sites_[static_cast<int>(wg.kind)]++)});
    ++others_;
    return static_cast<Value*>(nullptr);
  }
  auto* array = llvm::ArrayType::get(i32, scratch_words_);
  uint32_t word = 0;
  auto put = [&](Value* v) {
    MarkInternal(b.CreateStore(v, b.CreateConstGEP2_32(array, in, 0, word++)));
  };
  // The result (a float or a struct of them) loaded from `from`.
  auto result = [&](Value* from, llvm::ArrayType* type) -> Value* {
    auto reg = [&](unsigned i) {
      llvm::LoadInst* bits = b.CreateLoad(i32, b.CreateConstGEP2_32(type, from, 0, i));
      MarkInternal(bits);
      return b.CreateBitCast(bits, b.getFloatTy());
    };
    auto* st = llvm::dyn_cast<llvm::StructType>(call.getType());
    if (st == nullptr) return reg(0);
    Value* v = llvm::PoisonValue::get(st);
    for (unsigned i = 0; i < st->getNumElements(); ++i) v = b.CreateInsertValue(v, reg(i), {i});
    return v;
  };
  if (wg.kind == Kind::kRegisterFence) {
    for (unsigned i = 0; i < call.arg_size(); ++i) put(b.CreateBitCast(call.getArgOperand(i), i32));
    CallRuntime(b, runtime_, kWarpgroupField, warpgroup,
                {b.getInt32(emu::kWgmmaRegisterFence), b.getInt32(0), in,
                 b.getInt32(static_cast<uint32_t>(call.arg_size())),
                 b.getInt32(sites_[static_cast<int>(wg.kind)]++)});
    ++others_;
    return result(in, array);
  }
  // A wgmma: A (4 registers or a descriptor), B's descriptor, scale-d, C.
  const WgmmaForm& form = wg.wgmma;
  const unsigned expected =
      (form.register_a ? emu::kWgmmaARegs : 1) + 2 + static_cast<unsigned>(form.accumulators());
  if (call.arg_size() != expected) {
    return Error("host code: {} asm with {} operands, not {}", form.Mnemonic(), call.arg_size(),
                 expected);
  }
  for (unsigned i = 0; i < call.arg_size(); ++i) {
    Value* v = call.getArgOperand(i);
    if (v->getType()->isIntegerTy(64)) {
      put(b.CreateTrunc(v, i32));
      put(b.CreateTrunc(b.CreateLShr(v, 32), i32));
    } else {
      put(b.CreateBitCast(v, i32));
    }
  }
  auto* type =
      llvm::FunctionType::get(b.getVoidTy(), {i32, b.getPtrTy(), b.getPtrTy(), i32}, false);
  CallRuntime(b, runtime_, kWgmmaField, type,
              {b.getInt32(form.EmuOp()), in, out, b.getInt32(static_cast<uint32_t>(wgmmas_++))});
  return result(out, llvm::ArrayType::get(i32, 128));
}

void HostWarpgroup::RebaseSharedIntegers() {
  for (llvm::Function& f : m_) {
    std::vector<llvm::Instruction*> casts;
    for (llvm::Instruction& inst : llvm::instructions(f)) {
      if (auto* p = llvm::dyn_cast<llvm::PtrToIntInst>(&inst);
          p != nullptr && p->getPointerAddressSpace() == 3) {
        casts.push_back(p);
      } else if (auto* q = llvm::dyn_cast<llvm::IntToPtrInst>(&inst);
                 q != nullptr && q->getAddressSpace() == 3) {
        casts.push_back(q);
      }
    }
    if (casts.empty()) continue;
    IRBuilder<> entry(&*f.getEntryBlock().getFirstInsertionPt());
    auto* shared = llvm::FunctionType::get(entry.getPtrTy(), {}, false);
    Value* base = entry.CreatePtrToInt(CallRuntime(entry, runtime_, kSharedMemoryField, shared, {}),
                                       entry.getInt64Ty());
    for (llvm::Instruction* cast : casts) {
      IRBuilder<> b(cast);
      Value* replacement = nullptr;
      if (llvm::isa<llvm::PtrToIntInst>(cast)) {
        Value* offset = b.CreateSub(b.CreatePtrToInt(cast->getOperand(0), b.getInt64Ty()), base);
        replacement = b.CreateZExtOrTrunc(offset, cast->getType());
      } else {
        Value* at = b.CreateAdd(b.CreateZExtOrTrunc(cast->getOperand(0), b.getInt64Ty()), base);
        replacement = b.CreateIntToPtr(at, cast->getType());
      }
      cast->replaceAllUsesWith(replacement);
      cast->eraseFromParent();
    }
  }
}

}  // namespace gptc::codegen
