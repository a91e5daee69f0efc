// Emitters for the standalone gather and scatter-add instructions of the
// entry (the embedding lookup and its gradient), which the fusion pass
// leaves unfused. The instruction itself takes the fusion's place in Note
// [kernel ABI]: operands (table/operand, indices[, updates]), then the result.
//
// Note [gather kernels]: with the table viewed as [P, V, Q] around the
// gathered axis (V rows of Q elements) and N indices, element (p, i, q) of the
// result [P, N, Q] is table[p, idx[i], q]: a grid-stride loop over the result
// moving W consecutive q per iteration (16-byte vectors when Q allows).
// Indices are clamped to [0, V) (the evaluator rejects out-of-range ones).
//
// Scatter-add is two kernels (Note [multi-kernel instructions] in
// kernel_spec.h): NAME_init copies operand 0 into the result, then NAME adds
// the updates, each row's in the order of the indices (Note [deterministic
// scatter-add] in scatter_add_emitter.cc). Only f32 results are supported.
#include <algorithm>
#include <limits>

#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"
#include "compiler/codegen/kernel_emitter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace gptc::codegen {
namespace {

using mlir::Value;
namespace arith = mlir::arith;

constexpr int64_t kBlock = 256;
constexpr int64_t kMaxBlocks = 132 * 16;

// The [P, V, Q] view of `table` around `axis`, and N indices.
struct GatherGeometry {
  int64_t p = 1, v = 1, q = 1, n = 1;
};

GatherGeometry Geometry(const ir::Shape& table, const ir::Shape& indices, int64_t axis) {
  GatherGeometry g;
  for (int64_t d = 0; d < table.rank(); ++d) {
    if (d < axis) g.p *= table.dim(d);
    if (d > axis) g.q *= table.dim(d);
  }
  g.v = table.dim(axis);
  g.n = indices.num_elements();
  return g;
}

// Vector width: 16 bytes of `dtype`, at most 8, dividing `q`.
int64_t Width(ir::DType dtype, int64_t q) {
  int64_t width = std::min<int64_t>(8, 16 / StorageBytes(dtype));
  while (width > 1 && q % width != 0) width /= 2;
  return width;
}

// A kernel whose body is a grid-stride loop over `iterations`; calls
// body(b, i) inside the loop with `i` of `index_type`.
struct GridLoop {
  int64_t block = kBlock, grid = 1;
};

GridLoop LoopGeometry(int64_t iterations) {
  GridLoop g;
  g.block = std::min(kBlock, std::max<int64_t>(32, (iterations + 31) / 32 * 32));
  g.grid = std::max<int64_t>(1, std::min(kMaxBlocks, (iterations + g.block - 1) / g.block));
  return g;
}

// Emits `for (i = bid * block + tid; i < iterations; i += grid * block)` and
// leaves `b` in its body; returns i.
Value OpenGridLoop(mlir::OpBuilder& b, mlir::IntegerType index_type, const GridLoop& g,
                   int64_t iterations) {
  mlir::Location loc = b.getUnknownLoc();
  auto c = [&](int64_t v) {
    return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(index_type, v)).getResult();
  };
  auto to_index = [&](Value v) {
    return b.create<arith::IndexCastOp>(loc, index_type, v).getResult();
  };
  Value tid = to_index(b.create<mlir::gpu::ThreadIdOp>(loc, mlir::gpu::Dimension::x));
  Value bid = to_index(b.create<mlir::gpu::BlockIdOp>(loc, mlir::gpu::Dimension::x));
  Value start = b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, bid, c(g.block)), tid);
  auto loop = mlir::cast<mlir::scf::ForOp>(
      CreateFor(b, loc, start, c(iterations), c(g.grid * g.block), mlir::ValueRange{}));
  return loop.getInductionVar();
}

Value VectorLoad(mlir::OpBuilder& b, Value ptr, Value index, ir::DType dtype, int64_t width) {
  mlir::Location loc = b.getUnknownLoc();
  mlir::Type storage = StorageType(b.getContext(), dtype);
  Value addr = b.create<mlir::LLVM::GEPOp>(loc, ptr.getType(), storage, ptr,
                                           mlir::ValueRange{index}, true);
  mlir::Type type = width == 1 ? storage : mlir::VectorType::get({width}, storage);
  return b.create<mlir::LLVM::LoadOp>(loc, type, addr, width * StorageBytes(dtype));
}

void VectorStore(mlir::OpBuilder& b, Value value, Value ptr, Value index, ir::DType dtype,
                 int64_t width) {
  mlir::Location loc = b.getUnknownLoc();
  mlir::Type storage = StorageType(b.getContext(), dtype);
  Value addr = b.create<mlir::LLVM::GEPOp>(loc, ptr.getType(), storage, ptr,
                                           mlir::ValueRange{index}, true);
  b.create<mlir::LLVM::StoreOp>(loc, value, addr, width * StorageBytes(dtype));
}

// Element offset of table row (p, idx[i]) plus q, for result element `e`
// (a multiple of the vector width) of [P, N, Q].
Value SourceOffset(mlir::OpBuilder& b, mlir::IntegerType index_type, const GatherGeometry& g,
                   Value indices, ir::DType index_dtype, Value e) {
  mlir::Location loc = b.getUnknownLoc();
  auto c = [&](int64_t v) {
    return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(index_type, v)).getResult();
  };
  Value q = g.q == 1 ? c(0) : b.create<arith::RemUIOp>(loc, e, c(g.q)).getResult();
  Value row = g.q == 1 ? e : b.create<arith::DivUIOp>(loc, e, c(g.q)).getResult();  // p * N + i
  Value i = g.p == 1 ? row : b.create<arith::RemUIOp>(loc, row, c(g.n)).getResult();
  Value idx = LoadElement(b, loc, indices, i, index_dtype);
  if (index_dtype == ir::DType::kU16) {
    idx = b.create<arith::ExtUIOp>(loc, index_type, idx);
  } else if (index_type.getWidth() == 64) {
    idx = b.create<arith::ExtSIOp>(loc, index_type, idx);
  }
  idx = b.create<arith::MaxSIOp>(loc, idx, c(0));
  idx = b.create<arith::MinSIOp>(loc, idx, c(g.v - 1));
  Value src_row = idx;
  if (g.p > 1) {
    Value p = b.create<arith::DivUIOp>(loc, row, c(g.n));
    src_row = b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, p, c(g.v)), idx);
  }
  Value offset = g.q == 1 ? src_row : b.create<arith::MulIOp>(loc, src_row, c(g.q)).getResult();
  return g.q == 1 ? offset : b.create<arith::AddIOp>(loc, offset, q).getResult();
}

KernelSpec MakeSpec(const ir::Instruction& inst, const std::string& name, const GridLoop& g,
                    int64_t width) {
  KernelSpec spec;
  spec.name = name;
  spec.fusion = inst.name();
  spec.kind = ir::FusionKind::kLoop;
  spec.grid = {g.grid, 1, 1};
  spec.block = {g.block, 1, 1};
  spec.params = KernelParams(inst, 1);
  for (KernelParam& p : spec.params) {
    p.min_alignment = StorageBytes(p.shape.dtype()) * (ir::IsFloat(p.shape.dtype()) ? width : 1);
  }
  return spec;
}

bool Wide(int64_t elements) { return elements + 2 * kBlock * kMaxBlocks >= (1LL << 31); }

class GatherEmitter : public KernelEmitter {
 public:
  std::string_view Name() const override { return "gather"; }

  StatusOr<KernelSpec> Emit(const ir::Instruction& inst, const std::string& name,
                            mlir::gpu::GPUModuleOp gpu_module) const override {
    if (inst.opcode() != ir::Opcode::kGather) return Error("%{}: not a gather", inst.name());
    const ir::Shape& table = inst.operand(0)->shape();
    const ir::Shape& indices = inst.operand(1)->shape();
    GatherGeometry g = Geometry(table, indices, inst.attrs().index);
    const ir::DType dtype = table.dtype();
    const int64_t width = Width(dtype, g.q);
    const int64_t n = inst.shape().num_elements();
    GridLoop loop = LoopGeometry(n / width);
    mlir::OpBuilder b(gpu_module.getContext());
    mlir::gpu::GPUFuncOp func = CreateKernel(b, gpu_module, name, 3, loop.block, 0);
    mlir::Block* entry = &func.getBody().front();
    mlir::IntegerType index_type = Wide(table.num_elements() + n) ? b.getI64Type() : b.getI32Type();
    mlir::Location loc = b.getUnknownLoc();
    Value i = OpenGridLoop(b, index_type, loop, n / width);
    Value e = width == 1 ? i
                         : b.create<arith::MulIOp>(
                                loc, i,
                                b.create<arith::ConstantOp>(loc, b.getIntegerAttr(index_type, width)))
                               .getResult();
    Value src = SourceOffset(b, index_type, g, entry->getArgument(1), indices.dtype(), e);
    Value v = VectorLoad(b, entry->getArgument(0), src, dtype, width);
    VectorStore(b, v, entry->getArgument(2), e, dtype, width);
    return MakeSpec(inst, name, loop, width);
  }
};

// NAME_init: result = operand 0 (Note [gather kernels]).
class ScatterAddInitEmitter : public KernelEmitter {
 public:
  std::string_view Name() const override { return "scatter_add_init"; }

  StatusOr<KernelSpec> Emit(const ir::Instruction& inst, const std::string& name,
                            mlir::gpu::GPUModuleOp gpu_module) const override {
    const ir::Shape& shape = inst.shape();
    const ir::DType dtype = shape.dtype();
    const int64_t n = shape.num_elements();
    const int64_t width = Width(dtype, n);
    GridLoop loop = LoopGeometry(n / width);
    mlir::OpBuilder b(gpu_module.getContext());
    mlir::gpu::GPUFuncOp func = CreateKernel(b, gpu_module, name, 4, loop.block, 0);
    mlir::Block* entry = &func.getBody().front();
    mlir::IntegerType index_type = Wide(n) ? b.getI64Type() : b.getI32Type();
    mlir::Location loc = b.getUnknownLoc();
    Value i = OpenGridLoop(b, index_type, loop, n / width);
    Value e = width == 1 ? i
                         : b.create<arith::MulIOp>(
                                loc, i,
                                b.create<arith::ConstantOp>(loc, b.getIntegerAttr(index_type, width)))
                               .getResult();
    Value v = VectorLoad(b, entry->getArgument(0), e, dtype, width);
    VectorStore(b, v, entry->getArgument(3), e, dtype, width);
    KernelSpec spec = MakeSpec(inst, name, loop, width);
    spec.copies_operand = true;
    return spec;
  }
};

}  // namespace

std::unique_ptr<KernelEmitter> MakeGatherEmitter() { return std::make_unique<GatherEmitter>(); }
std::unique_ptr<KernelEmitter> MakeScatterAddInitEmitter() {
  return std::make_unique<ScatterAddInitEmitter>();
}

}  // namespace gptc::codegen
