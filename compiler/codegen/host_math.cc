#include "compiler/codegen/host_math.h"

#include "llvm/IR/Intrinsics.h"

namespace gptc::codegen {

using llvm::Type;
using llvm::Value;

Value* FlushSubnormal(llvm::IRBuilder<>& b, Value* x) {
  Type* t = x->getType();
  const double smallest = t->isFloatTy() ? 1.17549435e-38 : 2.2250738585072014e-308;
  Value* tiny = b.CreateFCmpOLT(b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x),
                                llvm::ConstantFP::get(t, smallest));
  Value* zero =
      b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, llvm::ConstantFP::get(t, 0.0), x);
  return b.CreateSelect(tiny, zero, x);
}

Value* EmulateNearestMath(llvm::IRBuilder<>& b, llvm::CallInst& call, const std::string& op) {
  auto arg = [&](unsigned i) { return call.getArgOperand(i); };
  auto unary = [&](llvm::Intrinsic::ID id) { return b.CreateUnaryIntrinsic(id, arg(0)); };
  Type* t = call.getType();
  if (op == "fabs.f" || op == "fabs.d") return unary(llvm::Intrinsic::fabs);
  if (op == "fma.rn.f" || op == "fma.rn.d") {
    return b.CreateIntrinsic(llvm::Intrinsic::fma, {t}, {arg(0), arg(1), arg(2)});
  }
  if (op == "add.rn.f" || op == "add.rn.d") return b.CreateFAdd(arg(0), arg(1));
  if (op == "mul.rn.f" || op == "mul.rn.d") return b.CreateFMul(arg(0), arg(1));
  if (op == "div.rn.f" || op == "div.rn.d" || op == "div.approx.f" || op == "div.full") {
    return b.CreateFDiv(arg(0), arg(1));
  }
  if (op == "rcp.rn.f" || op == "rcp.rn.d" || op == "rcp.approx.d" || op == "rcp.approx.f") {
    return b.CreateFDiv(llvm::ConstantFP::get(t, 1.0), arg(0));
  }
  if (op == "sqrt.rn.f" || op == "sqrt.rn.d" || op == "sqrt.approx.f" || op == "sqrt.f") {
    return unary(llvm::Intrinsic::sqrt);
  }
  if (op == "rsqrt.approx.f" || op == "rsqrt.approx.d") {
    return b.CreateFDiv(llvm::ConstantFP::get(t, 1.0), unary(llvm::Intrinsic::sqrt));
  }
  if (op == "ex2.approx.f" || op == "ex2.approx.d" || op == "ex2.approx.f32") {
    return unary(llvm::Intrinsic::exp2);
  }
  if (op == "lg2.approx.f" || op == "lg2.approx.d") return unary(llvm::Intrinsic::log2);
  if (op == "ff2bf16x2.rn") {  // cvt.rn.bf16x2.f32 d, a, b: a in the upper half, element 1
    Type* bf16 = b.getBFloatTy();
    Value* pair = llvm::PoisonValue::get(t);
    pair = b.CreateInsertElement(pair, b.CreateFPTrunc(arg(1), bf16), uint64_t{0});
    return b.CreateInsertElement(pair, b.CreateFPTrunc(arg(0), bf16), uint64_t{1});
  }
  if (op == "sin.approx.f") return unary(llvm::Intrinsic::sin);
  if (op == "cos.approx.f") return unary(llvm::Intrinsic::cos);
  if (op == "round.f" || op == "round.d") return unary(llvm::Intrinsic::roundeven);
  if (op == "trunc.f" || op == "trunc.d") return unary(llvm::Intrinsic::trunc);
  if (op == "floor.f" || op == "floor.d") return unary(llvm::Intrinsic::floor);
  if (op == "ceil.f" || op == "ceil.d") return unary(llvm::Intrinsic::ceil);
  if (op == "saturate.f" || op == "saturate.d") {
    Value *one = llvm::ConstantFP::get(t, 1.0), *zero = llvm::ConstantFP::get(t, 0.0);
    Value* below_one = b.CreateSelect(b.CreateFCmpOLT(arg(0), one), arg(0), one);
    return b.CreateSelect(b.CreateFCmpOGT(arg(0), zero), below_one, zero);
  }
  if (op == "fmin.f" || op == "fmin.d")
    return b.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, arg(0), arg(1));
  if (op == "fmax.f" || op == "fmax.d")
    return b.CreateBinaryIntrinsic(llvm::Intrinsic::maxnum, arg(0), arg(1));
  if (op == "fmin.nan.f") return b.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, arg(0), arg(1));
  if (op == "fmax.nan.f") return b.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, arg(0), arg(1));
  if (op == "d2i.lo" || op == "d2i.hi") {
    Value* bits = b.CreateBitCast(arg(0), b.getInt64Ty());
    if (op == "d2i.hi") bits = b.CreateLShr(bits, 32);
    return b.CreateTrunc(bits, b.getInt32Ty());
  }
  if (op == "lohi.i2d") {
    Value* lo = b.CreateZExt(arg(0), b.getInt64Ty());
    Value* hi = b.CreateShl(b.CreateZExt(arg(1), b.getInt64Ty()), 32);
    return b.CreateBitCast(b.CreateOr(lo, hi), b.getDoubleTy());
  }
  return nullptr;
}

}  // namespace gptc::codegen
