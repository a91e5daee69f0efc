#include "compiler/codegen/attention_wgmma.h"

#include "compiler/codegen/wgmma_asm.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace gptc::codegen {
namespace {

using mlir::Value;
namespace arith = mlir::arith;
namespace LLVM = mlir::LLVM;

// `a` with `operands`; its result of `result` type (null: none).
Value CallAsm(mlir::OpBuilder& b, mlir::Location loc, const InlineAsm& a, mlir::ValueRange operands,
              mlir::Type result) {
  auto op = b.create<LLVM::InlineAsmOp>(loc, result ? mlir::TypeRange{result} : mlir::TypeRange{},
                                        operands, a.text, a.constraints,
                                        /*has_side_effects=*/true, /*is_align_stack=*/false,
                                        LLVM::AsmDialectAttr(), mlir::ArrayAttr());
  return result ? op.getResult(0) : Value();
}

mlir::Type F32Struct(mlir::OpBuilder& b, size_t count) {
  return LLVM::LLVMStructType::getLiteral(b.getContext(),
                                          std::vector<mlir::Type>(count, b.getF32Type()));
}

// The fixed fields of a descriptor (the start address is added in the
// kernel): LBO and SBO >> 4 in bits 16-29 and 32-45, the swizzle mode in
// 62-63 (1: 128 bytes, 2: 64, 3: 32), as Note [emulated warpgroup matrix
// operations] has them.
uint64_t DescriptorFields(int64_t lbo, int64_t sbo, int64_t swizzle) {
  const uint64_t mode = swizzle == 128 ? 1 : swizzle == 64 ? 2 : 3;
  return (static_cast<uint64_t>(lbo) >> 4 & 0x3fff) << 16 |
         (static_cast<uint64_t>(sbo) >> 4 & 0x3fff) << 32 | mode << 62;
}

}  // namespace

int64_t SwizzleBytes(int64_t cols) {
  for (int64_t w : {128, 64, 32}) {
    if (2 * cols % w == 0) return w;
  }
  return 0;
}

void WgmmaFence(mlir::OpBuilder& b, mlir::Location loc) {
  CallAsm(b, loc, WgmmaFenceAsm(), {}, nullptr);
}
void WgmmaCommit(mlir::OpBuilder& b, mlir::Location loc) {
  CallAsm(b, loc, WgmmaCommitAsm(), {}, nullptr);
}
void WgmmaWait(mlir::OpBuilder& b, mlir::Location loc, int64_t pending) {
  CallAsm(b, loc, WgmmaWaitAsm(pending), {}, nullptr);
}
void FenceProxyAsync(mlir::OpBuilder& b, mlir::Location loc) {
  CallAsm(b, loc, FenceProxyAsyncAsm(), {}, nullptr);
}

// Note [swizzled tiles]: each k-step's descriptor is the tile's start
// address >> 4 plus a constant, or'ed with the fixed fields.
WgmmaAccumulators IssueWgmma(WarpRowKernel& kernel, const std::vector<Fragment>& a,
                             const SharedTile& tile, bool transposed,
                             const std::vector<Fragment>& acc) {
  mlir::OpBuilder& b = kernel.b();
  const mlir::Location loc = kernel.loc();
  const int64_t w = tile.swizzle_bytes();
  const int64_t n = transposed ? tile.rows() : tile.cols();
  const WgmmaForm form{.n = n, .register_a = true, .trans_b = !transposed};
  const uint64_t fields = DescriptorFields(transposed ? 16 : tile.rows() * w, 8 * w, w);
  auto i64 = [&](int64_t v) {
    return b.create<arith::ConstantOp>(loc, b.getI64IntegerAttr(v)).getResult();
  };
  Value start = b.create<arith::AndIOp>(
      loc,
      b.create<arith::ShRUIOp>(loc, b.create<LLVM::PtrToIntOp>(loc, b.getI64Type(), tile.base()),
                               i64(4)),
      i64(0x3fff));
  std::vector<Value> regs;
  for (const Fragment& f : acc) regs.insert(regs.end(), f.begin(), f.end());
  const bool accumulate = !regs.empty();
  if (!accumulate) regs.assign(form.accumulators(), kernel.F32(0));
  const InlineAsm text = WgmmaAsm(form);
  const mlir::Type result = F32Struct(b, regs.size());
  for (size_t kk = 0; kk < a.size(); ++kk) {
    const int64_t k = static_cast<int64_t>(kk);
    const int64_t offset = transposed ? 32 * k / w * tile.rows() * w + 32 * k % w : 16 * k * w;
    Value desc = b.create<arith::OrIOp>(loc, b.create<arith::AddIOp>(loc, start, i64(offset >> 4)),
                                        i64(static_cast<int64_t>(fields)));
    std::vector<Value> operands(a[kk].begin(), a[kk].end());
    operands.push_back(desc);
    operands.push_back(
        b.create<arith::ConstantOp>(loc, b.getI32IntegerAttr(accumulate || kk > 0 ? 1 : 0)));
    operands.insert(operands.end(), regs.begin(), regs.end());
    Value d = CallAsm(b, loc, text, operands, result);
    for (size_t i = 0; i < regs.size(); ++i) {
      regs[i] = b.create<LLVM::ExtractValueOp>(loc, d, static_cast<int64_t>(i));
    }
  }
  return {std::move(regs)};
}

std::vector<Fragment> CompleteWgmma(mlir::OpBuilder& b, mlir::Location loc,
                                    const std::vector<WgmmaAccumulators>& chains) {
  std::vector<Value> regs;
  for (const WgmmaAccumulators& c : chains) regs.insert(regs.end(), c.regs.begin(), c.regs.end());
  Value fenced = CallAsm(b, loc, WgmmaRegisterFenceAsm(static_cast<int64_t>(regs.size())), regs,
                         F32Struct(b, regs.size()));
  std::vector<Fragment> out(regs.size() / 4);
  for (size_t i = 0; i < regs.size(); ++i) {
    out[i / 4][i % 4] = b.create<LLVM::ExtractValueOp>(loc, fenced, static_cast<int64_t>(i));
  }
  return out;
}

std::vector<Fragment> WgmmaProduct(WarpRowKernel& kernel, const std::vector<Fragment>& a,
                                   const SharedTile& tile, bool transposed,
                                   const std::vector<Fragment>& acc) {
  mlir::OpBuilder& b = kernel.b();
  WgmmaFence(b, kernel.loc());
  WgmmaAccumulators chain = IssueWgmma(kernel, a, tile, transposed, acc);
  WgmmaCommit(b, kernel.loc());
  WgmmaWait(b, kernel.loc(), 0);
  return CompleteWgmma(b, kernel.loc(), {chain});
}

}  // namespace gptc::codegen
