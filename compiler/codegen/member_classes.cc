#include "compiler/codegen/member_classes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace gptc::codegen {

using mlir::Value;

Value SelectMember(mlir::OpBuilder& b, FusedEmitter& emitter, mlir::Block* entry,
                   const std::vector<std::vector<int64_t>>& args, int64_t blocks_per_member,
                   Value class_bid, std::vector<Value>& selected) {
  mlir::Location loc = b.getUnknownLoc();
  selected.clear();
  for (int64_t arg : args[0]) selected.push_back(entry->getArgument(arg));
  if (args.size() == 1) return class_bid;
  Value per_member = emitter.IndexConstant(blocks_per_member);
  Value member = b.create<mlir::arith::DivUIOp>(loc, class_bid, per_member);
  Value member_bid = b.create<mlir::arith::SubIOp>(
      loc, class_bid, b.create<mlir::arith::MulIOp>(loc, member, per_member));
  std::vector<Value> is(args.size());
  for (size_t m = 1; m < args.size(); ++m) {
    is[m] = b.create<mlir::arith::CmpIOp>(loc, mlir::arith::CmpIPredicate::eq, member,
                                          emitter.IndexConstant(static_cast<int64_t>(m)));
  }
  for (size_t k = 0; k < selected.size(); ++k) {
    Value& v = selected[k];
    const Value first = v;
    for (size_t m = 1; m < args.size(); ++m) {
      Value arg = entry->getArgument(args[m][k]);
      if (arg != first) v = b.create<mlir::LLVM::SelectOp>(loc, is[m], arg, v);
    }
  }
  return member_bid;
}

Value VectorLane(mlir::OpBuilder& b, mlir::Location loc, Value ptr, Value base, ir::DType dtype,
                 int64_t width, int lane, Value& vec) {
  if (!vec) {
    mlir::Type storage = StorageType(b.getContext(), dtype);
    mlir::Type vec_type = mlir::VectorType::get({width}, storage);
    Value addr = b.create<mlir::LLVM::GEPOp>(loc, ptr.getType(), storage, ptr,
                                             mlir::ValueRange{base}, true);
    vec = b.create<mlir::LLVM::LoadOp>(loc, vec_type, addr, width * StorageBytes(dtype));
  }
  Value at = b.create<mlir::arith::ConstantOp>(loc, b.getI32IntegerAttr(lane));
  Value x = b.create<mlir::LLVM::ExtractElementOp>(loc, vec, at);
  return FromStorage(b, loc, x, dtype);
}

}  // namespace gptc::codegen
