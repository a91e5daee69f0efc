#include "compiler/codegen/host_lowering.h"

#include <functional>
#include <map>
#include <mutex>
#include <optional>

#include "compiler/codegen/host_math.h"
#include "compiler/codegen/host_runtime.h"
#include "compiler/codegen/host_warpgroup.h"
#include "compiler/codegen/instruction_mix.h"
#include "compiler/program/emu_abi.h"
#include "llvm/Analysis/ValueTracking.h"
#include "llvm/AsmParser/Parser.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/ReplaceConstant.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/Transforms/Utils/BasicBlockUtils.h"

namespace gptc::codegen {
namespace {

namespace emu = program::emu;  // the emulator ABI (compiler/program/emu_abi.h)

using llvm::IRBuilder;
using llvm::Type;
using llvm::Value;

void InitializeHost() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

StatusOr<std::unique_ptr<llvm::TargetMachine>> HostMachine() {
  InitializeHost();
  const std::string triple = llvm::sys::getProcessTriple();
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (target == nullptr) return Error("host target {}: {}", triple, error);
  std::unique_ptr<llvm::TargetMachine> machine(
      target->createTargetMachine(triple, "x86-64", "", llvm::TargetOptions(), llvm::Reloc::PIC_,
                                  std::nullopt, llvm::CodeGenOptLevel::Default));
  if (machine == nullptr) return Error("host target {}: no target machine", triple);
  return machine;
}

StatusOr<std::string> EmitObject(llvm::Module& module, llvm::TargetMachine& machine,
                                 const std::string& what) {
  std::string verify;
  llvm::raw_string_ostream verify_os(verify);
  if (llvm::verifyModule(module, &verify_os)) {
    return Error("{}: the host module is invalid: {}", what, verify.substr(0, verify.find('\n')));
  }
  llvm::SmallString<0> object;
  llvm::raw_svector_ostream os(object);
  llvm::legacy::PassManager codegen;
  if (machine.addPassesToEmitFile(codegen, os, nullptr, llvm::CodeGenFileType::ObjectFile)) {
    return Error("{}: the host target cannot emit objects", what);
  }
  codegen.run(module);
  return std::string(object.str());
}

// Round-to-nearest-even f32 -> bf16 of `x` (a float or a vector of floats),
// as compiler/support/float_bits.h's F32ToBF16Bits: NaNs stay quiet NaNs.
Value* TruncateToBF16(IRBuilder<>& b, Value* x) {
  Type* i32 = x->getType()->getWithNewType(b.getInt32Ty());
  Type* i16 = x->getType()->getWithNewType(b.getInt16Ty());
  Type* bf16 = x->getType()->getWithNewType(b.getBFloatTy());
  Value* bits = b.CreateBitCast(x, i32);
  Value* lsb = b.CreateAnd(b.CreateLShr(bits, 16), 1);
  Value* rounded = b.CreateAdd(bits, b.CreateAdd(lsb, llvm::ConstantInt::get(i32, 0x7fff)));
  Value* value = b.CreateTrunc(b.CreateLShr(rounded, 16), i16);
  Value* nan =
      b.CreateOr(b.CreateTrunc(b.CreateLShr(bits, 16), i16), llvm::ConstantInt::get(i16, 0x40));
  Value* is_nan = b.CreateFCmpUNO(x, x);
  return b.CreateBitCast(b.CreateSelect(is_nan, nan, value), bf16);
}

// bf16 -> f32 is exact: the bits shifted into the high half.
Value* ExtendBF16(IRBuilder<>& b, Value* x, Type* to) {
  Type* i16 = x->getType()->getWithNewType(b.getInt16Ty());
  Type* i32 = x->getType()->getWithNewType(b.getInt32Ty());
  Value* bits = b.CreateShl(b.CreateZExt(b.CreateBitCast(x, i16), i32), 16);
  Value* f32 = b.CreateBitCast(bits, x->getType()->getWithNewType(b.getFloatTy()));
  return to->getScalarType()->isFloatTy() ? f32 : b.CreateFPExt(f32, to);
}

class HostRewriter {
 public:
  HostRewriter(llvm::Module& m, std::string kernel)
      : m_(m), ctx_(m.getContext()), kernel_(std::move(kernel)) {}

  Status Run(const std::string& symbol, HostKernel& out);

 private:
  // Loads field `field` of the runtime table (in the function of `b`'s
  // insertion point) and calls it.
  Value* CallRuntime(IRBuilder<>& b, RuntimeField field, llvm::FunctionType* type,
                     llvm::ArrayRef<Value*> args);
  Status ReplaceIntrinsics();
  // One call to an NVVM intrinsic or inline asm: its replacement, or an error.
  StatusOr<Value*> Emulate(llvm::CallInst& call, const std::string& name, bool is_asm);
  StatusOr<Value*> EmulateSpecialRegister(llvm::CallInst& call, const std::string& reg);
  StatusOr<Value*> EmulateShuffle(llvm::CallInst& call, const std::string& name);
  StatusOr<Value*> EmulateMath(llvm::CallInst& call, const std::string& name);
  // An mma (when `mma`) or ldmatrix intrinsic, as emu_abi.h's `op`.
  StatusOr<Value*> EmulateWarpMatrix(llvm::CallInst& call, const std::string& name, bool mma,
                                     uint32_t op);
  Status PlaceSharedMemory(int64_t& bytes);
  Status ExpandBF16();
  Status InstrumentAccesses(int64_t& sites);
  void CountInstructions();
  void StripTargetAttributes();
  void AddWrapper(const std::string& symbol);
  // Errors are prefixed with the kernel by EmitAndLower.
  std::string Subject() const { return "host code"; }

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  std::string kernel_;
  llvm::GlobalVariable* runtime_ = nullptr;  // emu::kRuntimeSymbol
  llvm::GlobalVariable* checks_ = nullptr;   // emu::kChecksSymbol
  int64_t barriers_ = 0, shuffles_ = 0, mmas_ = 0, ldmatrices_ = 0, atomics_ = 0;
  std::optional<HostWarpgroup> warpgroup_;  // the wgmma instructions (host_warpgroup.h)
  // Per function: the stack arrays passing a warp matrix instruction's
  // registers to the emulator and back.
  std::map<llvm::Function*, std::pair<Value*, Value*>> matrix_scratch_;
};

Value* HostRewriter::CallRuntime(IRBuilder<>& b, RuntimeField field, llvm::FunctionType* type,
                                 llvm::ArrayRef<Value*> args) {
  return codegen::CallRuntime(b, runtime_, field, type, args);
}

// Note [emulated intrinsics]
// What each NVVM intrinsic becomes on the host, by the PTX it selects (as
// llc -march=nvptx64 shows): .rn arithmetic is the host's default rounding;
// .approx functions become the exactly rounded host ones (the GPU's differ
// in the last bits: compare with a tolerance); .ftz flushes subnormal inputs
// and results; llvm.nvvm.round.f is cvt.rni (to nearest even, not away from
// zero); saturate clamps to [0, 1] with NaN -> 0; directed rounding
// (.rm/.rp/.rz) calls EmuRuntime::math, which switches the host's rounding
// mode; ff2bf16x2.rn packs two rounded halves (the first operand in the
// upper one). mma.m16n8k16 (bf16 or f16 into f32) and ldmatrix.m8n8 call
// EmuRuntime::mma and ldmatrix, warp-collective like shfl.sync (Note
// [emulated warp matrix operations] in runtime/emu/warp_matrix.h); every
// other mma shape or type is refused. Inline asm is matched by its exact
// text: libdevice's "rcp.approx.ftz.f32 $0,$1;" is a flushed reciprocal,
// and the warpgroup instructions' texts of wgmma_asm.h call the emulator
// (host_warpgroup.h).
StatusOr<Value*> HostRewriter::Emulate(llvm::CallInst& call, const std::string& name, bool is_asm) {
  if (is_asm) {  // matched by its exact text
    IRBuilder<> b(&call);
    auto* asm_value = llvm::cast<llvm::InlineAsm>(call.getCalledOperand());
    const std::string text = asm_value->getAsmString();
    if (std::optional<WarpgroupAsm> wg =
            RecognizeWarpgroupAsm(text, asm_value->getConstraintString())) {
      return warpgroup_->Emulate(call, *wg);
    }
    if (text == "rcp.approx.ftz.f32 $0,$1;" && asm_value->getConstraintString() == "=f,f") {
      return FlushSubnormal(b, b.CreateFDiv(llvm::ConstantFP::get(call.getType(), 1.0),
                                            FlushSubnormal(b, call.getArgOperand(0))));
    }
    return Error("{}: inline asm \"{}\" has no emulation", Subject(), text);
  }
  // Note [emulated warp matrix operations] (runtime/emu/warp_matrix.h).
  static const std::map<llvm::Intrinsic::ID, uint32_t> kMmaOps = {
      {llvm::Intrinsic::nvvm_mma_m16n8k16_row_col_bf16, emu::kMmaM16N8K16Bf16},
      {llvm::Intrinsic::nvvm_mma_m16n8k16_row_col_f32_f32, emu::kMmaM16N8K16F16}};
  static const std::map<llvm::Intrinsic::ID, uint32_t> kLdmatrixOps = {
      {llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x1_b16, 1},
      {llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x2_b16, 2},
      {llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_b16, 4},
      {llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x1_trans_b16, 1 | emu::kLdmatrixTrans},
      {llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x2_trans_b16, 2 | emu::kLdmatrixTrans},
      {llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_trans_b16, 4 | emu::kLdmatrixTrans}};
  if (auto it = kMmaOps.find(call.getIntrinsicID()); it != kMmaOps.end()) {
    return EmulateWarpMatrix(call, name, true, it->second);
  }
  if (auto it = kLdmatrixOps.find(call.getIntrinsicID()); it != kLdmatrixOps.end()) {
    return EmulateWarpMatrix(call, name, false, it->second);
  }
  const std::string sreg_prefix = "llvm.nvvm.read.ptx.sreg.";
  if (name.starts_with(sreg_prefix)) {
    return EmulateSpecialRegister(call, name.substr(sreg_prefix.size()));
  }
  if (name == "llvm.nvvm.barrier0") {
    IRBuilder<> b(&call);
    auto* type = llvm::FunctionType::get(b.getVoidTy(), {b.getInt32Ty()}, false);
    return CallRuntime(b, kBarrierField, type, {b.getInt32(static_cast<uint32_t>(barriers_++))});
  }
  if (name.starts_with("llvm.nvvm.shfl.sync.")) return EmulateShuffle(call, name);
  // Note [emulated cp.async]: the copy completes when it is issued (a load
  // and a store, checked as any other), so commit and wait have nothing to
  // do. A missing wait is then not caught; a missing barrier is, as the
  // shared-memory race it is.
  if (name == "llvm.nvvm.cp.async.cg.shared.global.16" ||
      name == "llvm.nvvm.cp.async.ca.shared.global.16") {
    IRBuilder<> b(&call);
    Type* piece = llvm::FixedVectorType::get(b.getInt8Ty(), 16);
    b.CreateAlignedStore(b.CreateAlignedLoad(piece, call.getArgOperand(1), llvm::Align(16)),
                         call.getArgOperand(0), llvm::Align(16));
    return static_cast<Value*>(nullptr);
  }
  if (name == "llvm.nvvm.cp.async.commit.group" || name == "llvm.nvvm.cp.async.wait.group" ||
      name == "llvm.nvvm.cp.async.wait.all") {
    return static_cast<Value*>(nullptr);
  }
  if (name == "llvm.nvvm.membar.cta" || name == "llvm.nvvm.membar.gl" ||
      name == "llvm.nvvm.membar.sys") {
    // One thread runs at a time and blocks in order: memory is always coherent.
    return static_cast<Value*>(nullptr);
  }
  return EmulateMath(call, name);
}

// %tid.x and the other special registers `reg` (warpsize is a constant).
StatusOr<Value*> HostRewriter::EmulateSpecialRegister(llvm::CallInst& call,
                                                      const std::string& reg) {
  static const std::map<std::string, emu::SpecialRegister> kRegisters = {
      {"tid.x", emu::kTidX},       {"tid.y", emu::kTidY},       {"tid.z", emu::kTidZ},
      {"ntid.x", emu::kNtidX},     {"ntid.y", emu::kNtidY},     {"ntid.z", emu::kNtidZ},
      {"ctaid.x", emu::kCtaidX},   {"ctaid.y", emu::kCtaidY},   {"ctaid.z", emu::kCtaidZ},
      {"nctaid.x", emu::kNctaidX}, {"nctaid.y", emu::kNctaidY}, {"nctaid.z", emu::kNctaidZ},
      {"laneid", emu::kLaneId}};
  IRBuilder<> b(&call);
  if (reg == "warpsize") return static_cast<Value*>(b.getInt32(32));
  auto it = kRegisters.find(reg);
  if (it == kRegisters.end())
    return Error("{}: special register %{} has no emulation", Subject(), reg);
  auto* type = llvm::FunctionType::get(b.getInt32Ty(), {b.getInt32Ty()}, false);
  return CallRuntime(b, kSpecialRegisterField, type, {b.getInt32(it->second)});
}

// llvm.nvvm.shfl.sync.MODE.TYPE: a warp-collective call of the runtime, on
// the value's 32 bits.
StatusOr<Value*> HostRewriter::EmulateShuffle(llvm::CallInst& call, const std::string& name) {
  IRBuilder<> b(&call);
  auto arg = [&](unsigned i) { return call.getArgOperand(i); };
  static const std::map<std::string, emu::ShuffleMode> kModes = {{"up", emu::kShuffleUp},
                                                                 {"down", emu::kShuffleDown},
                                                                 {"bfly", emu::kShuffleBfly},
                                                                 {"idx", emu::kShuffleIdx}};
  std::string rest = name.substr(std::string("llvm.nvvm.shfl.sync.").size());  // "bfly.f32"
  const size_t dot = rest.find('.');
  auto mode = kModes.find(rest.substr(0, dot));
  const std::string type_name = dot == std::string::npos ? "" : rest.substr(dot + 1);
  if (mode == kModes.end() || (type_name != "f32" && type_name != "i32")) {
    return Error("{}: intrinsic {} has no emulation", Subject(), name);
  }
  Value* bits = type_name == "f32" ? b.CreateBitCast(arg(1), b.getInt32Ty()) : arg(1);
  auto* type =
      llvm::FunctionType::get(b.getInt32Ty(), std::vector<Type*>(6, b.getInt32Ty()), false);
  Value* out = CallRuntime(b, kShuffleField, type,
                           {b.getInt32(mode->second), arg(0), bits, arg(2), arg(3),
                            b.getInt32(static_cast<uint32_t>(shuffles_++))});
  return type_name == "f32" ? b.CreateBitCast(out, b.getFloatTy()) : out;
}

// The arithmetic intrinsics of Note [emulated intrinsics], by name: those
// LLVM computes as the GPU does (host_math.h), and the directed roundings
// through the emulator's runtime.
StatusOr<Value*> HostRewriter::EmulateMath(llvm::CallInst& call, const std::string& name) {
  IRBuilder<> b(&call);
  auto arg = [&](unsigned i) { return call.getArgOperand(i); };
  auto ftz = [&](Value* v) { return FlushSubnormal(b, v); };
  auto directed = [&](emu::MathOp op, unsigned args) -> Value* {
    auto* type = llvm::FunctionType::get(
        b.getFloatTy(), {b.getInt32Ty(), b.getFloatTy(), b.getFloatTy(), b.getFloatTy()}, false);
    Value* zero = llvm::ConstantFP::get(b.getFloatTy(), 0.0);
    return CallRuntime(
        b, kMathField, type,
        {b.getInt32(op), arg(0), args > 1 ? arg(1) : zero, args > 2 ? arg(2) : zero});
  };
  // name without "llvm.nvvm.", and whether it flushes subnormals.
  std::string op = name.substr(std::string("llvm.nvvm.").size());
  bool flush = false;
  if (size_t at = op.find(".ftz"); at != std::string::npos) {
    flush = true;
    op.erase(at, 4);
  }
  auto done = [&](Value* v) -> StatusOr<Value*> { return flush ? ftz(v) : v; };
  if (flush) {
    for (unsigned i = 0; i < call.arg_size(); ++i) {
      if (arg(i)->getType()->isFloatingPointTy()) call.setArgOperand(i, ftz(arg(i)));
    }
  }
  if (Value* v = EmulateNearestMath(b, call, op)) return done(v);
  if (call.getType()->isFloatTy()) {
    static const std::map<std::string, std::pair<emu::MathOp, unsigned>> kDirected = {
        {"fma.rm.f", {emu::kFmaRm, 3}},   {"fma.rp.f", {emu::kFmaRp, 3}},
        {"fma.rz.f", {emu::kFmaRz, 3}},   {"add.rm.f", {emu::kAddRm, 2}},
        {"add.rp.f", {emu::kAddRp, 2}},   {"add.rz.f", {emu::kAddRz, 2}},
        {"mul.rm.f", {emu::kMulRm, 2}},   {"mul.rp.f", {emu::kMulRp, 2}},
        {"mul.rz.f", {emu::kMulRz, 2}},   {"div.rm.f", {emu::kDivRm, 2}},
        {"div.rp.f", {emu::kDivRp, 2}},   {"div.rz.f", {emu::kDivRz, 2}},
        {"sqrt.rm.f", {emu::kSqrtRm, 1}}, {"sqrt.rp.f", {emu::kSqrtRp, 1}},
        {"sqrt.rz.f", {emu::kSqrtRz, 1}}};
    if (auto it = kDirected.find(op); it != kDirected.end()) {
      return done(directed(it->second.first, it->second.second));
    }
  }
  return Error("{}: intrinsic {} has no emulation", Subject(), name);
}

// The registers travel through two arrays on the thread's stack: the lane's
// operands (mma: A, B, C as 32-bit words, emu_abi.h), and its result
// registers, which the emulator writes once the whole warp has arrived.
StatusOr<Value*> HostRewriter::EmulateWarpMatrix(llvm::CallInst& call, const std::string& name,
                                                 bool mma, uint32_t op) {
  IRBuilder<> b(&call);
  Type* i32 = b.getInt32Ty();
  llvm::Function* f = call.getFunction();
  auto [scratch, inserted] = matrix_scratch_.try_emplace(f);
  if (inserted) {
    IRBuilder<> entry(&*f->getEntryBlock().getFirstInsertionPt());
    scratch->second = {entry.CreateAlloca(llvm::ArrayType::get(i32, emu::kMmaFragmentRegs)),
                       entry.CreateAlloca(llvm::ArrayType::get(i32, 4))};
  }
  auto [in, out] = scratch->second;
  const llvm::DataLayout& dl = m_.getDataLayout();
  Value* operands = nullptr;  // the fragments, or the row address
  if (mma) {
    if (call.arg_size() != emu::kMmaFragmentRegs) {
      return Error("{}: intrinsic {} has {} operands, not {}", Subject(), name, call.arg_size(),
                   emu::kMmaFragmentRegs);
    }
    for (unsigned i = 0; i < call.arg_size(); ++i) {
      Value* v = call.getArgOperand(i);
      if (dl.getTypeSizeInBits(v->getType()) != 32) {
        return Error("{}: intrinsic {}: operand {} is not a 32-bit register", Subject(), name, i);
      }
      MarkInternal(b.CreateStore(
          b.CreateBitCast(v, i32),
          b.CreateConstGEP2_32(llvm::ArrayType::get(i32, emu::kMmaFragmentRegs), in, 0, i)));
    }
    operands = in;
  } else {
    operands = call.getArgOperand(0);
    if (operands->getType()->getPointerAddressSpace() != 0) {
      operands = b.CreateAddrSpaceCast(operands, b.getPtrTy());
    }
  }
  auto* type =
      llvm::FunctionType::get(b.getVoidTy(), {i32, b.getPtrTy(), b.getPtrTy(), i32}, false);
  const int64_t site = mma ? mmas_++ : ldmatrices_++;
  CallRuntime(b, mma ? kMmaField : kLdmatrixField, type,
              {b.getInt32(op), operands, out, b.getInt32(static_cast<uint32_t>(site))});
  // The result: one register, or a struct of them.
  auto reg = [&](unsigned i, Type* t) {
    llvm::LoadInst* bits =
        b.CreateLoad(i32, b.CreateConstGEP2_32(llvm::ArrayType::get(i32, 4), out, 0, i));
    MarkInternal(bits);
    return b.CreateBitCast(bits, t);
  };
  Type* result = call.getType();
  auto* st = llvm::dyn_cast<llvm::StructType>(result);
  if (st == nullptr) return reg(0, result);
  Value* value = llvm::PoisonValue::get(st);
  for (unsigned i = 0; i < st->getNumElements(); ++i) {
    value = b.CreateInsertValue(value, reg(i, st->getElementType(i)), {i});
  }
  return value;
}

Status HostRewriter::ReplaceIntrinsics() {
  std::vector<llvm::CallInst*> calls;
  for (llvm::Function& f : m_) {
    for (llvm::Instruction& inst : llvm::instructions(f)) {
      auto* call = llvm::dyn_cast<llvm::CallInst>(&inst);
      if (call == nullptr) continue;
      if (call->isInlineAsm()) {
        calls.push_back(call);
      } else if (llvm::Function* callee = call->getCalledFunction();
                 callee != nullptr && callee->getName().starts_with("llvm.nvvm.")) {
        calls.push_back(call);
      }
    }
  }
  for (llvm::CallInst* call : calls) {
    const bool is_asm = call->isInlineAsm();
    const std::string name = is_asm ? "" : call->getCalledFunction()->getName().str();
    ASSIGN_OR_RETURN(Value * replacement, Emulate(*call, name, is_asm));
    if (replacement != nullptr) call->replaceAllUsesWith(replacement);
    call->eraseFromParent();
  }
  for (llvm::Function& f : llvm::make_early_inc_range(m_)) {
    if (f.isDeclaration() && f.getName().starts_with("llvm.nvvm.") && f.use_empty()) {
      f.eraseFromParent();
    }
  }
  return Status::Ok();
}

Status HostRewriter::PlaceSharedMemory(int64_t& bytes) {
  const llvm::DataLayout& dl = m_.getDataLayout();
  std::vector<llvm::GlobalVariable*> shared;
  for (llvm::GlobalVariable& g : m_.globals()) {
    if (g.getAddressSpace() == 3) shared.push_back(&g);
  }
  bytes = 0;
  if (shared.empty()) return Status::Ok();
  std::vector<llvm::Constant*> constants(shared.begin(), shared.end());
  llvm::convertUsersOfConstantsToInstructions(constants);
  // Static variables first (16-byte aligned), then the dynamic shared memory:
  // an extern array of unknown size (its users index past the end).
  std::map<llvm::GlobalVariable*, int64_t> offsets;
  std::vector<llvm::GlobalVariable*> dynamic;
  for (llvm::GlobalVariable* g : shared) {
    const int64_t size = static_cast<int64_t>(dl.getTypeAllocSize(g->getValueType()));
    if (g->isDeclaration() || size == 0) {
      dynamic.push_back(g);
      continue;
    }
    const int64_t align = std::max<int64_t>(16, g->getAlign() ? g->getAlign()->value() : 16);
    bytes = (bytes + align - 1) / align * align;
    offsets[g] = bytes;
    bytes += size;
  }
  bytes = (bytes + 15) / 16 * 16;
  for (llvm::GlobalVariable* g : dynamic) offsets[g] = bytes;
  auto* shared_type = llvm::FunctionType::get(llvm::PointerType::get(ctx_, 0), {}, false);
  for (llvm::Function& f : m_) {
    if (f.isDeclaration()) continue;
    std::optional<Value*> base;
    // One builder for the function: each global's address follows the base
    // (a builder per global would insert before the base).
    IRBuilder<> b(&*f.getEntryBlock().getFirstInsertionPt());
    for (auto& [g, offset] : offsets) {
      std::vector<llvm::Use*> uses;
      for (llvm::Use& u : g->uses()) {
        auto* user = llvm::dyn_cast<llvm::Instruction>(u.getUser());
        if (user == nullptr)
          return Error("{}: a non-instruction use of shared %{}", Subject(), g->getName().str());
        if (user->getFunction() == &f) uses.push_back(&u);
      }
      if (uses.empty()) continue;
      if (!base) base = CallRuntime(b, kSharedMemoryField, shared_type, {});
      Value* at = b.CreateConstGEP1_64(b.getInt8Ty(), *base, offset);
      Value* typed = b.CreateAddrSpaceCast(at, g->getType());
      for (llvm::Use* u : uses) u->set(typed);
    }
  }
  for (llvm::GlobalVariable* g : shared) {
    if (!g->use_empty())
      return Error("{}: shared %{} is still used", Subject(), g->getName().str());
    g->eraseFromParent();
  }
  return Status::Ok();
}

Status HostRewriter::ExpandBF16() {
  std::vector<llvm::Instruction*> casts;
  for (llvm::Function& f : m_) {
    for (llvm::Instruction& inst : llvm::instructions(f)) {
      if (auto* c = llvm::dyn_cast<llvm::CastInst>(&inst)) {
        Type* src = c->getSrcTy()->getScalarType();
        Type* dst = c->getDestTy()->getScalarType();
        if ((c->getOpcode() == llvm::Instruction::FPTrunc && dst->isBFloatTy()) ||
            (c->getOpcode() == llvm::Instruction::FPExt && src->isBFloatTy())) {
          casts.push_back(c);
        }
      }
    }
  }
  for (llvm::Instruction* c : casts) {
    IRBuilder<> b(c);
    Value* x = c->getOperand(0);
    Value* out = nullptr;
    if (c->getOpcode() == llvm::Instruction::FPTrunc) {
      if (!x->getType()->getScalarType()->isFloatTy())
        x = b.CreateFPTrunc(x, x->getType()->getWithNewType(b.getFloatTy()));
      out = TruncateToBF16(b, x);
    } else {
      out = ExtendBF16(b, x, c->getType());
    }
    c->replaceAllUsesWith(out);
    c->eraseFromParent();
  }
  return Status::Ok();
}

Status HostRewriter::InstrumentAccesses(int64_t& sites) {
  const llvm::DataLayout& dl = m_.getDataLayout();
  auto* access_type =
      llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_),
                              {llvm::PointerType::get(ctx_, 0), Type::getInt32Ty(ctx_),
                               Type::getInt32Ty(ctx_), Type::getInt32Ty(ctx_)},
                              false);
  sites = 0;
  for (llvm::Function& f : m_) {
    if (f.isDeclaration()) continue;
    struct Site {
      llvm::Instruction* inst;
      Value* pointer;
      uint64_t bytes;
      uint32_t kind;
    };
    std::vector<Site> list;
    for (llvm::Instruction& inst : llvm::instructions(f)) {
      if (IsInternal(inst)) continue;
      Value* pointer = nullptr;
      Type* type = nullptr;
      uint32_t kind = 0;
      if (auto* load = llvm::dyn_cast<llvm::LoadInst>(&inst)) {
        pointer = load->getPointerOperand(), type = load->getType(), kind = emu::kLoad;
      } else if (auto* store = llvm::dyn_cast<llvm::StoreInst>(&inst)) {
        pointer = store->getPointerOperand();
        type = store->getValueOperand()->getType(), kind = emu::kStore;
      } else if (auto* rmw = llvm::dyn_cast<llvm::AtomicRMWInst>(&inst)) {
        pointer = rmw->getPointerOperand(), type = rmw->getValOperand()->getType();
        kind = emu::kLoad | emu::kStore | emu::kAtomic;
        ++atomics_;
      } else if (auto* cas = llvm::dyn_cast<llvm::AtomicCmpXchgInst>(&inst)) {
        pointer = cas->getPointerOperand(), type = cas->getNewValOperand()->getType();
        kind = emu::kLoad | emu::kStore | emu::kAtomic;
        ++atomics_;
      } else if (auto* mem = llvm::dyn_cast<llvm::MemIntrinsic>(&inst)) {
        return Error("{}: {} has no emulation", Subject(),
                     mem->getCalledFunction()->getName().str());
      } else {
        continue;
      }
      const unsigned space = pointer->getType()->getPointerAddressSpace();
      if (space == 1) {
        kind |= emu::kGlobalSpace;
      } else if (space == 3) {
        kind |= emu::kSharedSpace;
      } else if (space == 0) {
        if (llvm::isa<llvm::AllocaInst>(llvm::getUnderlyingObject(pointer, 0))) continue;
        kind |= emu::kGenericSpace;
      } else if (space == 5) {
        continue;  // a local variable: the thread's own stack
      } else {
        return Error("{}: an access to address space {} has no emulation", Subject(), space);
      }
      list.push_back({&inst, pointer, dl.getTypeStoreSize(type).getFixedValue(), kind});
    }
    if (list.empty()) continue;
    IRBuilder<> entry(&*f.getEntryBlock().getFirstInsertionPt());
    llvm::LoadInst* checks = entry.CreateLoad(entry.getInt8Ty(), checks_, "emu.checks");
    MarkInternal(checks);
    Value* flag = entry.CreateICmpNE(checks, entry.getInt8(0));
    for (const Site& s : list) {
      llvm::Instruction* then = llvm::SplitBlockAndInsertIfThen(flag, s.inst, false);
      IRBuilder<> b(then);
      Value* generic = s.pointer->getType()->getPointerAddressSpace() == 0
                           ? s.pointer
                           : b.CreateAddrSpaceCast(s.pointer, b.getPtrTy());
      CallRuntime(b, kAccessField, access_type,
                  {generic, b.getInt32(static_cast<uint32_t>(s.bytes)), b.getInt32(s.kind),
                   b.getInt32(static_cast<uint32_t>(sites))});
      ++sites;
    }
  }
  return Status::Ok();
}

// Note [emulated instruction counters] in runtime/emu/grid_runner.h: every
// block of the device code, before anything is rewritten for the host,
// reports its mix as it starts (while the checks flag is set). The mixes are
// one constant table of the module.
void HostRewriter::CountInstructions() {
  std::vector<llvm::BasicBlock*> blocks;
  std::vector<llvm::Constant*> rows;
  auto* row_type = llvm::ArrayType::get(Type::getInt32Ty(ctx_), emu::kNumInstructionClasses);
  for (llvm::Function& f : m_) {
    for (llvm::BasicBlock& block : f) {
      const InstructionMix mix = BlockMix(block);
      std::vector<llvm::Constant*> counts;
      for (uint32_t n : mix) counts.push_back(llvm::ConstantInt::get(Type::getInt32Ty(ctx_), n));
      rows.push_back(llvm::ConstantArray::get(row_type, counts));
      blocks.push_back(&block);
    }
  }
  if (blocks.empty()) return;
  auto* table_type = llvm::ArrayType::get(row_type, rows.size());
  auto* table = new llvm::GlobalVariable(m_, table_type, /*isConstant=*/true,
                                         llvm::GlobalValue::PrivateLinkage,
                                         llvm::ConstantArray::get(table_type, rows), "emu.mix");
  auto* block_type = llvm::FunctionType::get(
      Type::getVoidTy(ctx_), {Type::getInt32Ty(ctx_), llvm::PointerType::get(ctx_, 0)}, false);
  std::map<llvm::Function*, Value*> flags;
  for (size_t site = 0; site < blocks.size(); ++site) {
    llvm::BasicBlock* block = blocks[site];
    llvm::Function* f = block->getParent();
    Value*& flag = flags[f];
    if (flag == nullptr) {
      IRBuilder<> entry(&*f->getEntryBlock().getFirstInsertionPt());
      llvm::LoadInst* checks = entry.CreateLoad(entry.getInt8Ty(), checks_, "emu.checks");
      MarkInternal(checks);
      flag = entry.CreateICmpNE(checks, entry.getInt8(0));
    }
    // In the entry block, after the flag is read.
    llvm::Instruction* at = &*block->getFirstInsertionPt();
    if (auto* cmp = llvm::dyn_cast<llvm::Instruction>(flag); cmp->getParent() == block) {
      at = cmp->getNextNode();
    }
    llvm::Instruction* then = llvm::SplitBlockAndInsertIfThen(flag, at, false);
    IRBuilder<> b(then);
    Value* row = b.CreateConstInBoundsGEP2_64(table_type, table, 0, site);
    CallRuntime(b, kBlockField, block_type, {b.getInt32(static_cast<uint32_t>(site)), row});
  }
}

void HostRewriter::StripTargetAttributes() {
  for (llvm::Function& f : m_) {
    f.removeFnAttr("target-cpu");
    f.removeFnAttr("target-features");
    // The kernels promised to touch only their arguments; they now call the
    // emulator, which touches its own state.
    if (!f.isIntrinsic()) f.setMemoryEffects(llvm::MemoryEffects::unknown());
    for (llvm::Instruction& inst : llvm::instructions(f)) {
      if (auto* call = llvm::dyn_cast<llvm::CallBase>(&inst)) {
        llvm::Function* callee = call->getCalledFunction();
        if (callee == nullptr || !callee->isIntrinsic()) {
          call->setMemoryEffects(llvm::MemoryEffects::unknown());
        }
      }
    }
  }
  // The kernel promised not to capture, or only to read or write, its
  // pointers; it now hands them to EmuRuntime::access.
  if (llvm::Function* kernel = m_.getFunction(kernel_)) {
    for (llvm::Argument& a : kernel->args()) {
      for (auto kind :
           {llvm::Attribute::NoCapture, llvm::Attribute::ReadOnly, llvm::Attribute::WriteOnly}) {
        a.removeAttr(kind);
      }
    }
  }
  if (llvm::NamedMDNode* annotations = m_.getNamedMetadata("nvvm.annotations")) {
    m_.eraseNamedMetadata(annotations);
  }
}

void HostRewriter::AddWrapper(const std::string& symbol) {
  llvm::Function* kernel = m_.getFunction(kernel_);
  kernel->setLinkage(llvm::GlobalValue::InternalLinkage);
  kernel->setCallingConv(llvm::CallingConv::C);
  Type* ptr = llvm::PointerType::get(ctx_, 0);
  auto* type = llvm::FunctionType::get(Type::getVoidTy(ctx_), {ptr}, false);
  llvm::Function* wrapper =
      llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage, symbol, m_);
  IRBuilder<> b(llvm::BasicBlock::Create(ctx_, "entry", wrapper));
  std::vector<Value*> args;
  for (unsigned i = 0; i < kernel->arg_size(); ++i) {
    Value* slot = b.CreateConstGEP1_64(b.getInt64Ty(), wrapper->getArg(0), i);
    Value* address =
        b.CreateIntToPtr(b.CreateLoad(b.getInt64Ty(), slot), kernel->getArg(i)->getType());
    args.push_back(address);
  }
  b.CreateCall(kernel, args);
  b.CreateRetVoid();
}

Status HostRewriter::Run(const std::string& symbol, HostKernel& out) {
  llvm::Function* kernel = m_.getFunction(kernel_);
  if (kernel == nullptr) return Error("{}: not in its LLVM module", Subject());
  for (llvm::Argument& a : kernel->args()) {
    if (!a.getType()->isPointerTy()) {
      return Error("{}: parameter {} is not a pointer (Note [kernel ABI])", Subject(),
                   a.getArgNo());
    }
  }
  Type* ptr = llvm::PointerType::get(ctx_, 0);
  runtime_ = new llvm::GlobalVariable(m_, ptr, false, llvm::GlobalValue::ExternalLinkage, nullptr,
                                      emu::kRuntimeSymbol);
  checks_ =
      new llvm::GlobalVariable(m_, Type::getInt8Ty(ctx_), false, llvm::GlobalValue::ExternalLinkage,
                               nullptr, emu::kChecksSymbol);
  warpgroup_.emplace(m_, runtime_);
  StripTargetAttributes();
  CountInstructions();
  RETURN_IF_ERROR(warpgroup_->GuardAccumulators());
  RETURN_IF_ERROR(ReplaceIntrinsics());
  RETURN_IF_ERROR(PlaceSharedMemory(out.shared_bytes));
  warpgroup_->RebaseSharedIntegers();
  RETURN_IF_ERROR(ExpandBF16());
  RETURN_IF_ERROR(InstrumentAccesses(out.accesses));
  AddWrapper(symbol);
  out.symbol = symbol;
  out.barriers = barriers_;
  out.shuffles = shuffles_;
  out.mmas = mmas_;
  out.ldmatrices = ldmatrices_;
  out.atomics = atomics_;
  out.wgmmas = warpgroup_->wgmmas();
  out.uses_sync = barriers_ + shuffles_ + mmas_ + ldmatrices_ + out.wgmmas +
                      warpgroup_->others() >
                  0;
  return Status::Ok();
}

}  // namespace

StatusOr<HostKernel> CompileForHost(llvm::Module& module, const std::string& kernel_name,
                                    const std::string& symbol) {
  ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> machine, HostMachine());
  // The NVPTX data layout gives every type the host's size (64-bit pointers
  // in every address space), so the optimized code keeps its meaning.
  module.setTargetTriple(machine->getTargetTriple().str());
  module.setDataLayout(machine->createDataLayout());
  HostKernel kernel;
  HostRewriter rewriter(module, kernel_name);
  RETURN_IF_ERROR(rewriter.Run(symbol, kernel));
  ASSIGN_OR_RETURN(kernel.object, EmitObject(module, *machine, "host code"));
  return kernel;
}

StatusOr<HostKernel> CompileLlvmTextForHost(const std::string& ir_text,
                                            const std::string& kernel_name,
                                            const std::string& symbol) {
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic diagnostic;
  std::unique_ptr<llvm::Module> module = llvm::parseAssemblyString(ir_text, diagnostic, ctx);
  if (module == nullptr) {
    return Error("kernel {}: line {}:{}: {}", kernel_name, diagnostic.getLineNo(),
                 diagnostic.getColumnNo(), diagnostic.getMessage().str());
  }
  StatusOr<HostKernel> kernel = CompileForHost(*module, kernel_name, symbol);
  if (!kernel.ok()) return kernel.status().WithPrefix("kernel " + kernel_name);
  return kernel;
}

StatusOr<std::string> HostSupportObject() {
  ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> machine, HostMachine());
  llvm::LLVMContext ctx;
  llvm::Module m("gptc_emu_support", ctx);
  m.setTargetTriple(machine->getTargetTriple().str());
  m.setDataLayout(machine->createDataLayout());
  Type* ptr = llvm::PointerType::get(ctx, 0);
  new llvm::GlobalVariable(m, ptr, false, llvm::GlobalValue::ExternalLinkage,
                           llvm::ConstantPointerNull::get(llvm::PointerType::get(ctx, 0)),
                           emu::kRuntimeSymbol);
  new llvm::GlobalVariable(m, Type::getInt8Ty(ctx), false, llvm::GlobalValue::ExternalLinkage,
                           llvm::ConstantInt::get(Type::getInt8Ty(ctx), 0), emu::kChecksSymbol);
  new llvm::GlobalVariable(m, Type::getInt32Ty(ctx), true, llvm::GlobalValue::ExternalLinkage,
                           llvm::ConstantInt::get(Type::getInt32Ty(ctx), emu::kKernelAbiVersion),
                           emu::kAbiSymbol);
  // The routine x86 code generation calls to narrow f32 to bf16 where it did
  // not see an fptrunc (e.g. bf16 arithmetic promoted to f32).
  auto* type = llvm::FunctionType::get(Type::getBFloatTy(ctx), {Type::getFloatTy(ctx)}, false);
  llvm::Function* trunc =
      llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage, "__truncsfbf2", m);
  trunc->setVisibility(llvm::GlobalValue::HiddenVisibility);
  IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", trunc));
  b.CreateRet(TruncateToBF16(b, trunc->getArg(0)));
  return EmitObject(m, *machine, "the emulator support object");
}

}  // namespace gptc::codegen
