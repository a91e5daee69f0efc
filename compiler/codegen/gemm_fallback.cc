#include "compiler/codegen/gemm_fallback.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "compiler/ir/computation.h"
#include "compiler/ir/parser.h"

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
    const Instruction* r = outputs[i];
    if (r->opcode() != Opcode::kReduce || r->attrs().reduce_kind != ir::ReduceKind::kSum ||
        r->shape().rank() != 1) {
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

}  // namespace gptc::codegen
