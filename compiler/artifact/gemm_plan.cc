#include "compiler/artifact/gemm_plan.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "compiler/ir/computation.h"
#include "passes/gelu_epilogue.h"

namespace gptc::artifact {

namespace {

using ir::Instruction;
using ir::Opcode;

int64_t Product(const std::vector<int64_t>& dims, int64_t begin, int64_t end) {
  int64_t p = 1;
  for (int64_t i = begin; i < end; ++i) p *= dims[i];
  return p;
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

const Instruction* SingleUser(const Instruction* x) {
  return x->users().size() == 1 ? x->users()[0] : nullptr;
}

// Skips converts after `x`; notes a narrowing that cuBLASLt does not repeat.
const Instruction* SkipConverts(const Instruction* x, GemmPlan& plan) {
  for (const Instruction* u = SingleUser(x); u != nullptr && u->opcode() == Opcode::kConvert;
       u = SingleUser(x)) {
    if (ir::DTypeBytes(x->shape().dtype()) < ir::DTypeBytes(u->shape().dtype())) {
      std::string note = fmt::format("{} rounding of %{} is skipped (cuBLASLt keeps f32)",
                                     ir::DTypeName(x->shape().dtype()), x->name());
      plan.notes.push_back(std::move(note));
    }
    x = u;
  }
  return x;
}

// The fusion parameter `x` reads through converts, or null.
const Instruction* ParameterThroughConverts(const Instruction* x) {
  while (x->opcode() == Opcode::kConvert) x = x->operand(0);
  return x->opcode() == Opcode::kParameter ? x : nullptr;
}

// The root values of the fused computation: the root or its tuple elements.
std::vector<const Instruction*> Outputs(const ir::Computation& c) {
  const Instruction* root = c.root();
  if (root->opcode() != Opcode::kTuple) return {root};
  return {root->operands().begin(), root->operands().end()};
}

int64_t OutputIndex(const std::vector<const Instruction*>& outputs, const Instruction* x) {
  auto it = std::find(outputs.begin(), outputs.end(), x);
  return it == outputs.end() ? -1 : it - outputs.begin();
}

// Whether `narrow` is a convert of `wide`, looking into one producing
// fusion: convert(wide); or element i of a multi-output fusion whose root
// element i is convert(parameter j) with operand j == wide, or convert(root
// element k) with wide == element k of the same fusion.
bool IsConvertOf(const Instruction* narrow, const Instruction* wide) {
  if (narrow->opcode() == Opcode::kConvert) return narrow->operand(0) == wide;
  int64_t element = 0;
  const Instruction* f = narrow;
  if (f->opcode() == Opcode::kGetTupleElement) {
    element = f->attrs().index;
    f = f->operand(0);
  }
  if (f->opcode() != Opcode::kFusion) return false;
  const Instruction* root = f->called_computation()->root();
  const Instruction* e = root->opcode() == Opcode::kTuple ? root->operand(element) : root;
  if (e->opcode() != Opcode::kConvert) return false;
  const Instruction* src = e->operand(0);
  if (src->opcode() == Opcode::kParameter) return f->operand(src->attrs().index) == wide;
  if (root->opcode() != Opcode::kTuple || wide->opcode() != Opcode::kGetTupleElement ||
      wide->operand(0) != f) {
    return false;
  }
  return root->operand(wide->attrs().index) == src;
}

// The dot operand (a_operand or b_operand of `plan`) of `fusion` that is a
// narrower convert of fusion operand `reduced`, or -1: the bias gradient of
// the f32 gradient can then be taken from its bf16 copy the gemm reads.
int64_t ConvertedOperand(const Instruction& fusion, int64_t reduced, GemmPlan& plan) {
  for (int64_t o : {plan.a_operand, plan.b_operand}) {
    if (IsConvertOf(fusion.operand(o), fusion.operand(reduced))) {
      plan.notes.push_back(fmt::format("bias gradient summed from %{} (the {} copy of %{})",
                                       fusion.operand(o)->name(),
                                       ir::DTypeName(fusion.operand(o)->shape().dtype()),
                                       fusion.operand(reduced)->name()));
      return o;
    }
  }
  return -1;
}

// Fills the cuBLASLt problem from the row-major D[batch, M, N] = lhs . rhs
// per Note [row-major on cuBLASLt].
Status FillProblem(const std::string& name, const OperandView& lhs, const OperandView& rhs,
                   ir::DType d_dtype, GemmPlan& plan) {
  std::string ab = CudaDataType(lhs.dtype);
  if (ab.empty() || lhs.dtype != rhs.dtype) {
    return Error("%{}: operand dtypes {} x {} have no cuBLASLt matmul", name,
                 ir::DTypeName(lhs.dtype), ir::DTypeName(rhs.dtype));
  }
  std::string dt = CudaDataType(d_dtype);
  if (dt.empty()) return Error("%{}: result dtype {} has no cuBLASLt matmul", name,
                               ir::DTypeName(d_dtype));
  const int64_t M = lhs.free, N = rhs.free, K = lhs.contracting, batch = lhs.batch;
  plan.m = N;
  plan.n = M;
  plan.k = K;
  plan.batch_count = batch;
  auto layout = [&](std::string dtype, int64_t rows, int64_t cols) {
    return MatrixLayout{std::move(dtype), rows, cols, rows, batch, batch > 1 ? rows * cols : 0};
  };
  // cuBLASLt A = rhs: [K][N] in memory is column-major [N, K] (op N).
  plan.transa = rhs.k_first ? "CUBLAS_OP_N" : "CUBLAS_OP_T";
  plan.a = rhs.k_first ? layout(ab, N, K) : layout(ab, K, N);
  plan.a_operand = rhs.operand;
  // cuBLASLt B = lhs: [M][K] in memory is column-major [K, M] (op N).
  plan.transb = lhs.k_first ? "CUBLAS_OP_T" : "CUBLAS_OP_N";
  plan.b = lhs.k_first ? layout(ab, M, K) : layout(ab, K, M);
  plan.b_operand = lhs.operand;
  plan.d = layout(dt, N, M);
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

StatusOr<GemmPlan> PlanFusion(const Instruction& fusion) {
  const ir::Computation& c = *fusion.called_computation();
  const std::string& name = fusion.name();
  const Instruction* dot = nullptr;
  for (const auto& inst : c.instructions()) {
    if (inst->opcode() != Opcode::kDot) continue;
    if (dot != nullptr) return Error("%{}: gemm fusion with more than one dot", name);
    dot = inst.get();
  }
  if (dot == nullptr) return Error("%{}: gemm fusion without a dot", name);
  ASSIGN_OR_RETURN(auto views, ClassifyDot(*dot));
  auto [lhs, rhs] = views;
  RETURN_IF_ERROR(ResolveThroughLayout(name, dot->operand(0), lhs));
  RETURN_IF_ERROR(ResolveThroughLayout(name, dot->operand(1), rhs));

  GemmPlan plan;
  const std::vector<const Instruction*> outputs = Outputs(c);
  std::set<const Instruction*> accounted;
  // Epilogue: converts, bias, converts, GELU, converts, residual, converts, or
  // a 2-D transpose of the dot (the order fusion absorbs them in).
  const Instruction* cur = dot;
  const Instruction* bias = nullptr;
  const Instruction* aux = nullptr;
  const Instruction* residual = nullptr;
  bool gelu = false;
  bool transposed = false;
  auto step = [&](const Instruction* x) { return SkipConverts(x, plan); };
  cur = step(cur);
  if (const Instruction* u = SingleUser(cur); u != nullptr && u->opcode() == Opcode::kAdd) {
    const Instruction* b = u->operand(0) == cur ? u->operand(1) : u->operand(0);
    if (b->opcode() == Opcode::kBroadcast && b->operand(0)->shape().rank() == 1 &&
        b->attrs().dimensions == std::vector<int64_t>{cur->shape().rank() - 1}) {
      bias = ParameterThroughConverts(b->operand(0));
      if (bias == nullptr) return Error("%{}: bias is not a fusion operand", name);
      cur = step(u);
    }
  }
  // Note [GELU epilogues]: the GELU, of `cur` or of its widened copy (then
  // `cur` is the bf16 pre-activation the backward keeps: the aux)...
  if (std::optional<passes::GeluRegion> g = passes::MatchGelu(cur)) {
    if (g->erf) return Error("%{}: erf GELU has no cuBLASLt epilogue (tanh only)", name);
    gelu = true;
    if (OutputIndex(outputs, cur) >= 0) aux = cur;
    const Instruction* first = g->ops.front();
    if (first->opcode() == Opcode::kConvert && first->operand(0) == cur &&
        ir::DTypeBytes(cur->shape().dtype()) < ir::DTypeBytes(first->shape().dtype())) {
      plan.notes.push_back(fmt::format(
          "{} rounding of %{} before the GELU is skipped (cuBLASLt applies it to the f32 value)",
          ir::DTypeName(cur->shape().dtype()), cur->name()));
    }
    cur = step(g->sink);
  }
  // ...or, after the bare dot, the GELU backward reading the aux.
  const Instruction* dgelu_x = nullptr;
  if (!gelu && bias == nullptr) {
    auto is_parameter = [](const Instruction* x) { return x->opcode() == Opcode::kParameter; };
    if (std::optional<passes::GeluRegion> g = passes::MatchGeluGrad(cur, is_parameter)) {
      dgelu_x = g->x;
      cur = step(g->sink);
    }
  }
  if (const Instruction* u = SingleUser(cur); u != nullptr && u->opcode() == Opcode::kAdd) {
    const Instruction* r = u->operand(0) == cur ? u->operand(1) : u->operand(0);
    if (r->shape() == cur->shape() && r->opcode() == Opcode::kParameter) {
      if (gelu || dgelu_x) return Error("%{}: residual after GELU has no cuBLASLt epilogue", name);
      residual = r;
      cur = step(u);
    }
  }
  if (cur == dot && dot->shape().rank() == 2) {
    if (const Instruction* u = SingleUser(cur); u != nullptr && u->opcode() == Opcode::kTranspose) {
      transposed = true;
      std::swap(lhs, rhs);
      cur = step(u);  // a widening convert after the transpose is cuBLASLt's D type
    }
  }
  int64_t d_output = OutputIndex(outputs, cur);
  if (d_output < 0) {
    return Error("%{}: %{} ({}) is not a cuBLASLt epilogue", name,
                 SingleUser(cur) ? SingleUser(cur)->name() : cur->name(),
                 ir::OpcodeName(SingleUser(cur) ? SingleUser(cur)->opcode() : cur->opcode()));
  }
  plan.d_output = d_output;
  RETURN_IF_ERROR(FillProblem(name, lhs, rhs, cur->shape().dtype(), plan));

  // Extra outputs: the GELU pre-activation (aux) and the bias gradient.
  int64_t bgrad_operand = -1;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Instruction* o = outputs[i];
    if (static_cast<int64_t>(i) == d_output) continue;
    if (o == aux) {
      plan.aux_output = static_cast<int64_t>(i);
      continue;
    }
    // A column sum, with a round trip through a narrower type after it (the
    // gradient of a bf16 bias copy): cuBLASLt writes the sum unrounded.
    const Instruction* r = o;
    while (r->opcode() == Opcode::kConvert) r = r->operand(0);
    if (r->opcode() == Opcode::kReduce && r->attrs().reduce_kind == ir::ReduceKind::kSum &&
        r->shape().rank() == 1 && r->shape().dtype() == o->shape().dtype() &&
        plan.bias_grad_output < 0) {
      const Instruction* p = ParameterThroughConverts(r->operand(0));
      if (p != nullptr) {
        plan.bias_grad_output = static_cast<int64_t>(i);
        bgrad_operand = p->attrs().index;
        plan.bias_dtype = CudaDataType(o->shape().dtype());
        for (const Instruction* c = o; c != r; c = c->operand(0)) {
          if (ir::DTypeBytes(c->operand(0)->shape().dtype()) > ir::DTypeBytes(c->shape().dtype())) {
            plan.notes.push_back(fmt::format("{} rounding of the bias gradient %{} is skipped",
                                             ir::DTypeName(c->shape().dtype()), c->name()));
          }
        }
        continue;
      }
    }
    return Error("%{}: output {} (%{}) is not a cuBLASLt epilogue output", name, i, o->name());
  }
  if (transposed && (bias || residual || gelu || dgelu_x)) {
    return Error("%{}: transposed result with an epilogue", name);
  }
  if (bias != nullptr) {
    // cuBLASLt's bias has D's type (cublasLt.h, BIAS_DATA_TYPE); fusion
    // keeps other biases out of the gemm (Note [bias of D's type]).
    if (bias->shape().dtype() != cur->shape().dtype()) {
      return Error("%{}: a {} bias with a {} result (cuBLASLt's bias has the result's type)",
                   name, ir::DTypeName(bias->shape().dtype()),
                   ir::DTypeName(cur->shape().dtype()));
    }
    plan.bias_operand = bias->attrs().index;
    plan.bias_dtype = CudaDataType(bias->shape().dtype());
  }
  if (residual != nullptr) {
    if (residual->shape().dtype() != cur->shape().dtype()) {
      return Error("%{}: residual {} and result {} differ in dtype (cuBLASLt needs C = D)", name,
                   ir::DTypeName(residual->shape().dtype()), ir::DTypeName(cur->shape().dtype()));
    }
    plan.c_operand = residual->attrs().index;
    plan.beta = 1.0;
  }
  if (dgelu_x != nullptr) {
    aux = dgelu_x;
    plan.aux_operand = dgelu_x->attrs().index;
  }
  if (plan.aux_output >= 0 || plan.aux_operand >= 0) {
    if (aux->shape().dtype() != cur->shape().dtype() ||
        aux->shape().dims() != cur->shape().dims()) {
      return Error("%{}: GELU aux %{} is {}, the result {} (cuBLASLt's aux is laid out as D)", name,
                   aux->name(), aux->shape().ToString(), cur->shape().ToString());
    }
    // cublasLt.h, EPILOGUE_AUX_LD: "divisible by 8 and no less than the
    // number of rows in the output matrix".
    plan.aux_ld = plan.d.ld;
    if (plan.aux_ld % 8 != 0) {
      return Error(
          "%{}: GELU aux leading dimension {} is not a multiple of 8 (cuBLASLt's "
          "EPILOGUE_AUX_LD)",
          name, plan.aux_ld);
    }
  }
  if (plan.bias_grad_output >= 0) {
    if (bias || gelu || residual || dgelu_x) {
      return Error("%{}: bias gradient combined with another epilogue", name);
    }
    if (plan.batch_count != 1) return Error("%{}: batched bias gradient", name);
    if (bgrad_operand == plan.a_operand) {
      plan.epilogue = "CUBLASLT_EPILOGUE_BGRADA";
    } else if (bgrad_operand == plan.b_operand) {
      plan.epilogue = "CUBLASLT_EPILOGUE_BGRADB";
    } else if (int64_t o = ConvertedOperand(fusion, bgrad_operand, plan); o >= 0) {
      plan.epilogue = o == plan.a_operand ? "CUBLASLT_EPILOGUE_BGRADA" : "CUBLASLT_EPILOGUE_BGRADB";
    } else {
      return Error("%{}: bias gradient of operand {} that the dot does not read", name,
                   bgrad_operand);
    }
    return plan;
  }
  if (dgelu_x != nullptr) {
    plan.epilogue = "CUBLASLT_EPILOGUE_DGELU";
  } else if (gelu) {
    plan.epilogue = plan.aux_output >= 0
                        ? (bias ? "CUBLASLT_EPILOGUE_GELU_AUX_BIAS" : "CUBLASLT_EPILOGUE_GELU_AUX")
                        : (bias ? "CUBLASLT_EPILOGUE_GELU_BIAS" : "CUBLASLT_EPILOGUE_GELU");
  } else if (bias) {
    plan.epilogue = "CUBLASLT_EPILOGUE_BIAS";
  }
  return plan;
}

}  // namespace

std::string CudaDataType(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kBF16:
      return "CUDA_R_16BF";
    case ir::DType::kF16:
      return "CUDA_R_16F";
    case ir::DType::kF32:
      return "CUDA_R_32F";
    default:
      return "";
  }
}

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
