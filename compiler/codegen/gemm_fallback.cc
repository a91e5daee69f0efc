#include "compiler/codegen/gemm_fallback.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "compiler/ir/computation.h"
#include "compiler/ir/parser.h"
#include "compiler/ir/printer.h"

namespace gptc::codegen {

using ir::Instruction;
using ir::Opcode;

StatusOr<std::optional<GemmFallbackFusion>> BiasGradientFallback(const Instruction& gemm) {
  const ir::Computation* c = gemm.called_computation();
  if (gemm.opcode() != Opcode::kFusion || c == nullptr) return std::optional<GemmFallbackFusion>();
  const Instruction* root = c->root();
  std::vector<const Instruction*> outputs;
  if (root->opcode() == Opcode::kTuple) {
    outputs.assign(root->operands().begin(), root->operands().end());
  } else {
    outputs.push_back(root);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    // The sum, or a round trip of it through a narrower type (the gradient
    // of a bf16 bias copy), which the kernel skips as cuBLASLt does.
    const Instruction* r = outputs[i];
    while (r->opcode() == Opcode::kConvert) r = r->operand(0);
    if (r->opcode() != Opcode::kReduce || r->attrs().reduce_kind != ir::ReduceKind::kSum ||
        r->shape().rank() != 1 || r->shape() != outputs[i]->shape()) {
      continue;
    }
    // The operand through converts, innermost first.
    std::vector<const Instruction*> converts;
    const Instruction* x = r->operand(0);
    while (x->opcode() == Opcode::kConvert) {
      converts.push_back(x);
      x = x->operand(0);
    }
    if (x->opcode() != Opcode::kParameter) continue;
    // The reduce alone, as IR text: the parser builds it as the emitters
    // expect every fusion (a reduction fusion in an entry).
    std::string body = fmt::format("  %p0 = {} parameter(0)\n", x->shape().ToString());
    std::string last = "%p0";
    for (auto it = converts.rbegin(); it != converts.rend(); ++it) {
      const std::string name = fmt::format("%c{}", converts.rend() - it);
      body += fmt::format("  {} = {} convert({})\n", name, (*it)->shape().ToString(), last);
      last = name;
    }
    body += fmt::format("  ROOT %r = {} reduce({}), dimensions={}, kind=sum\n",
                        r->shape().ToString(), last, ir::DimsToString(r->attrs().dimensions));
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
    out.gemm_output = static_cast<int64_t>(i);
    return std::optional<GemmFallbackFusion>(std::move(out));
  }
  return std::optional<GemmFallbackFusion>();
}

StatusOr<std::optional<GemmFallbackFusion>> EpilogueFallback(const Instruction& gemm) {
  const ir::Computation* c = gemm.called_computation();
  if (gemm.opcode() != Opcode::kFusion || c == nullptr) return std::optional<GemmFallbackFusion>();
  const Instruction* dot = nullptr;
  for (const auto& inst : c->instructions()) {
    if (inst->opcode() == Opcode::kDot) dot = inst.get();
  }
  if (dot == nullptr) return std::optional<GemmFallbackFusion>();
  // Through converts and transposes to an output: no epilogue to carry.
  std::vector<const Instruction*> outputs;
  const Instruction* root = c->root();
  if (root->opcode() == Opcode::kTuple) {
    outputs.assign(root->operands().begin(), root->operands().end());
  } else {
    outputs.push_back(root);
  }
  bool epilogue = false;
  for (const Instruction* x = dot;;) {
    if (std::find(outputs.begin(), outputs.end(), x) != outputs.end() && x->users().size() <= 1 &&
        (x->users().empty() || x->users()[0] == root)) {
      break;
    }
    const Instruction* u = x->users().size() == 1 ? x->users()[0] : nullptr;
    if (u == nullptr || (u->opcode() != Opcode::kConvert && u->opcode() != Opcode::kTranspose)) {
      epilogue = true;
      break;
    }
    x = u;
  }
  if (!epilogue) return std::optional<GemmFallbackFusion>();
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
