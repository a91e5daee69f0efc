#include "compiler/codegen/fused_emitter.h"

#include "compiler/ir/patterns.h"

#include <algorithm>

#include "compiler/codegen/emitter_util.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMTypes.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace gptc::codegen {

using ir::DType;
using ir::Opcode;
using mlir::Value;

namespace {

bool IsFloat16(DType d) { return d == DType::kBF16 || d == DType::kF16; }
bool IsUnsigned(DType d) { return d == DType::kU16 || d == DType::kPred; }

Value ToF32(mlir::OpBuilder& b, mlir::Location loc, Value v, DType dtype) {
  return IsFloat16(dtype) ? b.create<mlir::arith::ExtFOp>(loc, b.getF32Type(), v).getResult() : v;
}

Value FromF32(mlir::OpBuilder& b, mlir::Location loc, Value v, DType dtype) {
  if (!IsFloat16(dtype)) return v;
  return b.create<mlir::arith::TruncFOp>(loc, ElementType(b.getContext(), dtype), v);
}

// Note [fast exp]: exp(x) of an f32 is ex2.approx.ftz(x log2(e)), a multiply
// and one MUFU instruction, as the attention kernels' Note [exp2 softmax]
// does; libdevice's accurate expf took about a dozen instructions, and the
// cross-entropy kernel, which takes two exps of every logit, was bound by
// its instruction issue. The result is within about 2^-22 relative of expf,
// plus the rounding of x log2(e): |x| 2^-24 relative, 5e-6 at the |x| ~ 90
// where the exp of an f32 underflows; subnormal results flush to zero. The
// softmax and cross-entropy results round to bf16 (2^-8) or feed a sum.
Value FastExp(mlir::OpBuilder& b, mlir::Location loc, Value x) {
  Value log2e = b.create<mlir::arith::ConstantOp>(loc, b.getF32FloatAttr(kLog2E));
  Value scaled = b.create<mlir::arith::MulFOp>(loc, x, log2e);
  return b
      .create<mlir::LLVM::CallIntrinsicOp>(loc, b.getF32Type(), "llvm.nvvm.ex2.approx.ftz.f",
                                           mlir::ValueRange{scaled})
      .getResult(0);
}

StatusOr<Value> EmitUnary(mlir::OpBuilder& b, mlir::Location loc, const ir::Instruction& inst,
                          Value x) {
  namespace arith = mlir::arith;
  namespace math = mlir::math;
  DType dtype = inst.shape().dtype();
  if (ir::IsFloat(dtype)) {
    Value f = ToF32(b, loc, x, dtype);
    Value r;
    switch (inst.opcode()) {
      case Opcode::kNeg:
        r = b.create<arith::NegFOp>(loc, f);
        break;
      case Opcode::kExp:
        r = f.getType().isF32() ? FastExp(b, loc, f) : b.create<math::ExpOp>(loc, f).getResult();
        break;
      case Opcode::kLog:
        r = b.create<math::LogOp>(loc, f);
        break;
      case Opcode::kTanh:
        r = b.create<math::TanhOp>(loc, f);
        break;
      case Opcode::kSqrt:
        r = b.create<math::SqrtOp>(loc, f);
        break;
      case Opcode::kRsqrt:
        r = b.create<math::RsqrtOp>(loc, f);
        break;
      case Opcode::kErf:
        r = b.create<math::ErfOp>(loc, f);
        break;
      case Opcode::kAbs:
        r = b.create<math::AbsFOp>(loc, f);
        break;
      default:
        break;
    }
    if (r) return FromF32(b, loc, r, dtype);
  } else if (dtype == DType::kS32 || dtype == DType::kU16) {
    if (inst.opcode() == Opcode::kNeg) {
      Value zero = ScalarConstant(b, loc, dtype, 0);
      return b.create<arith::SubIOp>(loc, zero, x).getResult();
    }
    if (inst.opcode() == Opcode::kAbs && dtype == DType::kS32) {
      return b.create<math::AbsIOp>(loc, x).getResult();
    }
    if (inst.opcode() == Opcode::kAbs) return x;
  }
  return Error("{}: {} of {} is not supported by codegen", Describe(inst),
               ir::OpcodeName(inst.opcode()), ir::DTypeName(dtype));
}

StatusOr<Value> EmitBinary(mlir::OpBuilder& b, mlir::Location loc, const ir::Instruction& inst,
                           Value x, Value y) {
  namespace arith = mlir::arith;
  DType dtype = inst.shape().dtype();
  Opcode op = inst.opcode();
  if (ir::IsFloat(dtype)) {
    Value f = ToF32(b, loc, x, dtype), g = ToF32(b, loc, y, dtype);
    Value r;
    switch (op) {
      case Opcode::kAdd:
        r = b.create<arith::AddFOp>(loc, f, g);
        break;
      case Opcode::kSub:
        r = b.create<arith::SubFOp>(loc, f, g);
        break;
      case Opcode::kMul:
        r = b.create<arith::MulFOp>(loc, f, g);
        break;
      case Opcode::kDiv:
        r = b.create<arith::DivFOp>(loc, f, g);
        break;
      case Opcode::kMax:
        r = b.create<arith::MaximumFOp>(loc, f, g);
        break;
      case Opcode::kMin:
        r = b.create<arith::MinimumFOp>(loc, f, g);
        break;
      case Opcode::kPow:
        r = b.create<mlir::math::PowFOp>(loc, f, g);
        break;
      default:
        break;
    }
    if (r) return FromF32(b, loc, r, dtype);
  } else if (dtype == DType::kPred) {
    if (op == Opcode::kMax || op == Opcode::kAdd)
      return b.create<arith::OrIOp>(loc, x, y).getResult();
    if (op == Opcode::kMin || op == Opcode::kMul)
      return b.create<arith::AndIOp>(loc, x, y).getResult();
  } else {
    bool u = IsUnsigned(dtype);
    switch (op) {
      case Opcode::kAdd:
        return b.create<arith::AddIOp>(loc, x, y).getResult();
      case Opcode::kSub:
        return b.create<arith::SubIOp>(loc, x, y).getResult();
      case Opcode::kMul:
        return b.create<arith::MulIOp>(loc, x, y).getResult();
      case Opcode::kDiv:
        return u ? b.create<arith::DivUIOp>(loc, x, y).getResult()
                 : b.create<arith::DivSIOp>(loc, x, y).getResult();
      case Opcode::kMax:
        return u ? b.create<arith::MaxUIOp>(loc, x, y).getResult()
                 : b.create<arith::MaxSIOp>(loc, x, y).getResult();
      case Opcode::kMin:
        return u ? b.create<arith::MinUIOp>(loc, x, y).getResult()
                 : b.create<arith::MinSIOp>(loc, x, y).getResult();
      default:
        break;
    }
  }
  return Error("{}: {} of {} is not supported by codegen", Describe(inst), ir::OpcodeName(op),
               ir::DTypeName(dtype));
}

Value EmitCompare(mlir::OpBuilder& b, mlir::Location loc, ir::CompareDirection dir, DType dtype,
                  Value x, Value y) {
  namespace arith = mlir::arith;
  using D = ir::CompareDirection;
  if (ir::IsFloat(dtype)) {
    arith::CmpFPredicate p = arith::CmpFPredicate::OEQ;
    switch (dir) {
      case D::kEq:
        p = arith::CmpFPredicate::OEQ;
        break;
      case D::kNe:
        p = arith::CmpFPredicate::UNE;
        break;
      case D::kLt:
        p = arith::CmpFPredicate::OLT;
        break;
      case D::kLe:
        p = arith::CmpFPredicate::OLE;
        break;
      case D::kGt:
        p = arith::CmpFPredicate::OGT;
        break;
      case D::kGe:
        p = arith::CmpFPredicate::OGE;
        break;
    }
    return b.create<arith::CmpFOp>(loc, p, ToF32(b, loc, x, dtype), ToF32(b, loc, y, dtype));
  }
  bool u = IsUnsigned(dtype);
  arith::CmpIPredicate p = arith::CmpIPredicate::eq;
  switch (dir) {
    case D::kEq:
      p = arith::CmpIPredicate::eq;
      break;
    case D::kNe:
      p = arith::CmpIPredicate::ne;
      break;
    case D::kLt:
      p = u ? arith::CmpIPredicate::ult : arith::CmpIPredicate::slt;
      break;
    case D::kLe:
      p = u ? arith::CmpIPredicate::ule : arith::CmpIPredicate::sle;
      break;
    case D::kGt:
      p = u ? arith::CmpIPredicate::ugt : arith::CmpIPredicate::sgt;
      break;
    case D::kGe:
      p = u ? arith::CmpIPredicate::uge : arith::CmpIPredicate::sge;
      break;
  }
  return b.create<arith::CmpIOp>(loc, p, x, y);
}

}  // namespace

std::string Describe(const ir::Instruction& inst) {
  if (inst.parent() == nullptr) return "%" + inst.name();
  return fmt::format("%{}/%{}", inst.parent()->name(), inst.name());
}

mlir::Type ElementType(mlir::MLIRContext* ctx, DType dtype) {
  mlir::Builder b(ctx);
  switch (dtype) {
    case DType::kPred:
      return b.getI1Type();
    case DType::kS32:
      return b.getI32Type();
    case DType::kU16:
      return b.getI16Type();
    case DType::kF32:
      return b.getF32Type();
    case DType::kBF16:
      return b.getBF16Type();
    case DType::kF16:
      return b.getF16Type();
  }
  return b.getF32Type();
}

mlir::Type StorageType(mlir::MLIRContext* ctx, DType dtype) {
  if (dtype == DType::kPred) return mlir::IntegerType::get(ctx, 8);
  return ElementType(ctx, dtype);
}

int64_t StorageBytes(DType dtype) { return dtype == DType::kPred ? 1 : ir::DTypeBytes(dtype); }

Value FromStorage(mlir::OpBuilder& b, mlir::Location loc, Value v, DType dtype) {
  if (dtype != DType::kPred) return v;
  Value zero = b.create<mlir::arith::ConstantOp>(loc, b.getIntegerAttr(v.getType(), 0));
  return b.create<mlir::arith::CmpIOp>(loc, mlir::arith::CmpIPredicate::ne, v, zero);
}

Value ToStorage(mlir::OpBuilder& b, mlir::Location loc, Value v, DType dtype) {
  if (dtype != DType::kPred) return v;
  return b.create<mlir::arith::ExtUIOp>(loc, b.getI8Type(), v);
}

Value LoadElement(mlir::OpBuilder& b, mlir::Location loc, Value ptr, Value index, DType dtype) {
  mlir::Type storage = StorageType(b.getContext(), dtype);
  Value addr =
      b.create<mlir::LLVM::GEPOp>(loc, ptr.getType(), storage, ptr, mlir::ValueRange{index},
                                  /*inbounds=*/true);
  Value v = b.create<mlir::LLVM::LoadOp>(loc, storage, addr, StorageBytes(dtype));
  return FromStorage(b, loc, v, dtype);
}

void StoreElement(mlir::OpBuilder& b, mlir::Location loc, Value value, Value ptr, Value index,
                  DType dtype) {
  mlir::Type storage = StorageType(b.getContext(), dtype);
  Value addr =
      b.create<mlir::LLVM::GEPOp>(loc, ptr.getType(), storage, ptr, mlir::ValueRange{index},
                                  /*inbounds=*/true);
  b.create<mlir::LLVM::StoreOp>(loc, ToStorage(b, loc, value, dtype), addr, StorageBytes(dtype));
}

void StoreElements(mlir::OpBuilder& b, mlir::Location loc, const std::vector<Value>& lanes,
                   Value ptr, Value index, DType dtype) {
  if (lanes.size() == 1) {
    StoreElement(b, loc, lanes[0], ptr, index, dtype);
    return;
  }
  const int64_t width = static_cast<int64_t>(lanes.size());
  mlir::Type storage = StorageType(b.getContext(), dtype);
  Value vec = b.create<mlir::LLVM::UndefOp>(loc, mlir::VectorType::get({width}, storage));
  for (int64_t lane = 0; lane < width; ++lane) {
    Value pos = b.create<mlir::arith::ConstantOp>(loc, b.getI32IntegerAttr(lane));
    vec =
        b.create<mlir::LLVM::InsertElementOp>(loc, vec, ToStorage(b, loc, lanes[lane], dtype), pos);
  }
  Value addr = b.create<mlir::LLVM::GEPOp>(loc, ptr.getType(), storage, ptr,
                                           mlir::ValueRange{index}, /*inbounds=*/true);
  b.create<mlir::LLVM::StoreOp>(loc, vec, addr, std::min<int64_t>(16, width * StorageBytes(dtype)));
}

Value ScalarConstant(mlir::OpBuilder& b, mlir::Location loc, DType dtype, double value) {
  mlir::Type type = ElementType(b.getContext(), dtype);
  mlir::TypedAttr attr;
  if (ir::IsFloat(dtype)) {
    attr = b.getFloatAttr(type, value);
  } else if (dtype == DType::kPred) {
    attr = b.getIntegerAttr(type, value != 0 ? 1 : 0);
  } else {
    attr = b.getIntegerAttr(type, static_cast<int64_t>(value));
  }
  return b.create<mlir::arith::ConstantOp>(loc, attr);
}

Value ConvertValue(mlir::OpBuilder& b, mlir::Location loc, Value v, DType from, DType to) {
  namespace arith = mlir::arith;
  if (from == to) return v;
  mlir::Type to_type = ElementType(b.getContext(), to);
  if (ir::IsFloat(from) && ir::IsFloat(to)) {
    Value f = ToF32(b, loc, v, from);
    return to == DType::kF32 ? f : FromF32(b, loc, f, to);
  }
  if (ir::IsFloat(to)) {  // integer or pred -> float, via f32
    Value f = IsUnsigned(from) ? b.create<arith::UIToFPOp>(loc, b.getF32Type(), v).getResult()
                               : b.create<arith::SIToFPOp>(loc, b.getF32Type(), v).getResult();
    return FromF32(b, loc, f, to);
  }
  if (to == DType::kPred) {  // x != 0
    if (ir::IsFloat(from)) {
      Value zero = ScalarConstant(b, loc, DType::kF32, 0);
      return b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNE, ToF32(b, loc, v, from), zero);
    }
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, v,
                                   ScalarConstant(b, loc, from, 0));
  }
  if (ir::IsFloat(from)) {  // float -> integer, truncating toward zero
    Value f = ToF32(b, loc, v, from);
    if (IsUnsigned(to)) return b.create<arith::FPToUIOp>(loc, to_type, f);
    return b.create<arith::FPToSIOp>(loc, to_type, f);
  }
  unsigned from_bits = v.getType().getIntOrFloatBitWidth();
  unsigned to_bits = to_type.getIntOrFloatBitWidth();
  if (to_bits < from_bits) return b.create<arith::TruncIOp>(loc, to_type, v);
  if (IsUnsigned(from)) return b.create<arith::ExtUIOp>(loc, to_type, v);
  return b.create<arith::ExtSIOp>(loc, to_type, v);
}

mlir::Operation* CreateFor(mlir::OpBuilder& b, mlir::Location loc, Value lb, Value ub, Value step,
                           mlir::ValueRange inits) {
  auto loop = b.create<mlir::scf::ForOp>(loc, lb, ub, step, inits);
  mlir::Block* body = loop.getBody();
  if (!body->empty() && body->back().hasTrait<mlir::OpTrait::IsTerminator>()) {
    b.setInsertionPoint(&body->back());
  } else {
    b.setInsertionPointToEnd(body);
  }
  return loop;
}

FusedEmitter::FusedEmitter(mlir::OpBuilder& b, mlir::Block* entry, mlir::IntegerType index_type,
                           std::string what, Reader read_parameter, Reader read_reduce)
    : b_(b),
      entry_(entry),
      index_type_(index_type),
      what_(std::move(what)),
      read_parameter_(std::move(read_parameter)),
      read_reduce_(std::move(read_reduce)) {}

Value CombineReduce(mlir::OpBuilder& b, mlir::Location loc, ir::ReduceKind kind, Value x,
                    Value y) {
  if (kind == ir::ReduceKind::kSum) return b.create<mlir::arith::AddFOp>(loc, x, y);
  return b.create<mlir::arith::MaximumFOp>(loc, x, y);
}

void FusedEmitter::BindComposites(const ir::Computation& fused) {
  ir::BindComposites(fused, inlined_);
}

Value FusedEmitter::IndexConstant(int64_t value) {
  auto it = constants_.find(value);
  if (it != constants_.end()) return it->second;
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(entry_);
  Value c =
      b_.create<mlir::arith::ConstantOp>(b_.getUnknownLoc(), b_.getIntegerAttr(index_type_, value));
  constants_[value] = c;
  return c;
}

Value FusedEmitter::Linear(const ElementIndex& index, const ir::Shape& shape) {
  if (index.linear) return index.linear;
  std::vector<int64_t> strides = shape.Strides();
  mlir::Location loc = b_.getUnknownLoc();
  Value sum;
  for (int64_t d = 0; d < shape.rank(); ++d) {
    if (shape.dim(d) == 1) continue;
    Value term = index.multi[d];
    if (strides[d] != 1)
      term = b_.create<mlir::arith::MulIOp>(loc, term, IndexConstant(strides[d]));
    sum = sum ? b_.create<mlir::arith::AddIOp>(loc, sum, term).getResult() : term;
  }
  return sum ? sum : IndexConstant(0);
}

std::vector<Value> FusedEmitter::Multi(const ElementIndex& index, const ir::Shape& shape) {
  if (!index.multi.empty() || shape.rank() == 0) return index.multi;
  std::vector<int64_t> strides = shape.Strides();
  mlir::Location loc = b_.getUnknownLoc();
  std::vector<Value> multi;
  for (int64_t d = 0; d < shape.rank(); ++d) {
    if (shape.dim(d) == 1) {
      multi.push_back(IndexConstant(0));
      continue;
    }
    Value q = index.linear;
    if (strides[d] != 1) q = b_.create<mlir::arith::DivUIOp>(loc, q, IndexConstant(strides[d]));
    if (d > 0) q = b_.create<mlir::arith::RemUIOp>(loc, q, IndexConstant(shape.dim(d)));
    multi.push_back(q);
  }
  return multi;
}

std::optional<std::vector<Value>> FusedEmitter::ReshapeGroups(const std::vector<Value>& multi,
                                                              const ir::Shape& out,
                                                              const ir::Shape& in) {
  if (out.num_elements() == 0) return std::nullopt;
  std::vector<Value> result;
  int64_t i = 0, j = 0;
  const int64_t out_rank = out.rank(), in_rank = in.rank();
  while (i < out_rank || j < in_rank) {
    const int64_t out_begin = i, in_begin = j;
    int64_t out_product = 1, in_product = 1;
    if (i < out_rank) out_product *= out.dim(i++);
    if (j < in_rank) in_product *= in.dim(j++);
    while (out_product != in_product) {
      if (out_product < in_product && i < out_rank) {
        out_product *= out.dim(i++);
      } else if (in_product < out_product && j < in_rank) {
        in_product *= in.dim(j++);
      } else {
        return std::nullopt;
      }
    }
    // The group's index linearized over its output dims (multiply-adds), then
    // split over its input dims (a single dim takes it whole).
    ElementIndex group;
    group.multi.assign(multi.begin() + out_begin, multi.begin() + i);
    const std::vector<int64_t>& out_dims = out.dims();
    const std::vector<int64_t>& in_dims = in.dims();
    ElementIndex linear;
    linear.linear = Linear(
        group, ir::Shape(out.dtype(),
                         std::vector<int64_t>(out_dims.begin() + out_begin, out_dims.begin() + i)));
    for (Value v :
         Multi(linear, ir::Shape(in.dtype(), std::vector<int64_t>(in_dims.begin() + in_begin,
                                                                  in_dims.begin() + j)))) {
      result.push_back(v);
    }
  }
  return result;
}

std::vector<const void*> FusedEmitter::CacheKey(const ElementIndex& index) {
  std::vector<const void*> key;
  if (index.linear) {
    key.push_back(index.linear.getAsOpaquePointer());
  } else {
    for (Value v : index.multi) key.push_back(v.getAsOpaquePointer());
  }
  return key;
}

void FusedEmitter::Assume(const ir::Instruction& inst, const ElementIndex& index, Value value) {
  cache_[std::make_pair(&inst, CacheKey(index))] = value;
}

StatusOr<Value> FusedEmitter::Emit(const ir::Instruction& inst, const ElementIndex& index) {
  auto cache_key = std::make_pair(&inst, CacheKey(index));
  if (auto it = cache_.find(cache_key); it != cache_.end()) return it->second;
  ASSIGN_OR_RETURN(Value v, EmitUncached(inst, index));
  cache_[std::move(cache_key)] = v;
  return v;
}

StatusOr<Value> FusedEmitter::EmitOperand(const ir::Instruction& inst, int64_t i,
                                          std::vector<Value> multi) {
  ElementIndex index;
  index.multi = std::move(multi);
  if (index.multi.empty()) index.linear = IndexConstant(0);  // a scalar operand
  return Emit(*inst.operand(i), index);
}

StatusOr<Value> FusedEmitter::EmitUncached(const ir::Instruction& inst, const ElementIndex& index) {
  namespace arith = mlir::arith;
  mlir::Location loc = b_.getUnknownLoc();
  const ir::Shape& shape = inst.shape();
  const ir::Attrs& attrs = inst.attrs();
  if (shape.is_tuple()) {
    return Error("{}: tuple-shaped {} inside a {} fusion is not supported", Describe(inst),
                 ir::OpcodeName(inst.opcode()), what_);
  }
  Opcode op = inst.opcode();
  if (ir::IsUnaryMath(op)) {
    ASSIGN_OR_RETURN(Value x, Emit(*inst.operand(0), index));
    return EmitUnary(b_, loc, inst, x);
  }
  if (ir::IsBinaryElementwise(op)) {
    ASSIGN_OR_RETURN(Value x, Emit(*inst.operand(0), index));
    ASSIGN_OR_RETURN(Value y, Emit(*inst.operand(1), index));
    return EmitBinary(b_, loc, inst, x, y);
  }
  switch (op) {
    case Opcode::kParameter:
      if (auto it = inlined_.find(&inst); it != inlined_.end()) return Emit(*it->second, index);
      return read_parameter_(inst, index);
    case Opcode::kSoftmaxCrossEntropy: {
      const ir::Computation* d = inst.called_computation();
      if (d == nullptr) return Error("{}: composite without decomposition", Describe(inst));
      if (!inlined_.count(d->parameters().front())) BindComposites(*inst.parent());
      return Emit(*d->root(), index);
    }
    case Opcode::kReduce:
      if (!read_reduce_) {
        return Error("{}: reduce is not supported in a {} fusion", Describe(inst), what_);
      }
      return read_reduce_(inst, index);
    case Opcode::kConstant:
      return EmitConstant(inst);
    case Opcode::kIota: {
      Value i = Multi(index, shape)[attrs.index];
      if (index_type_.getWidth() == 64) i = b_.create<arith::TruncIOp>(loc, b_.getI32Type(), i);
      return ConvertValue(b_, loc, i, DType::kS32, shape.dtype());
    }
    case Opcode::kConvert: {
      ASSIGN_OR_RETURN(Value x, Emit(*inst.operand(0), index));
      return ConvertValue(b_, loc, x, inst.operand(0)->shape().dtype(), shape.dtype());
    }
    case Opcode::kCopy:
      return Emit(*inst.operand(0), index);
    case Opcode::kSelect: {
      ASSIGN_OR_RETURN(Value p, Emit(*inst.operand(0), index));
      ASSIGN_OR_RETURN(Value x, Emit(*inst.operand(1), index));
      ASSIGN_OR_RETURN(Value y, Emit(*inst.operand(2), index));
      return b_.create<arith::SelectOp>(loc, p, x, y).getResult();
    }
    case Opcode::kCompare: {
      ASSIGN_OR_RETURN(Value x, Emit(*inst.operand(0), index));
      ASSIGN_OR_RETURN(Value y, Emit(*inst.operand(1), index));
      return EmitCompare(b_, loc, attrs.direction, inst.operand(0)->shape().dtype(), x, y);
    }
    case Opcode::kReshape:
      return EmitReshape(inst, index);
    case Opcode::kBroadcast:
    case Opcode::kTranspose:
      return EmitPermuted(inst, index);
    case Opcode::kSlice:
      return EmitSlice(inst, index);
    case Opcode::kPad:
      return EmitPad(inst, index);
    case Opcode::kConcatenate:
      return EmitConcatenate(inst, index);
    default:
      break;
  }
  return Error("{}: opcode {} is not supported in a {} fusion", Describe(inst), ir::OpcodeName(op),
               what_);
}

StatusOr<Value> FusedEmitter::EmitPermuted(const ir::Instruction& inst, const ElementIndex& index) {
  const std::vector<int64_t>& dims = inst.attrs().dimensions;
  std::vector<Value> multi = Multi(index, inst.shape()), operand_multi;
  if (inst.opcode() == Opcode::kBroadcast) {
    for (int64_t d : dims) operand_multi.push_back(multi[d]);
  } else {
    operand_multi.resize(multi.size());
    for (size_t i = 0; i < dims.size(); ++i) operand_multi[dims[i]] = multi[i];
  }
  return EmitOperand(inst, 0, std::move(operand_multi));
}

StatusOr<Value> FusedEmitter::EmitConstant(const ir::Instruction& inst) {
  const std::vector<double>& lit = inst.attrs().literal;
  if (lit.empty() || std::any_of(lit.begin(), lit.end(), [&](double x) {
        return !(x == lit[0] || (x != x && lit[0] != lit[0]));
      })) {
    return Error("{}: non-splat constant of {} elements is not supported by codegen yet",
                 Describe(inst), lit.size());
  }
  return ScalarConstant(b_, b_.getUnknownLoc(), inst.shape().dtype(), lit[0]);
}

StatusOr<Value> FusedEmitter::EmitReshape(const ir::Instruction& inst, const ElementIndex& index) {
  const ir::Shape& shape = inst.shape();
  // Note [reshape index groups]: with a multi-index, each group of dims
  // whose sizes multiply to the same product on both sides maps on its
  // own: a split dim is rebuilt by multiply-adds, only a merged dim is
  // divided. Linearizing the whole index and dividing it back per operand
  // dim cost every element of the attention tiles a dozen divisions.
  if (!index.identity && !index.multi.empty()) {
    std::optional<std::vector<Value>> grouped =
        ReshapeGroups(index.multi, shape, inst.operand(0)->shape());
    if (grouped) return EmitOperand(inst, 0, std::move(*grouped));
  }
  ElementIndex reshaped;
  reshaped.linear = Linear(index, shape);
  reshaped.identity = index.identity;
  reshaped.lane = index.lane;
  return Emit(*inst.operand(0), reshaped);
}

StatusOr<Value> FusedEmitter::EmitSlice(const ir::Instruction& inst, const ElementIndex& index) {
  namespace arith = mlir::arith;
  mlir::Location loc = b_.getUnknownLoc();
  const ir::Attrs& attrs = inst.attrs();
  std::vector<Value> multi = Multi(index, inst.shape());
  for (size_t d = 0; d < multi.size(); ++d) {
    int64_t stride = attrs.slice.strides.empty() ? 1 : attrs.slice.strides[d];
    if (stride != 1) multi[d] = b_.create<arith::MulIOp>(loc, multi[d], IndexConstant(stride));
    if (attrs.slice.starts[d] != 0) {
      multi[d] = b_.create<arith::AddIOp>(loc, multi[d], IndexConstant(attrs.slice.starts[d]));
    }
  }
  return EmitOperand(inst, 0, std::move(multi));
}

StatusOr<Value> FusedEmitter::EmitPad(const ir::Instruction& inst, const ElementIndex& index) {
  namespace arith = mlir::arith;
  mlir::Location loc = b_.getUnknownLoc();
  const ir::Shape& shape = inst.shape();
  const ir::Attrs& attrs = inst.attrs();
  // operand[i - low] where 0 <= i - low < dim, else the padding value.
  std::vector<Value> multi = Multi(index, shape);
  const ir::Shape& in = inst.operand(0)->shape();
  Value in_bounds;
  for (size_t d = 0; d < multi.size(); ++d) {
    if (attrs.pad_low[d] == 0 && attrs.pad_high[d] == 0) continue;
    Value i = b_.create<arith::SubIOp>(loc, multi[d], IndexConstant(attrs.pad_low[d]));
    Value lo = b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, i, IndexConstant(0));
    Value hi =
        b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, i, IndexConstant(in.dim(d)));
    Value ok = b_.create<arith::AndIOp>(loc, lo, hi);
    in_bounds = in_bounds ? b_.create<arith::AndIOp>(loc, in_bounds, ok).getResult() : ok;
    i = b_.create<arith::MaxSIOp>(loc, i, IndexConstant(0));
    multi[d] = b_.create<arith::MinSIOp>(loc, i, IndexConstant(in.dim(d) - 1));
  }
  ASSIGN_OR_RETURN(Value x, EmitOperand(inst, 0, std::move(multi)));
  if (!in_bounds) return x;
  ASSIGN_OR_RETURN(Value pad_value, EmitOperand(inst, 1, {}));
  return b_.create<arith::SelectOp>(loc, in_bounds, x, pad_value).getResult();
}

StatusOr<Value> FusedEmitter::EmitConcatenate(const ir::Instruction& inst,
                                              const ElementIndex& index) {
  namespace arith = mlir::arith;
  mlir::Location loc = b_.getUnknownLoc();
  const ir::Shape& shape = inst.shape();
  const ir::Attrs& attrs = inst.attrs();
  // The operand whose range holds the index, found by a select chain.
  int64_t axis = attrs.dimensions.at(0);
  std::vector<Value> multi = Multi(index, shape);
  Value result;
  int64_t offset = 0;
  std::vector<std::pair<Value, int64_t>> pieces;  // (value, start offset)
  for (int64_t k = 0; k < inst.operand_count(); ++k) {
    int64_t size = inst.operand(k)->shape().dim(axis);
    std::vector<Value> local = multi;
    Value i = b_.create<arith::SubIOp>(loc, multi[axis], IndexConstant(offset));
    i = b_.create<arith::MaxSIOp>(loc, i, IndexConstant(0));
    local[axis] = b_.create<arith::MinSIOp>(loc, i, IndexConstant(size - 1));
    ASSIGN_OR_RETURN(Value v, EmitOperand(inst, k, std::move(local)));
    pieces.push_back({v, offset});
    offset += size;
  }
  result = pieces.back().first;
  for (int64_t k = static_cast<int64_t>(pieces.size()) - 2; k >= 0; --k) {
    Value before = b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, multi[axis],
                                            IndexConstant(pieces[k + 1].second));
    result = b_.create<arith::SelectOp>(loc, before, pieces[k].first, result);
  }
  return result;
}

// --- emitter_util.h's MLIR helpers (kept in this translation unit: each
// MLIR-including file costs ~30 s to compile; the rest is in
// emitter_util.cc) ---

Status EmitAndStore(FusedEmitter& emitter, mlir::OpBuilder& b, mlir::Location loc,
                    mlir::Block* body, const ir::Instruction& fusion,
                    const std::vector<const ir::Instruction*>& outputs,
                    const std::vector<int64_t>& slots, const ElementIndex& index, mlir::Value at) {
  for (size_t o = 0; o < outputs.size(); ++o) {
    StatusOr<mlir::Value> v = emitter.Emit(*outputs[o], index);
    if (!v.ok()) return v.status().WithPrefix("%" + fusion.name());
    StoreElement(b, loc, *v, body->getArgument(slots[o]), at, outputs[o]->shape().dtype());
  }
  return Status::Ok();
}

mlir::Value DynamicSharedBase(mlir::OpBuilder& b, mlir::gpu::GPUModuleOp gpu_module,
                              const std::string& symbol) {
  mlir::LLVM::GlobalOp global;
  {
    mlir::OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(gpu_module.getBody());
    global = b.create<mlir::LLVM::GlobalOp>(
        b.getUnknownLoc(), mlir::LLVM::LLVMArrayType::get(b.getI8Type(), 0),
        /*isConstant=*/false, mlir::LLVM::Linkage::External, symbol, mlir::Attribute(),
        /*alignment=*/16, /*addrSpace=*/3);
  }
  return b.create<mlir::LLVM::AddressOfOp>(b.getUnknownLoc(), global);
}

mlir::gpu::GPUFuncOp CreateKernel(mlir::OpBuilder& b, mlir::gpu::GPUModuleOp gpu_module,
                                  const std::string& name, int64_t num_params, int64_t block,
                                  int64_t workgroup_floats) {
  mlir::MLIRContext* ctx = b.getContext();
  mlir::Type ptr = mlir::LLVM::LLVMPointerType::get(ctx, /*addressSpace=*/1);
  std::vector<mlir::Type> arg_types(num_params, ptr);
  std::vector<mlir::Type> workgroup;
  if (workgroup_floats > 0) {
    auto space = mlir::gpu::AddressSpaceAttr::get(ctx, mlir::gpu::AddressSpace::Workgroup);
    workgroup.push_back(mlir::MemRefType::get({workgroup_floats}, b.getF32Type(),
                                              mlir::MemRefLayoutAttrInterface{}, space));
  }
  mlir::Block* module_body = gpu_module.getBody();
  if (module_body->mightHaveTerminator()) {
    b.setInsertionPoint(module_body->getTerminator());  // gpu.module_end
  } else {
    b.setInsertionPointToEnd(module_body);
  }
  auto func = b.create<mlir::gpu::GPUFuncOp>(
      b.getUnknownLoc(), name, b.getFunctionType(arg_types, {}), workgroup, mlir::TypeRange{});
  func->setAttr(mlir::gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  int32_t threads = static_cast<int32_t>(block);
  func.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr({threads, 1, 1}));
  func->setAttr("nvvm.maxntid", b.getDenseI32ArrayAttr({threads, 1, 1}));
  mlir::Block& body = func.getBody().front();
  b.setInsertionPointToEnd(&body);
  auto ret = b.create<mlir::gpu::ReturnOp>(b.getUnknownLoc());
  b.setInsertionPoint(ret);
  return func;
}

FusedKernelBuilder::FusedKernelBuilder(mlir::gpu::GPUModuleOp gpu_module, const std::string& name,
                                       int64_t num_params, int64_t block, int64_t workgroup_floats,
                                       bool wide, std::string what,
                                       FusedEmitter::Reader read_parameter,
                                       FusedEmitter::Reader read_reduce)
    : b_(gpu_module.getContext()),
      func_(CreateKernel(b_, gpu_module, name, num_params, block, workgroup_floats)),
      entry_(&func_.getBody().front()),
      loc_(b_.getUnknownLoc()),
      index_type_(wide ? b_.getI64Type() : b_.getI32Type()),
      emitter_(b_, entry_, index_type_, std::move(what),
               read_parameter ? std::move(read_parameter)
                              : FusedEmitter::Reader(
                                    [this](const ir::Instruction& p, const ElementIndex& index) {
                                      return ReadArgument(p, index);
                                    }),
               std::move(read_reduce)) {}

StatusOr<Value> FusedKernelBuilder::ReadArgument(const ir::Instruction& p,
                                                 const ElementIndex& index) {
  return LoadElement(b_, loc_, entry_->getArgument(p.attrs().index),
                     emitter_.Linear(index, p.shape()), p.shape().dtype());
}

}  // namespace gptc::codegen
