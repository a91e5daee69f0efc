#include "compiler/analysis/gemm_epilogue.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <initializer_list>

#include "compiler/ir/computation.h"
#include "compiler/ir/patterns.h"

namespace gptc::analysis {

namespace {

using ir::Instruction;
using ir::Opcode;

// cuBLASLt's bias has D's type (fusion keeps other biases out of the gemm:
// Note [bias of D's type] in passes/gemm_fusion.cc).
std::optional<std::string> BiasOfDType(const GemmEpilogueBuffers& b) {
  if (!b.bias || *b.bias == b.d.dtype()) return std::nullopt;
  return fmt::format("a {} bias with a {} result (cuBLASLt's bias has the result's type)",
                     ir::DTypeName(*b.bias), ir::DTypeName(b.d.dtype()));
}

// C, the residual, shares D's type and layout.
std::optional<std::string> ResidualOfDType(const GemmEpilogueBuffers& b) {
  if (!b.residual || *b.residual == b.d.dtype()) return std::nullopt;
  return fmt::format("residual {} and result {} differ in dtype (cuBLASLt needs C = D)",
                     ir::DTypeName(*b.residual), ir::DTypeName(b.d.dtype()));
}

// The aux matrix is laid out as D: its type and dims.
std::optional<std::string> AuxLaidOutAsD(const GemmEpilogueBuffers& b) {
  if (b.aux == nullptr ||
      (b.aux->shape().dtype() == b.d.dtype() && b.aux->shape().dims() == b.d.dims())) {
    return std::nullopt;
  }
  return fmt::format("GELU aux %{} is {}, the result {} (cuBLASLt's aux is laid out as D)",
                     b.aux->name(), b.aux->shape().ToString(), b.d.ToString());
}

// cublasLt.h, EPILOGUE_AUX_LD: "divisible by 8 and no less than the number
// of rows in the output matrix" (D's ld, which aux shares).
std::optional<std::string> AuxLdDivisibleBy8(const GemmEpilogueBuffers& b) {
  if (b.aux == nullptr || b.d_ld % 8 == 0) return std::nullopt;
  return fmt::format(
      "GELU aux leading dimension {} is not a multiple of 8 (cuBLASLt's EPILOGUE_AUX_LD)", b.d_ld);
}

// The BGRAD epilogues sum one matrix: no strided batch.
std::optional<std::string> BiasGradientUnbatched(const GemmEpilogueBuffers& b) {
  if (!b.bias_grad || b.batch == 1) return std::nullopt;
  return std::string("batched bias gradient");
}

constexpr std::array<GemmEpilogueLimit, 5> kGemmEpilogueLimits = {{
    {"CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE", &BiasOfDType},
    {"CUBLASLT_MATMUL_DESC_C_DESC", &ResidualOfDType},
    {"CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER", &AuxLaidOutAsD},
    {"CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD", &AuxLdDivisibleBy8},
    {"CUBLASLT_EPILOGUE_BGRADA", &BiasGradientUnbatched},
}};

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

}  // namespace

std::span<const GemmEpilogueLimit> GemmEpilogueLimits() { return kGemmEpilogueLimits; }

std::optional<std::string> BrokenGemmEpilogueLimit(const GemmEpilogueBuffers& b) {
  for (const GemmEpilogueLimit& limit : kGemmEpilogueLimits) {
    if (std::optional<std::string> breach = limit.check(b)) return breach;
  }
  return std::nullopt;
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
