#include "compiler/artifact/gemm_plan.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "compiler/analysis/gelu_epilogue.h"
#include "compiler/ir/computation.h"

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

// What follows the dot inside the fusion, as cuBLASLt epilogue parts.
struct EpilogueChain {
  const Instruction* result = nullptr;    // D: the last value of the chain
  const Instruction* bias = nullptr;      // the fusion parameter added as bias
  const Instruction* aux = nullptr;       // GELU_AUX: the pre-activation output
  const Instruction* residual = nullptr;  // added through C (beta = 1)
  const Instruction* dgelu_x = nullptr;   // DGELU: the pre-activation parameter
  bool gelu = false;
  bool transposed = false;  // a 2-D transpose of the dot: lhs and rhs swap
};

// bias: add(cur, broadcast(parameter)) along the last dim.
Status MatchBias(const std::string& name, EpilogueChain& e, GemmPlan& plan) {
  const Instruction* u = SingleUser(e.result);
  if (u == nullptr || u->opcode() != Opcode::kAdd) return Status::Ok();
  const Instruction* b = u->operand(0) == e.result ? u->operand(1) : u->operand(0);
  if (b->opcode() != Opcode::kBroadcast || b->operand(0)->shape().rank() != 1 ||
      b->attrs().dimensions != std::vector<int64_t>{e.result->shape().rank() - 1}) {
    return Status::Ok();
  }
  e.bias = ParameterThroughConverts(b->operand(0));
  if (e.bias == nullptr) return Error("%{}: bias is not a fusion operand", name);
  e.result = SkipConverts(u, plan);
  return Status::Ok();
}

// Note [GELU epilogues]: the GELU, of `result` or of its widened copy (then
// `result` is the bf16 pre-activation the backward keeps: the aux), or,
// after the bare dot, the GELU backward reading the aux.
Status MatchGelu(const std::string& name, const std::vector<const Instruction*>& outputs,
                 EpilogueChain& e, GemmPlan& plan) {
  const Instruction* cur = e.result;
  if (std::optional<analysis::GeluRegion> g = analysis::MatchGelu(cur)) {
    if (g->erf) return Error("%{}: erf GELU has no cuBLASLt epilogue (tanh only)", name);
    e.gelu = true;
    if (OutputIndex(outputs, cur) >= 0) e.aux = cur;
    const Instruction* first = g->ops.front();
    if (first->opcode() == Opcode::kConvert && first->operand(0) == cur &&
        ir::DTypeBytes(cur->shape().dtype()) < ir::DTypeBytes(first->shape().dtype())) {
      plan.notes.push_back(fmt::format(
          "{} rounding of %{} before the GELU is skipped (cuBLASLt applies it to the f32 value)",
          ir::DTypeName(cur->shape().dtype()), cur->name()));
    }
    e.result = SkipConverts(g->sink, plan);
    return Status::Ok();
  }
  if (e.bias != nullptr) return Status::Ok();
  auto is_parameter = [](const Instruction* x) { return x->opcode() == Opcode::kParameter; };
  if (std::optional<analysis::GeluRegion> g = analysis::MatchGeluGrad(cur, is_parameter)) {
    e.dgelu_x = g->x;
    e.result = SkipConverts(g->sink, plan);
  }
  return Status::Ok();
}

// Epilogue: converts, bias, converts, GELU, converts, residual, converts, or
// a 2-D transpose of the dot (the order fusion absorbs them in).
StatusOr<EpilogueChain> MatchEpilogue(const std::string& name, FusedDot& f,
                                      const std::vector<const Instruction*>& outputs,
                                      GemmPlan& plan) {
  EpilogueChain e;
  e.result = SkipConverts(f.dot, plan);
  RETURN_IF_ERROR(MatchBias(name, e, plan));
  RETURN_IF_ERROR(MatchGelu(name, outputs, e, plan));
  if (const Instruction* u = SingleUser(e.result); u != nullptr && u->opcode() == Opcode::kAdd) {
    const Instruction* r = u->operand(0) == e.result ? u->operand(1) : u->operand(0);
    if (r->shape() == e.result->shape() && r->opcode() == Opcode::kParameter) {
      if (e.gelu || e.dgelu_x) {
        return Error("%{}: residual after GELU has no cuBLASLt epilogue", name);
      }
      e.residual = r;
      e.result = SkipConverts(u, plan);
    }
  }
  if (e.result == f.dot && f.dot->shape().rank() == 2) {
    if (const Instruction* u = SingleUser(e.result);
        u != nullptr && u->opcode() == Opcode::kTranspose) {
      e.transposed = true;
      std::swap(f.lhs, f.rhs);
      e.result = SkipConverts(u, plan);  // a widening convert after it is cuBLASLt's D type
    }
  }
  return e;
}

// The fusion's outputs besides D: the GELU pre-activation (aux) and the bias
// gradient (a column sum, maybe rounded through a narrower type after it:
// cuBLASLt writes the sum unrounded). Returns the fusion operand the bias
// gradient sums, or -1.
StatusOr<int64_t> MatchExtraOutputs(const std::string& name,
                                    const std::vector<const Instruction*>& outputs,
                                    const EpilogueChain& e, GemmPlan& plan) {
  int64_t bgrad_operand = -1;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Instruction* o = outputs[i];
    if (static_cast<int64_t>(i) == plan.d_output) continue;
    if (o == e.aux) {
      plan.aux_output = static_cast<int64_t>(i);
      continue;
    }
    const Instruction* r = o;
    while (r->opcode() == Opcode::kConvert) r = r->operand(0);
    const Instruction* p = nullptr;
    if (r->opcode() == Opcode::kReduce && r->attrs().reduce_kind == ir::ReduceKind::kSum &&
        r->shape().rank() == 1 && r->shape().dtype() == o->shape().dtype() &&
        plan.bias_grad_output < 0) {
      p = ParameterThroughConverts(r->operand(0));
    }
    if (p == nullptr) {
      return Error("%{}: output {} (%{}) is not a cuBLASLt epilogue output", name, i, o->name());
    }
    plan.bias_grad_output = static_cast<int64_t>(i);
    bgrad_operand = p->attrs().index;
    plan.bias_dtype = program::GemmDTypeOf(o->shape().dtype());
    for (const Instruction* c = o; c != r; c = c->operand(0)) {
      if (ir::DTypeBytes(c->operand(0)->shape().dtype()) > ir::DTypeBytes(c->shape().dtype())) {
        plan.notes.push_back(fmt::format("{} rounding of the bias gradient %{} is skipped",
                                         ir::DTypeName(c->shape().dtype()), c->name()));
      }
    }
  }
  return bgrad_operand;
}

// The bias, residual and aux buffers, checked against what cuBLASLt takes.
Status PlaceEpilogueBuffers(const std::string& name, const EpilogueChain& e, GemmPlan& plan) {
  const Instruction* d = e.result;
  if (e.transposed && (e.bias || e.residual || e.gelu || e.dgelu_x)) {
    return Error("%{}: transposed result with an epilogue", name);
  }
  if (e.bias != nullptr) {
    // cuBLASLt's bias has D's type (cublasLt.h, BIAS_DATA_TYPE); fusion
    // keeps other biases out of the gemm (Note [bias of D's type]).
    if (e.bias->shape().dtype() != d->shape().dtype()) {
      return Error("%{}: a {} bias with a {} result (cuBLASLt's bias has the result's type)", name,
                   ir::DTypeName(e.bias->shape().dtype()), ir::DTypeName(d->shape().dtype()));
    }
    plan.bias_operand = e.bias->attrs().index;
    plan.bias_dtype = program::GemmDTypeOf(e.bias->shape().dtype());
  }
  if (e.residual != nullptr) {
    if (e.residual->shape().dtype() != d->shape().dtype()) {
      return Error("%{}: residual {} and result {} differ in dtype (cuBLASLt needs C = D)", name,
                   ir::DTypeName(e.residual->shape().dtype()), ir::DTypeName(d->shape().dtype()));
    }
    plan.c_operand = e.residual->attrs().index;
    plan.beta = 1.0;
  }
  if (e.dgelu_x != nullptr) plan.aux_operand = e.dgelu_x->attrs().index;
  const Instruction* aux = e.dgelu_x != nullptr ? e.dgelu_x : e.aux;
  if (plan.aux_output < 0 && plan.aux_operand < 0) return Status::Ok();
  if (aux->shape().dtype() != d->shape().dtype() || aux->shape().dims() != d->shape().dims()) {
    return Error("%{}: GELU aux %{} is {}, the result {} (cuBLASLt's aux is laid out as D)", name,
                 aux->name(), aux->shape().ToString(), d->shape().ToString());
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
  return Status::Ok();
}

// The epilogue the matched chain and outputs amount to.
StatusOr<program::GemmEpilogue> ChooseEpilogue(const Instruction& fusion, const EpilogueChain& e,
                                               int64_t bgrad_operand, GemmPlan& plan) {
  using program::GemmEpilogue;
  const std::string& name = fusion.name();
  if (plan.bias_grad_output >= 0) {
    if (e.bias || e.gelu || e.residual || e.dgelu_x) {
      return Error("%{}: bias gradient combined with another epilogue", name);
    }
    if (plan.batch_count != 1) return Error("%{}: batched bias gradient", name);
    int64_t reduced = bgrad_operand;
    if (reduced != plan.a_operand && reduced != plan.b_operand) {
      reduced = ConvertedOperand(fusion, bgrad_operand, plan);
    }
    if (reduced == plan.a_operand) return GemmEpilogue::kBGradA;
    if (reduced == plan.b_operand) return GemmEpilogue::kBGradB;
    return Error("%{}: bias gradient of operand {} that the dot does not read", name,
                 bgrad_operand);
  }
  if (e.dgelu_x != nullptr) return GemmEpilogue::kDGelu;
  if (e.gelu) {
    if (plan.aux_output >= 0) return e.bias ? GemmEpilogue::kGeluAuxBias : GemmEpilogue::kGeluAux;
    return e.bias ? GemmEpilogue::kGeluBias : GemmEpilogue::kGelu;
  }
  return e.bias ? GemmEpilogue::kBias : GemmEpilogue::kDefault;
}

StatusOr<GemmPlan> PlanFusion(const Instruction& fusion) {
  const std::string& name = fusion.name();
  ASSIGN_OR_RETURN(FusedDot f, FindFusedDot(fusion));
  const std::vector<const Instruction*> outputs = Outputs(*fusion.called_computation());
  GemmPlan plan;
  ASSIGN_OR_RETURN(EpilogueChain e, MatchEpilogue(name, f, outputs, plan));
  plan.d_output = OutputIndex(outputs, e.result);
  if (plan.d_output < 0) {
    const Instruction* at = SingleUser(e.result) ? SingleUser(e.result) : e.result;
    return Error("%{}: %{} ({}) is not a cuBLASLt epilogue", name, at->name(),
                 ir::OpcodeName(at->opcode()));
  }
  RETURN_IF_ERROR(FillProblem(name, f.lhs, f.rhs, e.result->shape().dtype(), plan));
  ASSIGN_OR_RETURN(int64_t bgrad_operand, MatchExtraOutputs(name, outputs, e, plan));
  RETURN_IF_ERROR(PlaceEpilogueBuffers(name, e, plan));
  ASSIGN_OR_RETURN(plan.epilogue, ChooseEpilogue(fusion, e, bgrad_operand, plan));
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
