#include "compiler/codegen/gemm_fallback.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "compiler/ir/computation.h"
#include "compiler/ir/parser.h"
#include "compiler/ir/patterns.h"
#include "compiler/ir/printer.h"

namespace gptc::codegen {

using ir::Instruction;
using ir::Opcode;

StatusOr<std::optional<GemmFallbackFusion>> BiasGradientFallback(const Instruction& gemm) {
  const ir::Computation* c = gemm.called_computation();
  const std::optional<ir::GemmEpilogue>& e = gemm.attrs().gemm_epilogue;
  if (c == nullptr || !e || e->bias_grad_out < 0) return std::optional<GemmFallbackFusion>();
  const int64_t i = e->bias_grad_out;
  const Instruction* output = ir::FusionOutput(gemm, i);
  // The sum, or a round trip of it through a narrower type (the gradient
  // of a bf16 bias copy), which the kernel skips as cuBLASLt does.
  const Instruction* r = output;
  while (r->opcode() == Opcode::kConvert) r = r->operand(0);
  if (r->opcode() != Opcode::kReduce || r->shape() != output->shape()) {
    return Error("%{}: bias gradient output {} is not a sum", gemm.name(), i);
  }
  // The operand through converts, innermost first.
  std::vector<const Instruction*> converts;
  const Instruction* x = r->operand(0);
  while (x->opcode() == Opcode::kConvert) {
    converts.push_back(x);
    x = x->operand(0);
  }
  if (x->opcode() != Opcode::kParameter) {
    return Error("%{}: bias gradient output {} does not sum an operand", gemm.name(), i);
  }
  // The reduce alone, as IR text: the parser builds it as the emitters
  // expect every fusion (a reduction fusion in an entry).
  std::string body = fmt::format("  %p0 = {} parameter(0)\n", x->shape().ToString());
  std::string last = "%p0";
  for (auto it = converts.rbegin(); it != converts.rend(); ++it) {
    const std::string name = fmt::format("%c{}", converts.rend() - it);
    body += fmt::format("  {} = {} convert({})\n", name, (*it)->shape().ToString(), last);
    last = name;
  }
  body += fmt::format("  ROOT %r = {} reduce({}), dimensions={}, kind=sum\n", r->shape().ToString(),
                      last, ir::DimsToString(r->attrs().dimensions));
  const std::string name = gemm.name() + ".bgrad";
  const std::string text = fmt::format(
      "module fallback\n%fused.bgrad {{\n{}}}\n\nENTRY %main {{\n  %x = {} parameter(0)\n"
      "  ROOT %{} = {} fusion(%x), kind=reduction, calls=%fused.bgrad, meta=\"{}\"\n}}\n",
      body, x->shape().ToString(), name, r->shape().ToString(), gemm.metadata());
  StatusOr<std::unique_ptr<ir::Module>> module = ir::ParseAndVerifyModule(text, name);
  if (!module.ok()) {
    return Error("%{}: the bias-gradient fallback kernel: {}", gemm.name(),
                 module.status().message());
  }
  GemmFallbackFusion out;
  out.module = std::move(module).value();
  out.fusion = out.module->entry()->root();
  out.gemm_operand = x->attrs().index;
  out.gemm_output = i;
  return std::optional<GemmFallbackFusion>(std::move(out));
}

StatusOr<std::optional<GemmFallbackFusion>> EpilogueFallback(const Instruction& gemm) {
  const ir::Computation* c = gemm.called_computation();
  const std::optional<ir::GemmEpilogue>& e = gemm.attrs().gemm_epilogue;
  // Converts and a transpose of the dot alone are no epilogue to carry.
  if (c == nullptr || !e ||
      (e->bias < 0 && e->residual < 0 && e->activation == ir::GemmActivation::kNone)) {
    return std::optional<GemmFallbackFusion>();
  }
  const Instruction* dot = nullptr;
  for (const auto& inst : c->instructions()) {
    if (inst->opcode() == Opcode::kDot) dot = inst.get();
  }
  if (dot == nullptr) return Error("%{}: gemm fusion without a dot", gemm.name());
  const Instruction* root = c->root();
  const int64_t n = gemm.operand_count();
  const ir::Shape wide = dot->shape().WithDType(ir::DType::kF32);
  std::string body;
  for (const auto& inst : c->instructions()) {
    std::string line = ir::PrintInstruction(*inst);
    if (inst.get() == dot) {
      // The plain gemm writes f32; a narrower dot result (DGELU's) is
      // rounded here, as the IR rounds it.
      line = fmt::format("%{} = {} parameter({})", dot->name(), wide.ToString(), n);
      if (wide != dot->shape()) {
        line = fmt::format("%{}.f32 = {} parameter({})\n  %{} = {} convert(%{}.f32)", dot->name(),
                           wide.ToString(), n, dot->name(), dot->shape().ToString(), dot->name());
      }
    }
    body += fmt::format("  {}{}\n", inst.get() == root ? "ROOT " : "", line);
  }
  std::string operands, entry;
  for (int64_t i = 0; i <= n; ++i) {
    const ir::Shape& shape = i < n ? gemm.operand(i)->shape() : wide;
    entry += fmt::format("  %x{} = {} parameter({})\n", i, shape.ToString(), i);
    operands += fmt::format("{}%x{}", i > 0 ? ", " : "", i);
  }
  const std::string name = gemm.name() + ".epilogue";
  const std::string text = fmt::format(
      "module fallback\n%fused.epilogue {{\n{}}}\n\nENTRY %main {{\n{}  ROOT %{} = {} "
      "fusion({}), kind=loop, calls=%fused.epilogue, meta=\"{}\"\n}}\n",
      body, entry, name, gemm.shape().ToString(), operands, gemm.metadata());
  StatusOr<std::unique_ptr<ir::Module>> module = ir::ParseAndVerifyModule(text, name);
  if (!module.ok()) {
    return Error("%{}: the epilogue fallback kernel: {}", gemm.name(), module.status().message());
  }
  GemmFallbackFusion out;
  out.module = std::move(module).value();
  out.fusion = out.module->entry()->root();
  out.gemm_operand = n;
  return std::optional<GemmFallbackFusion>(std::move(out));
}

}  // namespace gptc::codegen
