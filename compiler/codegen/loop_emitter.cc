// The elementwise loop emitter (kind=loop): a grid-stride loop over the
// output elements; each thread handles `width` consecutive elements per
// iteration so that same-shaped operands and the results move with 16-byte
// vector loads and stores (Note [loop vectorisation]).
#include <algorithm>
#include <limits>
#include <map>

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

// Note [loop vectorisation]: with width W (16 bytes of the widest dtype among
// the results and the operands that have the result's element count, capped
// at 8 and dividing the element count), iteration i covers elements
// [i*W, i*W + W). An operand read at the thread's own element index (through
// elementwise ops and reshapes only) is loaded once per iteration as a
// vector<W> with alignment W*bytes and its lanes extracted; other reads
// (broadcasts, transposes, slices...) are scalar loads. Results are stored as
// vectors. Buffers are 256-byte aligned (buffer assignment), so W*bytes <= 16
// divides every vector's address.
constexpr int64_t kBlock = 256;
constexpr int64_t kMaxBlocks = 132 * 16;  // H100 SMs x 16: enough to fill the GPU

class LoopEmitter : public KernelEmitter {
 public:
  std::string_view Name() const override { return "loop"; }

  StatusOr<KernelSpec> Emit(const ir::Instruction& fusion, const std::string& name,
                            mlir::gpu::GPUModuleOp gpu_module) const override {
    ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
    std::vector<const ir::Instruction*> outputs = FusionOutputs(*fused);
    const ir::Shape& out_shape = outputs[0]->shape();
    for (const ir::Instruction* out : outputs) {
      if (out->shape().is_tuple() || out->shape().dims() != out_shape.dims()) {
        return Error("%{}: loop fusion outputs must share one shape; {} has {}, {} has {}",
                     fusion.name(), Describe(*outputs[0]), out_shape.ToString(), Describe(*out),
                     out->shape().ToString());
      }
    }
    const int64_t n = out_shape.num_elements();
    std::vector<ir::Instruction*> params = fused->parameters();

    int64_t widest = 1;
    for (const ir::Instruction* out : outputs)
      widest = std::max(widest, StorageBytes(out->shape().dtype()));
    for (const ir::Instruction* p : params) {
      if (p->shape().num_elements() == n)
        widest = std::max(widest, StorageBytes(p->shape().dtype()));
    }
    int64_t width = std::min<int64_t>(8, 16 / widest);
    while (width > 1 && n % width != 0) width /= 2;
    const int64_t iterations = n / width;
    const int64_t block = std::min(kBlock, std::max<int64_t>(32, (iterations + 31) / 32 * 32));
    const int64_t grid =
        std::max<int64_t>(1, std::min(kMaxBlocks, (iterations + block - 1) / block));
    const bool wide = n + grid * block >= std::numeric_limits<int32_t>::max();

    mlir::OpBuilder b(gpu_module.getContext());
    const int64_t num_params = static_cast<int64_t>(params.size() + outputs.size());
    mlir::gpu::GPUFuncOp func = CreateKernel(b, gpu_module, name, num_params, block, 0);
    mlir::Block* entry = &func.getBody().front();
    mlir::Location loc = b.getUnknownLoc();
    mlir::IntegerType index_type = wide ? b.getI64Type() : b.getI32Type();

    auto to_index = [&](Value v) {
      return b.create<mlir::arith::IndexCastOp>(loc, index_type, v).getResult();
    };
    Value tid = to_index(b.create<mlir::gpu::ThreadIdOp>(loc, mlir::gpu::Dimension::x));
    Value bid = to_index(b.create<mlir::gpu::BlockIdOp>(loc, mlir::gpu::Dimension::x));

    std::map<const ir::Instruction*, Value> vectors;  // per iteration: vector loads
    Value base;                                       // per iteration: first element
    auto read_parameter = [&](const ir::Instruction& p,
                              const ElementIndex& index) -> StatusOr<Value> {
      Value ptr = entry->getArgument(p.attrs().index);
      ir::DType dtype = p.shape().dtype();
      if (width > 1 && index.identity && p.shape().num_elements() == n) {
        Value& vec = vectors[&p];
        if (!vec) {
          mlir::OpBuilder::InsertionGuard guard(b);
          // Load right after `base` is defined, so every lane can use it.
          b.setInsertionPointAfterValue(base);
          mlir::Type storage = StorageType(b.getContext(), dtype);
          mlir::Type vec_type = mlir::VectorType::get({width}, storage);
          Value addr = b.create<mlir::LLVM::GEPOp>(loc, ptr.getType(), storage, ptr,
                                                   mlir::ValueRange{base}, true);
          vec = b.create<mlir::LLVM::LoadOp>(loc, vec_type, addr, width * StorageBytes(dtype));
        }
        Value lane = b.create<mlir::arith::ConstantOp>(loc, b.getI32IntegerAttr(index.lane));
        Value x = b.create<mlir::LLVM::ExtractElementOp>(loc, vec, lane);
        return FromStorage(b, loc, x, dtype);
      }
      return LoadElement(b, loc, ptr, index.linear, dtype);
    };
    // Scalar reads need a linear index; the emitter computes it from the multi-index.
    FusedEmitter* self = nullptr;
    FusedEmitter::Reader reader = [&](const ir::Instruction& p, const ElementIndex& index) {
      ElementIndex linear = index;
      linear.linear = self->Linear(index, p.shape());
      return read_parameter(p, linear);
    };
    FusedEmitter emitter(b, entry, index_type, "loop", reader, nullptr);
    self = &emitter;

    // for (i = bid * block + tid; i < iterations; i += grid * block)
    Value start = b.create<mlir::arith::AddIOp>(
        loc, b.create<mlir::arith::MulIOp>(loc, bid, emitter.IndexConstant(block)), tid);
    CreateFor(b, loc, start, emitter.IndexConstant(iterations), emitter.IndexConstant(grid * block),
              mlir::ValueRange{});
    Value i = mlir::cast<mlir::scf::ForOp>(b.getInsertionBlock()->getParentOp()).getInductionVar();
    base = width == 1
               ? i
               : b.create<mlir::arith::MulIOp>(loc, i, emitter.IndexConstant(width)).getResult();

    std::vector<std::vector<Value>> lanes(outputs.size());
    for (int64_t lane = 0; lane < width; ++lane) {
      ElementIndex index;
      index.linear =
          lane == 0
              ? base
              : b.create<mlir::arith::AddIOp>(loc, base, emitter.IndexConstant(lane)).getResult();
      index.identity = true;
      index.lane = static_cast<int>(lane);
      for (size_t o = 0; o < outputs.size(); ++o) {
        StatusOr<Value> v = emitter.Emit(*outputs[o], index);
        if (!v.ok()) return v.status().WithPrefix("%" + fusion.name());
        lanes[o].push_back(*v);
      }
    }
    for (size_t o = 0; o < outputs.size(); ++o) {
      ir::DType dtype = outputs[o]->shape().dtype();
      Value ptr = entry->getArgument(params.size() + o);
      if (width == 1) {
        StoreElement(b, loc, lanes[o][0], ptr, base, dtype);
        continue;
      }
      mlir::Type storage = StorageType(b.getContext(), dtype);
      mlir::Type vec_type = mlir::VectorType::get({width}, storage);
      Value vec = b.create<mlir::LLVM::UndefOp>(loc, vec_type);
      for (int64_t lane = 0; lane < width; ++lane) {
        Value pos = b.create<mlir::arith::ConstantOp>(loc, b.getI32IntegerAttr(lane));
        vec = b.create<mlir::LLVM::InsertElementOp>(loc, vec,
                                                    ToStorage(b, loc, lanes[o][lane], dtype), pos);
      }
      Value addr = b.create<mlir::LLVM::GEPOp>(loc, ptr.getType(), storage, ptr,
                                               mlir::ValueRange{base}, true);
      b.create<mlir::LLVM::StoreOp>(loc, vec, addr, width * StorageBytes(dtype));
    }

    KernelSpec spec;
    spec.name = name;
    spec.fusion = fusion.name();
    spec.kind = ir::FusionKind::kLoop;
    spec.grid = {grid, 1, 1};
    spec.block = {block, 1, 1};
    spec.params = KernelParams(fusion, 1);
    for (KernelParam& p : spec.params) p.min_alignment = width * StorageBytes(p.shape.dtype());
    return spec;
  }
};

}  // namespace

std::unique_ptr<KernelEmitter> MakeLoopEmitter() { return std::make_unique<LoopEmitter>(); }

}  // namespace gptc::codegen
