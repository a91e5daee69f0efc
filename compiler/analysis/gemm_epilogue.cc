#include "compiler/analysis/gemm_epilogue.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "compiler/analysis/gelu_epilogue.h"
#include "compiler/analysis/gemm_activations.h"
#include "compiler/ir/computation.h"
#include "compiler/ir/patterns.h"

namespace gptc::analysis {

namespace {

using ir::Instruction;
using ir::Opcode;

const Instruction* SkipConverts(const Instruction* x) {
  for (const Instruction* u = ir::SoleUser(x); u != nullptr && u->opcode() == Opcode::kConvert;
       u = ir::SoleUser(x)) {
    x = u;
  }
  return x;
}

// The fusion parameter `x` reads through `through` ops, or null.
const Instruction* ParameterThrough(const Instruction* x, std::initializer_list<Opcode> through) {
  while (std::find(through.begin(), through.end(), x->opcode()) != through.end()) {
    x = x->operand(0);
  }
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

// What follows the dot inside the fusion.
struct Chain {
  const Instruction* result = nullptr;    // D: the last value of the chain
  const Instruction* bias = nullptr;      // the fusion parameter added as bias
  const Instruction* aux = nullptr;       // GELU: the pre-activation, an output
  const Instruction* residual = nullptr;  // added whole
  const Instruction* dgelu_x = nullptr;   // GELU backward: the pre-activation parameter
  ir::GemmActivation activation = ir::GemmActivation::kNone;
  bool transposed = false;
};

// bias: add(cur, broadcast(parameter)) along the last dim.
Status MatchBias(const std::string& name, Chain& e) {
  const Instruction* u = ir::SoleUser(e.result);
  if (u == nullptr || u->opcode() != Opcode::kAdd) return Status::Ok();
  const Instruction* b = u->operand(0) == e.result ? u->operand(1) : u->operand(0);
  if (b->opcode() != Opcode::kBroadcast || b->operand(0)->shape().rank() != 1 ||
      b->attrs().dimensions != std::vector<int64_t>{e.result->shape().rank() - 1}) {
    return Status::Ok();
  }
  e.bias = ParameterThrough(b->operand(0), {Opcode::kConvert});
  if (e.bias == nullptr) return Error("%{}: bias is not a fusion operand", name);
  e.result = SkipConverts(u);
  return Status::Ok();
}

// Note [GELU epilogues]: the GELU, of `result` or of its widened copy (then
// `result` is the bf16 pre-activation the backward keeps: the aux), or,
// after the bare dot, the GELU backward reading the aux; or a one-op
// activation (Note [gemm activations]).
Status MatchActivation(const std::string& name, const std::vector<const Instruction*>& outputs,
                       Chain& e) {
  const Instruction* cur = e.result;
  if (std::optional<GeluRegion> g = MatchGelu(cur)) {
    if (g->erf) return Error("%{}: erf GELU has no cuBLASLt epilogue (tanh only)", name);
    e.activation = ir::GemmActivation::kGelu;
    if (OutputIndex(outputs, cur) >= 0) e.aux = cur;
    e.result = SkipConverts(g->sink);
    return Status::Ok();
  }
  if (const Instruction* u = ir::SoleUser(cur); u != nullptr) {
    if (std::optional<ir::GemmActivation> a = MatchOneOpActivation(*u, cur)) {
      e.activation = *a;
      e.result = SkipConverts(u);
      return Status::Ok();
    }
  }
  if (e.bias != nullptr) return Status::Ok();
  auto is_parameter = [](const Instruction* x) { return x->opcode() == Opcode::kParameter; };
  if (std::optional<GeluRegion> g = MatchGeluGrad(cur, is_parameter)) {
    e.activation = ir::GemmActivation::kGeluGrad;
    e.dgelu_x = g->x;
    e.result = SkipConverts(g->sink);
  }
  return Status::Ok();
}

// Converts, bias, converts, GELU, converts, residual, converts, or a 2-D
// transpose of the dot.
StatusOr<Chain> MatchChain(const std::string& name, const Instruction* dot,
                           const std::vector<const Instruction*>& outputs) {
  Chain e;
  e.result = SkipConverts(dot);
  RETURN_IF_ERROR(MatchBias(name, e));
  RETURN_IF_ERROR(MatchActivation(name, outputs, e));
  if (const Instruction* u = ir::SoleUser(e.result); u != nullptr && u->opcode() == Opcode::kAdd) {
    const Instruction* r = u->operand(0) == e.result ? u->operand(1) : u->operand(0);
    if (r->shape() == e.result->shape() && r->opcode() == Opcode::kParameter) {
      if (e.activation != ir::GemmActivation::kNone) {
        return Error("%{}: residual after the {} has no cuBLASLt epilogue", name,
                     ir::GemmActivationName(e.activation));
      }
      e.residual = r;
      e.result = SkipConverts(u);
    }
  }
  if (e.result == dot && dot->shape().rank() == 2) {
    if (const Instruction* u = ir::SoleUser(e.result);
        u != nullptr && u->opcode() == Opcode::kTranspose) {
      e.transposed = true;
      e.result = SkipConverts(u);  // a widening convert after it is cuBLASLt's D type
    }
  }
  return e;
}

// The bias gradient output `o`: a rank-1 sum, maybe rounded through a
// narrower type after it, of a fusion parameter through converts; or null.
const Instruction* SummedParameter(const Instruction* o) {
  const Instruction* r = o;
  while (r->opcode() == Opcode::kConvert) r = r->operand(0);
  if (r->opcode() != Opcode::kReduce || r->attrs().reduce_kind != ir::ReduceKind::kSum ||
      r->shape().rank() != 1 || r->shape().dtype() != o->shape().dtype()) {
    return nullptr;
  }
  return ParameterThrough(r->operand(0), {Opcode::kConvert});
}

// The operand of the dot that bias gradient's summed operand `summed` is,
// or whose narrower copy it is (the bias gradient of the f32 gradient is
// then taken from the bf16 copy the gemm reads); -1 when neither.
int64_t DotOperandSummed(const Instruction& fusion, const Instruction* dot, bool transposed,
                         int64_t summed) {
  std::vector<int64_t> read;  // cuBLASLt's A then B (Note [row-major on cuBLASLt])
  for (int side : transposed ? std::vector<int>{0, 1} : std::vector<int>{1, 0}) {
    const Instruction* p =
        ParameterThrough(dot->operand(side), {Opcode::kReshape, Opcode::kTranspose});
    if (p != nullptr) read.push_back(p->attrs().index);
  }
  if (std::find(read.begin(), read.end(), summed) != read.end()) return summed;
  for (int64_t o : read) {
    if (IsConvertOf(fusion.operand(o), fusion.operand(summed))) return o;
  }
  return -1;
}

}  // namespace

StatusOr<ir::GemmEpilogue> DescribeGemmEpilogue(const Instruction& fusion) {
  const std::string& name = fusion.name();
  const ir::Computation* c = fusion.called_computation();
  if (fusion.opcode() != Opcode::kFusion || c == nullptr) {
    return Error("%{}: not a fusion", name);
  }
  const Instruction* dot = nullptr;
  for (const auto& inst : c->instructions()) {
    if (inst->opcode() != Opcode::kDot) continue;
    if (dot != nullptr) return Error("%{}: gemm fusion with more than one dot", name);
    dot = inst.get();
  }
  if (dot == nullptr) return Error("%{}: gemm fusion without a dot", name);
  const std::vector<const Instruction*> outputs = Outputs(*c);
  ASSIGN_OR_RETURN(Chain chain, MatchChain(name, dot, outputs));
  ir::GemmEpilogue e;
  e.d = OutputIndex(outputs, chain.result);
  if (e.d < 0) {
    const Instruction* at = ir::SoleUser(chain.result) ? ir::SoleUser(chain.result) : chain.result;
    return Error("%{}: %{} ({}) is not a cuBLASLt epilogue", name, at->name(),
                 ir::OpcodeName(at->opcode()));
  }
  if (chain.bias != nullptr) e.bias = chain.bias->attrs().index;
  if (chain.residual != nullptr) e.residual = chain.residual->attrs().index;
  e.activation = chain.activation;
  if (chain.dgelu_x != nullptr) e.aux_in = chain.dgelu_x->attrs().index;
  e.transposed = chain.transposed;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Instruction* o = outputs[i];
    if (static_cast<int64_t>(i) == e.d) continue;
    if (o == chain.aux) {
      e.aux_out = static_cast<int64_t>(i);
      continue;
    }
    const Instruction* p = e.bias_grad_out < 0 ? SummedParameter(o) : nullptr;
    if (p == nullptr) {
      return Error("%{}: output {} (%{}) is not a cuBLASLt epilogue output", name, i, o->name());
    }
    e.bias_grad_out = static_cast<int64_t>(i);
    e.bias_grad_of = DotOperandSummed(fusion, dot, e.transposed, p->attrs().index);
    if (e.bias_grad_of < 0) {
      return Error("%{}: bias gradient of operand {} that the dot does not read", name,
                   p->attrs().index);
    }
  }
  return e;
}

std::vector<std::string> SkippedRoundings(const Instruction& fusion,
                                          const ir::GemmEpilogue& epilogue) {
  std::vector<std::string> notes;
  const std::vector<const Instruction*> outputs = Outputs(*fusion.called_computation());
  // The bias gradient's converts, from its output back to the sum.
  std::vector<const Instruction*> bias_grad;
  const Instruction* sum = nullptr;
  if (epilogue.bias_grad_out >= 0) {
    for (sum = outputs[epilogue.bias_grad_out]; sum->opcode() == Opcode::kConvert;
         sum = sum->operand(0)) {
      bias_grad.push_back(sum);
    }
  }
  const Instruction* aux = epilogue.aux_out >= 0 ? outputs[epilogue.aux_out] : nullptr;
  for (const auto& inst : fusion.called_computation()->instructions()) {
    const Instruction* x = inst->opcode() == Opcode::kConvert ? inst->operand(0) : nullptr;
    if (x == nullptr || !ir::IsWideningConvert(inst.get()) || x->opcode() == Opcode::kParameter ||
        std::find(bias_grad.begin(), bias_grad.end(), inst.get()) != bias_grad.end()) {
      continue;
    }
    const std::string_view dtype = ir::DTypeName(x->shape().dtype());
    if (x == aux && epilogue.activation == ir::GemmActivation::kGelu) {
      notes.push_back(fmt::format(
          "{} rounding of %{} before the GELU is skipped (cuBLASLt applies it to the f32 value)",
          dtype, x->name()));
    } else {
      notes.push_back(
          fmt::format("{} rounding of %{} is skipped (cuBLASLt keeps f32)", dtype, x->name()));
    }
  }
  for (const Instruction* c : bias_grad) {
    if (ir::DTypeBytes(c->operand(0)->shape().dtype()) > ir::DTypeBytes(c->shape().dtype())) {
      notes.push_back(fmt::format("{} rounding of the bias gradient %{} is skipped",
                                  ir::DTypeName(c->shape().dtype()), c->name()));
    }
  }
  if (sum != nullptr) {
    const Instruction* p = ParameterThrough(sum->operand(0), {Opcode::kConvert});
    if (p != nullptr && p->attrs().index != epilogue.bias_grad_of) {
      const Instruction* copy = fusion.operand(epilogue.bias_grad_of);
      notes.push_back(fmt::format("bias gradient summed from %{} (the {} copy of %{})",
                                  copy->name(), ir::DTypeName(copy->shape().dtype()),
                                  fusion.operand(p->attrs().index)->name()));
    }
  }
  return notes;
}

}  // namespace gptc::analysis
