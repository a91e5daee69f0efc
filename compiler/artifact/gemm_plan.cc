#include "compiler/artifact/gemm_plan.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "compiler/analysis/gemm_epilogue.h"
#include "compiler/ir/computation.h"
#include "compiler/ir/patterns.h"

namespace gptc::artifact {

namespace {

using ir::Instruction;
using ir::Opcode;

int64_t Product(const std::vector<int64_t>& dims, int64_t begin, int64_t end) {
  int64_t p = 1;
  for (int64_t i = begin; i < end; ++i) p *= dims[i];
  return p;
}

// Parameter `i` of a fusion's computation.
const Instruction* Parameter(const Instruction& fusion, int64_t i) {
  for (const Instruction* p : fusion.called_computation()->parameters()) {
    if (p->attrs().index == i) return p;
  }
  return nullptr;
}

// One dot operand as memory: `batch` matrices of `free` x `contracting`
// elements, stored [batch][free][contracting] or, with `k_first`,
// [batch][contracting][free]. Role-independent, so swapping lhs and rhs for a
// transposed result is swapping two of these.
struct OperandView {
  int64_t operand = -1;  // fusion (or dot) operand number
  ir::DType dtype = ir::DType::kF32;
  int64_t batch = 1;
  int64_t free = 1;
  int64_t contracting = 1;
  bool k_first = false;
};

// Classifies the dims of a dot operand of shape `dims`: batch dims must lead
// in order, the contracting dims (in `contracting` order) and the free dims
// must each be one ascending contiguous run.
StatusOr<OperandView> Classify(const std::string& name, const char* side,
                               const std::vector<int64_t>& dims,
                               const std::vector<int64_t>& batch,
                               const std::vector<int64_t>& contracting) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t nb = static_cast<int64_t>(batch.size());
  for (int64_t i = 0; i < nb; ++i) {
    if (batch[i] != i) {
      return Error("%{}: {} batch dims {} are not the leading dims (needs a copy)", name, side,
                   ir::DimsToString(batch));
    }
  }
  OperandView v;
  v.batch = Product(dims, 0, nb);
  if (contracting.empty()) return Error("%{}: dot without contracting dims", name);
  int64_t k0 = contracting.front();
  for (size_t i = 0; i < contracting.size(); ++i) {
    if (contracting[i] != k0 + static_cast<int64_t>(i)) {
      return Error("%{}: {} contracting dims {} are not one ascending run (needs a copy)", name,
                   side, ir::DimsToString(contracting));
    }
  }
  int64_t k1 = k0 + static_cast<int64_t>(contracting.size());
  if (k0 < nb || k1 > rank) return Error("%{}: {} contracting dims overlap batch dims", name, side);
  v.contracting = Product(dims, k0, k1);
  bool free_before = k0 > nb;
  bool free_after = k1 < rank;
  if (free_before && free_after) {
    return Error("%{}: {} free dims surround the contracting dims {} (needs a copy)", name, side,
                 ir::DimsToString(contracting));
  }
  v.free = free_before ? Product(dims, nb, k0) : Product(dims, k1, rank);
  v.k_first = free_after;
  return v;
}

// Walks a dot operand inside a fused computation back to the fusion
// parameter it reads: reshapes are bitcasts, last-two-dims transposes flip
// the storage order when they swap exactly the free and contracting blocks.
Status ResolveThroughLayout(const std::string& name, const Instruction* x, OperandView& v) {
  while (x->opcode() != Opcode::kParameter) {
    if (x->opcode() == Opcode::kReshape) {
      x = x->operand(0);
      continue;
    }
    if (x->opcode() == Opcode::kTranspose) {
      const std::vector<int64_t>& d = x->shape().dims();
      const int64_t r = x->shape().rank();
      std::vector<int64_t> swap_last_two(r);
      for (int64_t i = 0; i < r; ++i) swap_last_two[i] = i;
      if (r >= 2) std::swap(swap_last_two[r - 2], swap_last_two[r - 1]);
      int64_t first = v.k_first ? v.contracting : v.free;
      int64_t second = v.k_first ? v.free : v.contracting;
      if (r < 2 || x->attrs().dimensions != swap_last_two || d[r - 1] != second ||
          d[r - 2] != first) {
        return Error("%{}: operand transpose %{} does not swap the matrix dims (needs a copy)",
                     name, x->name());
      }
      v.k_first = !v.k_first;
      x = x->operand(0);
      continue;
    }
    return Error("%{}: dot operand %{} ({}) is not a layout cuBLASLt reads", name, x->name(),
                 ir::OpcodeName(x->opcode()));
  }
  v.operand = x->attrs().index;
  v.dtype = x->shape().dtype();
  return Status::Ok();
}

// Fills the cuBLASLt problem from the row-major D[batch, M, N] = lhs . rhs
// per Note [row-major on cuBLASLt].
Status FillProblem(const std::string& name, const OperandView& lhs, const OperandView& rhs,
                   ir::DType d_dtype, GemmPlan& plan) {
  std::optional<program::GemmDType> ab = program::GemmDTypeOf(lhs.dtype);
  if (!ab || lhs.dtype != rhs.dtype) {
    return Error("%{}: operand dtypes {} x {} have no cuBLASLt matmul", name,
                 ir::DTypeName(lhs.dtype), ir::DTypeName(rhs.dtype));
  }
  std::optional<program::GemmDType> dt = program::GemmDTypeOf(d_dtype);
  if (!dt)
    return Error("%{}: result dtype {} has no cuBLASLt matmul", name, ir::DTypeName(d_dtype));
  const int64_t M = lhs.free, N = rhs.free, K = lhs.contracting, batch = lhs.batch;
  plan.m = N;
  plan.n = M;
  plan.k = K;
  plan.batch_count = batch;
  auto layout = [&](program::GemmDType dtype, int64_t rows, int64_t cols) {
    return program::GemmLayout{dtype, rows, cols, rows, batch, batch > 1 ? rows * cols : 0};
  };
  using program::GemmOp;
  // cuBLASLt A = rhs: [K][N] in memory is column-major [N, K] (op N).
  plan.transa = rhs.k_first ? GemmOp::kN : GemmOp::kT;
  plan.a = rhs.k_first ? layout(*ab, N, K) : layout(*ab, K, N);
  plan.a_operand = rhs.operand;
  // cuBLASLt B = lhs: [M][K] in memory is column-major [K, M] (op N).
  plan.transb = lhs.k_first ? GemmOp::kT : GemmOp::kN;
  plan.b = lhs.k_first ? layout(*ab, M, K) : layout(*ab, K, M);
  plan.b_operand = lhs.operand;
  plan.d = layout(*dt, N, M);
  plan.c = plan.d;
  return Status::Ok();
}

StatusOr<std::pair<OperandView, OperandView>> ClassifyDot(const Instruction& dot) {
  const ir::DotDimensions& dd = dot.attrs().dot;
  // Pair the contracting dims in lhs order; the rhs must then be ascending too.
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (size_t i = 0; i < dd.lhs_contracting.size(); ++i) {
    pairs.emplace_back(dd.lhs_contracting[i], dd.rhs_contracting[i]);
  }
  std::sort(pairs.begin(), pairs.end());
  std::vector<int64_t> lc, rc;
  for (auto [l, r] : pairs) {
    lc.push_back(l);
    rc.push_back(r);
  }
  ASSIGN_OR_RETURN(OperandView lhs, Classify(dot.name(), "lhs", dot.operand(0)->shape().dims(),
                                             dd.lhs_batch, lc));
  ASSIGN_OR_RETURN(OperandView rhs, Classify(dot.name(), "rhs", dot.operand(1)->shape().dims(),
                                             dd.rhs_batch, rc));
  lhs.dtype = dot.operand(0)->shape().dtype();
  rhs.dtype = dot.operand(1)->shape().dtype();
  lhs.operand = 0;
  rhs.operand = 1;
  return std::pair{lhs, rhs};
}

// The one dot of a gemm fusion, its operands resolved to fusion parameters.
struct FusedDot {
  const Instruction* dot = nullptr;
  OperandView lhs, rhs;
};

StatusOr<FusedDot> FindFusedDot(const Instruction& fusion) {
  const ir::Computation& c = *fusion.called_computation();
  const std::string& name = fusion.name();
  FusedDot f;
  for (const auto& inst : c.instructions()) {
    if (inst->opcode() != Opcode::kDot) continue;
    if (f.dot != nullptr) return Error("%{}: gemm fusion with more than one dot", name);
    f.dot = inst.get();
  }
  if (f.dot == nullptr) return Error("%{}: gemm fusion without a dot", name);
  ASSIGN_OR_RETURN(auto views, ClassifyDot(*f.dot));
  std::tie(f.lhs, f.rhs) = views;
  RETURN_IF_ERROR(ResolveThroughLayout(name, f.dot->operand(0), f.lhs));
  RETURN_IF_ERROR(ResolveThroughLayout(name, f.dot->operand(1), f.rhs));
  return f;
}

// The bias, residual and aux buffers of `e`, checked against cuBLASLt's
// limits (Note [cuBLASLt epilogue limits] in compiler/analysis/
// gemm_epilogue.h).
Status PlaceEpilogueBuffers(const Instruction& fusion, const ir::GemmEpilogue& e, GemmPlan& plan) {
  const std::string& name = fusion.name();
  const bool gelu = e.activation != ir::GemmActivation::kNone;
  if (e.transposed && (e.bias >= 0 || e.residual >= 0 || gelu)) {
    return Error("%{}: transposed result with an epilogue", name);
  }
  analysis::GemmEpilogueBuffers buffers{.d = ir::FusionOutputShape(fusion, e.d),
                                        .d_ld = plan.d.ld,
                                        .batch = plan.batch_count,
                                        .bias_grad = e.bias_grad_out >= 0};
  if (e.bias >= 0) {
    buffers.bias = fusion.operand(e.bias)->shape().dtype();
    plan.bias_operand = e.bias;
    plan.bias_dtype = program::GemmDTypeOf(*buffers.bias);
  }
  if (e.residual >= 0) {
    buffers.residual = fusion.operand(e.residual)->shape().dtype();
    plan.c_operand = e.residual;
    plan.beta = 1.0;
  }
  plan.aux_operand = e.aux_in;
  plan.aux_output = e.aux_out;
  if (e.aux_in >= 0 || e.aux_out >= 0) {
    buffers.aux = e.aux_in >= 0 ? Parameter(fusion, e.aux_in) : ir::FusionOutput(fusion, e.aux_out);
    plan.aux_ld = plan.d.ld;
  }
  if (std::optional<std::string> breach = analysis::BrokenGemmEpilogueLimit(buffers)) {
    return Error("%{}: {}", name, *breach);
  }
  return Status::Ok();
}

// The cuBLASLt epilogue of record `e` (Note [gemm epilogue table]).
StatusOr<program::GemmEpilogue> ChooseEpilogue(const Instruction& fusion, const ir::GemmEpilogue& e,
                                               GemmPlan& plan) {
  using program::EpilogueAux;
  using program::EpilogueBias;
  const std::string& name = fusion.name();
  EpilogueBias bias = e.bias >= 0 ? EpilogueBias::kRead : EpilogueBias::kNone;
  if (e.bias_grad_out >= 0) {
    if (e.bias >= 0 || e.residual >= 0 || e.activation != ir::GemmActivation::kNone) {
      return Error("%{}: bias gradient combined with another epilogue", name);
    }
    plan.bias_grad_output = e.bias_grad_out;
    plan.bias_dtype = program::GemmDTypeOf(ir::FusionOutputShape(fusion, e.bias_grad_out).dtype());
    if (e.bias_grad_of == plan.a_operand) {
      bias = EpilogueBias::kGradientOfA;
    } else if (e.bias_grad_of == plan.b_operand) {
      bias = EpilogueBias::kGradientOfB;
    } else {
      return Error("%{}: bias gradient of operand {} that the dot does not read", name,
                   e.bias_grad_of);
    }
  }
  const EpilogueAux aux = e.aux_out >= 0  ? EpilogueAux::kWrite
                          : e.aux_in >= 0 ? EpilogueAux::kRead
                                          : EpilogueAux::kNone;
  std::optional<program::GemmEpilogue> found = program::FindGemmEpilogue(e.activation, bias, aux);
  if (!found) {
    return Error("%{}: cuBLASLt has no epilogue for {}", name, ir::GemmEpilogueToString(e));
  }
  return *found;
}

StatusOr<GemmPlan> PlanFusion(const Instruction& fusion) {
  const std::string& name = fusion.name();
  const std::optional<ir::GemmEpilogue>& e = fusion.attrs().gemm_epilogue;
  if (!e) return Error("%{}: gemm fusion without its epilogue record", name);
  ASSIGN_OR_RETURN(FusedDot f, FindFusedDot(fusion));
  if (e->transposed) std::swap(f.lhs, f.rhs);
  GemmPlan plan;
  plan.d_output = e->d;
  RETURN_IF_ERROR(
      FillProblem(name, f.lhs, f.rhs, ir::FusionOutputShape(fusion, e->d).dtype(), plan));
  RETURN_IF_ERROR(PlaceEpilogueBuffers(fusion, *e, plan));
  ASSIGN_OR_RETURN(plan.epilogue, ChooseEpilogue(fusion, *e, plan));
  plan.notes = analysis::SkippedRoundings(fusion, *e);
  return plan;
}

}  // namespace

StatusOr<GemmPlan> PlanGemm(const Instruction& inst) {
  if (inst.opcode() == Opcode::kFusion && inst.attrs().fusion_kind == ir::FusionKind::kGemm) {
    return PlanFusion(inst);
  }
  if (inst.opcode() != Opcode::kDot) {
    return Error("%{}: not a dot or a gemm fusion", inst.name());
  }
  ASSIGN_OR_RETURN(auto views, ClassifyDot(inst));
  GemmPlan plan;
  RETURN_IF_ERROR(FillProblem(inst.name(), views.first, views.second, inst.shape().dtype(), plan));
  return plan;
}

}  // namespace gptc::artifact
